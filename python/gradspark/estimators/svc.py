"""Linear support vector classifier (hinge loss) trained by distributed SGD/L-BFGS."""

from __future__ import annotations

from typing import Optional

import numpy as np
from pyspark import keyword_only
from pyspark.ml.linalg import DenseVector, Vector, Vectors, VectorUDT
from pyspark.ml.classification import LinearSVCModel
from pyspark.ml.classification import _LinearSVCParams as _MLlibLinearSVCParams
from pyspark.ml.param.shared import HasElasticNetParam
from pyspark.sql.types import DoubleType, StructField, StructType

from gradspark.data.blocks import BINARY
from gradspark.data.statistics import DataStatistics
from gradspark.estimators.base import LinearProblem, _SGDLinearEstimator
from gradspark.estimators.model import _LinearModel
from gradspark.losses import HingeLoss
from gradspark.summaries import BinaryClassificationSummary, BinaryClassificationTrainingSummary


class _LinearSVCParams(_MLlibLinearSVCParams, HasElasticNetParam):
    """MLlib's own Params of LinearSVC and its model (the threshold on the raw margin,
    0.0 by default), plus ``elasticNetParam``, which MLlib's LinearSVC lacks."""

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(elasticNetParam=0.0)


class SGDLinearSVC(_SGDLinearEstimator, _LinearSVCParams):
    """Linear SVM (hinge loss, labels 0/1) with driver-side parameter aggregation.

    Same objective as ``pyspark.ml.classification.LinearSVC``: weighted mean
    hinge loss plus ``regParam / 2 * ||beta||^2`` on the (standardized)
    coefficients. Unlike MLlib, ``elasticNetParam > 0`` adds an L1 term.
    The hinge loss is not differentiable at the margin; L-BFGS, as in MLlib,
    stops near (not exactly at) the optimum, within ``tol`` in objective value.
    """

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        rawPredictionCol: str = "rawPrediction",
        weightCol: Optional[str] = None,
        maxIter: int = 100,
        tol: float = 1e-6,
        stepSize: Optional[float] = None,
        regParam: float = 0.0,
        elasticNetParam: float = 0.0,
        fitIntercept: bool = True,
        standardization: bool = True,
        threshold: float = 0.0,
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

    @keyword_only
    def setParams(self, **kwargs) -> "SGDLinearSVC":
        """Set any of the constructor's Params."""
        return self._set_given(self._input_kwargs)

    _loss_without_curvature_bound = "hinge"  # optimizer='svrg' is refused (fit.rules)

    def _label_domain(self) -> str:
        return BINARY

    def _problem(self, stats: DataStatistics) -> LinearProblem:
        return LinearProblem(HingeLoss(), 1, self.getRegParam())

    def _make_model(self, coefficients, intercepts, aux, problem) -> "SGDLinearSVCModel":
        return SGDLinearSVCModel(coefficients, intercepts)


class SGDLinearSVCModel(_LinearModel, _LinearSVCParams):
    """Model fitted by :class:`SGDLinearSVC`."""

    _mllib_class = LinearSVCModel
    _mllib_params = _MLlibLinearSVCParams

    def _mllib_data(self):
        schema = StructType([StructField("coefficients", VectorUDT()),
                             StructField("intercept", DoubleType())])
        return (self.coefficients, self.intercept), schema

    @property
    def numClasses(self) -> int:
        return 2

    @property
    def coefficients(self) -> DenseVector:
        return Vectors.dense(self._coefficient_matrix[:, 0])

    @property
    def intercept(self) -> float:
        return float(self._intercepts[0])

    def summary(self) -> BinaryClassificationTrainingSummary:  # type: ignore[override]
        """The training summary. A method here, not a property: MLlib's
        ``LinearSVCModel.summary`` is one (unlike its other models'), and code written
        for it calls ``model.summary()``."""
        return _LinearModel.summary.fget(self)

    def predictRaw(self, value: Vector) -> DenseVector:
        """``[-margin, margin]`` for one feature vector, as in ``rawPrediction``."""
        return self._predict_one("rawPrediction", value)

    def _output_fns(self):
        threshold = self.getThreshold()
        return {"rawPrediction": (VectorUDT(), lambda m: np.c_[-m[:, 0], m[:, 0]]),
                "prediction": (DoubleType(), lambda m: (m[:, 0] > threshold) * 1.0)}

    def _summary_kinds(self):
        return BinaryClassificationSummary, BinaryClassificationTrainingSummary

    def _summary_columns(self):
        return {"scoreCol": self.getRawPredictionCol()}
