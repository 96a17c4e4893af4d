"""Logistic regression (binomial and multinomial) trained by distributed SGD/L-BFGS."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
from pyspark import keyword_only
from pyspark.ml.linalg import (
    DenseMatrix,
    DenseVector,
    Matrix,
    MatrixUDT,
    Vector,
    Vectors,
    VectorUDT,
)
from pyspark.ml.classification import LogisticRegressionModel
from pyspark.ml.classification import (
    _LogisticRegressionParams as _MLlibLogisticRegressionParams,
)
from pyspark.ml.param import Param, Params
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    StructField,
    StructType,
)
from scipy.special import expit, softmax

from gradspark.data.blocks import BINARY, CLASS_INDEX
from gradspark.data.statistics import DataStatistics
from gradspark.data.validation import InvalidDataError
from gradspark.estimators.base import LinearProblem, _SGDLinearEstimator
from gradspark.estimators.model import _LinearModel
from gradspark.losses import BinaryLogisticLoss, MultinomialLogisticLoss
from gradspark.persistence import to_matrix
from gradspark.summaries import (
    BinaryClassificationSummary,
    BinaryClassificationTrainingSummary,
    ClassificationSummary,
    ClassificationTrainingSummary,
)

FAMILIES = ("auto", "binomial", "multinomial")


def _read_as_matrix(param: Param) -> Param:
    """MLlib's bound-matrix Param, whose converter also reads a list of rows: the form
    our writers save a Matrix in (JSON has none), so saved bounds load back."""
    return Param(Params._dummy(), param.name, param.doc, typeConverter=to_matrix)


class _LogisticRegressionParams(_MLlibLogisticRegressionParams):
    """MLlib's own Params of LogisticRegression and its model (names, docs, converters,
    defaults and the threshold/thresholds rules)."""

    lowerBoundsOnCoefficients: Param[Matrix] = _read_as_matrix(
        _MLlibLogisticRegressionParams.lowerBoundsOnCoefficients)
    upperBoundsOnCoefficients: Param[Matrix] = _read_as_matrix(
        _MLlibLogisticRegressionParams.upperBoundsOnCoefficients)

    def _bounded(self) -> bool:
        return any(self.isSet(p) for p in (
            self.lowerBoundsOnCoefficients, self.upperBoundsOnCoefficients,
            self.lowerBoundsOnIntercepts, self.upperBoundsOnIntercepts))


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
    optimizer : {"lbfgs", "sgd", "adagrad", "adam", "ftrl", "svrg"}
        ``lbfgs`` (default, full batch) converges to MLlib's solution; the
        first-order optimizers support ``miniBatchFraction < 1``, a
        ``learningRateSchedule`` and ``stepSize``. ``svrg`` (sync mode) corrects
        each batch's gradient by a full gradient at a snapshot and scales each
        coefficient's step by its curvature: the mini-batch optimizer that gets
        closest to the optimum in a few passes over wide sparse data.
    miniBatchFraction : float
        Fraction of rows sampled per step, reproducibly from ``seed`` and the step.
    thresholds : list of float, optional
        One per class: predict the class with the largest ``p_k / t_k`` (MLlib's rule).
    lowerBoundsOnCoefficients, upperBoundsOnCoefficients : Matrix, optional
        Box constraints, 1 x numFeatures (binomial) or numClasses x numFeatures, in the
        input's units; ``lowerBoundsOnIntercepts``/``upperBoundsOnIntercepts`` (Vector)
        bound the intercepts. L2 only, as in MLlib.
    parameterSpace : {"auto", "standardized", "raw"}
        The coordinates the optimizer moves; the objective is the same. ``auto``
        takes ``raw`` for first-order optimizers on sparse data (where
        standardized Adam steps would move rare features' coefficients by
        ``stepSize / std``) and MLlib's ``standardized`` space otherwise.
    preconditioning : {"auto", "diagonal", "none"}
        L-BFGS's initial inverse Hessian; the objective is the same. ``diagonal``
        scales each coefficient by the inverse of its curvature bound (from the
        data's statistics), ``none`` is MLlib's scalar. ``auto`` takes ``diagonal``
        when the bounds differ by more than 2x: with ``standardization=False`` on
        sparse data, where it reaches MLlib's objective in a fraction of MLlib's
        iterations (``docs/wide_sparse.md``).

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
        stepSize: Optional[float] = None,
        regParam: float = 0.0,
        elasticNetParam: float = 0.0,
        fitIntercept: bool = True,
        standardization: bool = True,
        threshold: float = 0.5,
        thresholds: Optional[List[float]] = None,
        lowerBoundsOnCoefficients: Optional[Matrix] = None,
        upperBoundsOnCoefficients: Optional[Matrix] = None,
        lowerBoundsOnIntercepts: Optional[Vector] = None,
        upperBoundsOnIntercepts: Optional[Vector] = None,
        aggregationDepth: int = 2,
        maxBlockSizeInMB: float = 0.0,
        miniBatchFraction: float = 1.0,
        optimizer: str = "lbfgs",
        learningRateSchedule: str = "constant",
        momentum: float = 0.0,
        nesterov: bool = False,
        lazyUpdates: bool = True,
        iterateAveraging: str = "auto",
        parameterSpace: str = "auto",
        preconditioning: str = "auto",
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
        batchSizing: str = "fixed",
        sparsePull: bool = True,
        blockSize: int = 4096,
        checkpointDir: str = "",
        checkpointInterval: int = 10,
        keepCheckpoints: int = 3,
        resume: bool = True,
        checkpointData: bool = False,
        tensorboardDir: str = "",
        validationIndicatorCol: str = "",
        validationTol: float = 0.01,
        initialModel: Optional[_LinearModel] = None,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__()
        self._set_given(self._input_kwargs)
        self._checkThresholdConsistency()

    @keyword_only
    def setParams(self, **kwargs) -> "SGDLogisticRegression":
        """Set any of the constructor's Params; ``threshold`` and ``thresholds`` given
        together must agree (MLlib's rule)."""
        self._set_given(self._input_kwargs)
        self._checkThresholdConsistency()
        return self

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
        if self.isSet(self.thresholds):
            checked_thresholds(self.getThresholds(), num_classes if multinomial else 2)
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

    def _coefficient_box(self, num_outputs: int, num_features: int):
        if not self._bounded():
            return None
        if not self.getFitIntercept() and (self.isSet(self.lowerBoundsOnIntercepts)
                                           or self.isSet(self.upperBoundsOnIntercepts)):
            raise ValueError("bounds on intercepts need fitIntercept=True")
        k = num_outputs  # MLlib's rows: 1 for a binomial model, numClasses for multinomial

        def bound(param, fill, shape):
            if not self.isSet(param):
                return np.full(shape, fill)
            value = self.getOrDefault(param).toArray()
            if value.shape != shape:
                raise ValueError(f"{param.name} has shape {value.shape}; this fit needs "
                                 f"{shape} ({'classes' if k > 1 else '1 row'} x features "
                                 f"for a {'multinomial' if k > 1 else 'binomial'} model)")
            return value

        coefficients = [bound(p, fill, (k, num_features)).T for p, fill in
                        ((self.lowerBoundsOnCoefficients, -np.inf),
                         (self.upperBoundsOnCoefficients, np.inf))]
        intercepts = [bound(p, fill, (k,)) for p, fill in
                      ((self.lowerBoundsOnIntercepts, -np.inf),
                       (self.upperBoundsOnIntercepts, np.inf))]
        for lower, upper in (coefficients, intercepts):
            if (lower > upper).any() or np.isnan(lower).any() or np.isnan(upper).any():
                raise ValueError("every lower bound must be <= its upper bound (and no NaN)")
        return tuple(coefficients), tuple(intercepts)

    def _make_model(self, coefficients, intercepts, aux, problem) -> "SGDLogisticRegressionModel":
        if problem.num_outputs > 1:
            # Softmax is invariant to a constant shift across classes. As MLlib does,
            # report mean-centered intercepts and, unregularized, centered coefficients;
            # a shift that bounds could forbid is not made.
            if self.getFitIntercept() and not (self.isSet(self.lowerBoundsOnIntercepts)
                                               or self.isSet(self.upperBoundsOnIntercepts)):
                intercepts = intercepts - intercepts.mean()
            if self.getRegParam() == 0.0 and not self._bounded():
                coefficients = coefficients - coefficients.mean(axis=1, keepdims=True)
        return SGDLogisticRegressionModel(coefficients, intercepts)


class SGDLogisticRegressionModel(_LinearModel, _LogisticRegressionParams):
    """Model fitted by :class:`SGDLogisticRegression`."""

    _mllib_class = LogisticRegressionModel
    _mllib_params = _MLlibLogisticRegressionParams

    def _mllib_data(self):
        schema = StructType([StructField("numClasses", IntegerType()),
                             StructField("numFeatures", IntegerType()),
                             StructField("interceptVector", VectorUDT()),
                             StructField("coefficientMatrix", MatrixUDT()),
                             StructField("isMultinomial", BooleanType())])
        # MLlib requires a row-major (transposed) matrix for a binomial model
        rows = self._coefficient_matrix.T
        matrix = DenseMatrix(rows.shape[0], rows.shape[1], rows.ravel().tolist(), True)
        return (self.numClasses, self.numFeatures, self.interceptVector, matrix,
                self.isMultinomial), schema

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

    def predictRaw(self, value: Vector) -> DenseVector:
        """The raw margins for one feature vector, as in ``rawPrediction``."""
        return self._predict_one("rawPrediction", value)

    def predictProbability(self, value: Vector) -> DenseVector:
        """The class probabilities for one feature vector, as in ``probability``."""
        return self._predict_one("probability", value)

    def _output_fns(self):
        if self.isMultinomial:
            def probability(m):
                return softmax(m, axis=1)

            def raw(m):
                return m
        else:
            def probability(m):
                p = expit(m[:, 0])
                return np.c_[1.0 - p, p]

            def raw(m):
                return np.c_[-m[:, 0], m[:, 0]]
        choose = self._class_choice()
        return {"rawPrediction": (VectorUDT(), raw),
                "probability": (VectorUDT(), probability),
                "prediction": (DoubleType(), lambda m: choose(probability(m)))}

    def _class_choice(self):
        """fn(probabilities n x k) -> predicted classes: MLlib's rule. With ``thresholds``,
        the largest ``p_k / t_k`` (a zero threshold wins outright); else ``threshold`` on
        P(class 1) for a binomial model, the most probable class for a multinomial one."""
        if self.isSet(self.thresholds):
            thresholds = checked_thresholds(self.getThresholds(), self.numClasses)

            def scaled_argmax(p):
                with np.errstate(divide="ignore", invalid="ignore"):
                    scaled = np.where(thresholds == 0.0, np.inf, p / thresholds)
                return np.argmax(scaled, axis=1) * 1.0
            return scaled_argmax
        if self.isMultinomial:
            return lambda p: np.argmax(p, axis=1) * 1.0
        threshold = self.getThreshold()
        return lambda p: (p[:, 1] > threshold) * 1.0

    def _summary_kinds(self):
        if self.numClasses == 2:
            return BinaryClassificationSummary, BinaryClassificationTrainingSummary
        return ClassificationSummary, ClassificationTrainingSummary

    def _summary_columns(self):
        columns = {"probabilityCol": self.getProbabilityCol()}
        if self.numClasses == 2:
            columns["scoreCol"] = self.getProbabilityCol()
        return columns


def checked_thresholds(thresholds, num_classes: int) -> np.ndarray:
    """``thresholds`` as an array, or a ValueError saying what is wrong with them."""
    t = np.asarray(thresholds, dtype=np.float64)
    if len(t) != num_classes:
        raise ValueError(f"thresholds has {len(t)} entries; the model has {num_classes} "
                         "classes and needs one per class")
    if (t < 0).any() or not np.isfinite(t).all() or (t == 0).sum() > 1:
        raise ValueError(f"thresholds must be finite, >= 0, with at most one 0; got "
                         f"{t.tolist()}")
    return t
