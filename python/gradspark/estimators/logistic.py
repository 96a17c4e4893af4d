"""Logistic regression (binomial and multinomial) trained by distributed SGD/L-BFGS."""

from __future__ import annotations

from typing import Optional

import numpy as np
from pyspark import keyword_only
from pyspark.ml.linalg import DenseMatrix, DenseVector, Vectors, VectorUDT
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasProbabilityCol, HasRawPredictionCol, HasThreshold
from pyspark.sql import DataFrame
from pyspark.sql.types import DoubleType
from scipy.special import expit, softmax

from gradspark.data.blocks import BINARY, CLASS_INDEX
from gradspark.data.statistics import DataStatistics
from gradspark.data.validation import InvalidDataError
from gradspark.estimators.base import LinearProblem, _LinearModel, _SGDLinearEstimator, append_outputs
from gradspark.losses import BinaryLogisticLoss, MultinomialLogisticLoss

FAMILIES = ("auto", "binomial", "multinomial")


class _LogisticRegressionParams(HasRawPredictionCol, HasProbabilityCol, HasThreshold):
    family: Param[str] = Param(
        Params._dummy(),
        "family",
        "label distribution: auto (binomial for 2 classes, else multinomial), "
        "binomial or multinomial",
        typeConverter=TypeConverters.toString,
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            family="auto", threshold=0.5, rawPredictionCol="rawPrediction",
            probabilityCol="probability", predictionCol="prediction",
            featuresCol="features", labelCol="label",
        )

    def getFamily(self) -> str:
        return self.getOrDefault(self.family)


class SGDLogisticRegression(_SGDLinearEstimator, _LogisticRegressionParams):
    """Logistic regression with driver-side parameter aggregation.

    Minimizes MLlib's objective: weighted mean log-loss plus
    ``regParam * (elasticNetParam * L1 + (1 - elasticNetParam) / 2 * L2)`` on
    the (optionally standardized) coefficients, intercept unpenalized, so at
    convergence the model matches ``pyspark.ml.classification.LogisticRegression``
    with the same Params. Each step broadcasts the weights and sums
    gradients of all partitions with ``treeAggregate``.

    Parameters
    ----------
    family : {"auto", "binomial", "multinomial"}
        ``auto`` picks binomial for labels {0, 1} and multinomial otherwise.
    optimizer : {"lbfgs", "sgd", "adagrad", "adam", "ftrl"}
        ``lbfgs`` (default, full batch) converges to MLlib's solution; the
        first-order optimizers support ``miniBatchFraction < 1``, a
        ``learningRateSchedule`` and ``stepSize``.
    miniBatchFraction : float
        Fraction of rows sampled per step, reproducibly from ``seed`` and the step.
    parameterSpace : {"auto", "standardized", "raw"}
        The coordinates the optimizer moves; the objective is the same. ``auto``
        takes ``raw`` for first-order optimizers on sparse data (where
        standardized Adam steps would move rare features' coefficients by
        ``stepSize / std``) and MLlib's ``standardized`` space otherwise.

    Examples
    --------
    >>> lr = SGDLogisticRegression(regParam=0.01, elasticNetParam=0.5)
    >>> model = lr.fit(train_df)            # doctest: +SKIP
    >>> model.transform(test_df)            # rawPrediction, probability, prediction
    """

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        rawPredictionCol: str = "rawPrediction",
        probabilityCol: str = "probability",
        weightCol: Optional[str] = None,
        family: str = "auto",
        maxIter: int = 100,
        tol: float = 1e-6,
        stepSize: float = 0.1,
        regParam: float = 0.0,
        elasticNetParam: float = 0.0,
        fitIntercept: bool = True,
        standardization: bool = True,
        threshold: float = 0.5,
        aggregationDepth: int = 2,
        miniBatchFraction: float = 1.0,
        optimizer: str = "lbfgs",
        learningRateSchedule: str = "constant",
        momentum: float = 0.0,
        nesterov: bool = False,
        parameterSpace: str = "auto",
        mode: str = "sync",
        maxStaleness: int = 2,
        parameterServers: int = 0,
        staleGradientPolicy: str = "none",
        delayCompensation: float = 0.04,
        adaptiveCompensation: bool = False,
        workerTimeout: float = 300.0,
        parameterServerHost: str = "",
        engine: str = "auto",
        executionStrategy: str = "auto",
        aggregationTopology: str = "star",
        compression: str = "none",
        compressionRatio: float = 0.01,
        errorFeedback: bool = True,
        localSteps: int = 1,
        workerQuorum: float = 1.0,
        sparsePull: bool = True,
        blockSize: int = 4096,
        checkpointDir: str = "",
        checkpointInterval: int = 10,
        keepCheckpoints: int = 3,
        resume: bool = True,
        checkpointData: bool = False,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__()
        self._set_given(self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs) -> "SGDLogisticRegression":
        """Set any of the constructor's Params."""
        return self._set_given(self._input_kwargs)

    def _label_domain(self) -> str:
        return BINARY if self.getFamily() == "binomial" else CLASS_INDEX

    def _problem(self, stats: DataStatistics) -> LinearProblem:
        family = self.getFamily()
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
        class_weights = stats.class_weights
        num_classes = len(class_weights)
        present = np.flatnonzero(class_weights > 0)
        if len(present) < 2:
            raise InvalidDataError(
                f"label column {self.getLabelCol()!r} holds a single class "
                f"({present.tolist()}); logistic regression needs at least two"
            )
        multinomial = family == "multinomial" or (family == "auto" and num_classes > 2)
        if not multinomial:
            odds = class_weights[1] / class_weights[0]
            return LinearProblem(
                BinaryLogisticLoss(), 1, self.getRegParam(),
                initial_intercepts=np.array([np.log(odds)]),
            )
        with np.errstate(divide="ignore"):
            priors = np.log(np.maximum(class_weights, 1e-300) / class_weights.sum())
        return LinearProblem(
            MultinomialLogisticLoss(), num_classes, self.getRegParam(),
            initial_intercepts=priors - priors.mean(),
        )

    def _make_model(self, coefficients, intercepts, aux, problem) -> "SGDLogisticRegressionModel":
        if problem.num_outputs > 1:
            # Softmax is invariant to a constant shift across classes. As MLlib does,
            # report mean-centered intercepts and, unregularized, centered coefficients.
            if self.getFitIntercept():
                intercepts = intercepts - intercepts.mean()
            if self.getRegParam() == 0.0:
                coefficients = coefficients - coefficients.mean(axis=1, keepdims=True)
        return SGDLogisticRegressionModel(coefficients, intercepts)


class SGDLogisticRegressionModel(_LinearModel, _LogisticRegressionParams):
    """Model fitted by :class:`SGDLogisticRegression`."""

    @property
    def numClasses(self) -> int:
        k = self._coefficient_matrix.shape[1]
        return 2 if k == 1 else k

    @property
    def isMultinomial(self) -> bool:
        return self._coefficient_matrix.shape[1] > 1

    @property
    def coefficients(self) -> DenseVector:
        if self.isMultinomial:
            raise ValueError("multinomial model: use coefficientMatrix and interceptVector")
        return Vectors.dense(self._coefficient_matrix[:, 0])

    @property
    def intercept(self) -> float:
        if self.isMultinomial:
            raise ValueError("multinomial model: use coefficientMatrix and interceptVector")
        return float(self._intercepts[0])

    @property
    def coefficientMatrix(self) -> DenseMatrix:
        """(numClasses or 1) x numFeatures, as in MLlib."""
        m = self._coefficient_matrix.T
        return DenseMatrix(m.shape[0], m.shape[1], m.ravel(order="F").tolist())

    @property
    def interceptVector(self) -> DenseVector:
        return Vectors.dense(self._intercepts)

    def _transform(self, dataset: DataFrame) -> DataFrame:
        self._require_features(dataset)
        threshold = self.getThreshold()
        if self.isMultinomial:
            outputs = [
                (self.getRawPredictionCol(), VectorUDT(), lambda m: DenseVector(m)),
                (self.getProbabilityCol(), VectorUDT(), lambda m: DenseVector(softmax(m))),
                (self.getPredictionCol(), DoubleType(), lambda m: float(np.argmax(m))),
            ]
        else:
            outputs = [
                (self.getRawPredictionCol(), VectorUDT(),
                 lambda m: DenseVector([-m[0], m[0]])),
                (self.getProbabilityCol(), VectorUDT(),
                 lambda m: DenseVector([1.0 - expit(m[0]), expit(m[0])])),
                (self.getPredictionCol(), DoubleType(),
                 lambda m: 1.0 if expit(m[0]) > threshold else 0.0),
            ]
        return append_outputs(dataset, self.getFeaturesCol(), self._margins_fn(), outputs)
