"""Linear regression (squared error or Huber) trained by distributed SGD/L-BFGS."""

from __future__ import annotations

from typing import Optional

from pyspark import keyword_only
from pyspark.ml.linalg import DenseVector, Vectors
from pyspark.ml.regression import _LinearRegressionParams as _MLlibLinearRegressionParams
from pyspark.sql.types import DoubleType

from gradspark.data.blocks import REAL
from gradspark.data.statistics import DataStatistics
from gradspark.estimators.base import LinearProblem, _LinearModel, _SGDLinearEstimator
from gradspark.losses import HuberLoss, SquaredLoss
from gradspark.summaries import RegressionSummary, RegressionTrainingSummary

LOSSES = ("squaredError", "huber")


class _LinearRegressionParams(_MLlibLinearRegressionParams):
    """MLlib's own Params of LinearRegression and its model (``loss``, ``epsilon``,
    ``solver``, ...), with MLlib's defaults."""

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(solver="auto")


class SGDLinearRegression(_SGDLinearEstimator, _LinearRegressionParams):
    """Linear regression with driver-side parameter aggregation.

    Same objective and standardization semantics as
    ``pyspark.ml.regression.LinearRegression`` (for squared error, MLlib
    standardizes the label as well, which scales the effective ``regParam``
    by ``1 / std(label)``); ``loss="huber"`` fits MLlib's robust regression
    with a jointly estimated ``scale``.

    Examples
    --------
    >>> model = SGDLinearRegression(regParam=0.1).fit(train_df)   # doctest: +SKIP
    >>> model.coefficients, model.intercept                        # doctest: +SKIP
    """

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        weightCol: Optional[str] = None,
        loss: str = "squaredError",
        epsilon: float = 1.35,
        solver: str = "auto",
        maxIter: int = 100,
        tol: float = 1e-6,
        stepSize: float = 0.1,
        regParam: float = 0.0,
        elasticNetParam: float = 0.0,
        fitIntercept: bool = True,
        standardization: bool = True,
        aggregationDepth: int = 2,
        maxBlockSizeInMB: float = 0.0,
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
        batchSizing: str = "fixed",
        sparsePull: bool = True,
        blockSize: int = 4096,
        checkpointDir: str = "",
        checkpointInterval: int = 10,
        keepCheckpoints: int = 3,
        resume: bool = True,
        checkpointData: bool = False,
        validationIndicatorCol: str = "",
        validationTol: float = 0.01,
        initialModel: Optional[_LinearModel] = None,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__()
        self._set_given(self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs) -> "SGDLinearRegression":
        """Set any of the constructor's Params."""
        return self._set_given(self._input_kwargs)

    def _label_domain(self) -> str:
        return REAL

    def _problem(self, stats: DataStatistics) -> LinearProblem:
        if self.getLoss() not in LOSSES:
            raise ValueError(f"loss must be one of {list(LOSSES)}, got {self.getLoss()!r}")
        if self.getLoss() == "huber":
            return LinearProblem(HuberLoss(self.getEpsilon()), 1, self.getRegParam())
        mean, std = stats.label_mean, stats.label_std
        # A constant label cannot be scaled by its std; MLlib then uses |mean|.
        scale = std if std > 0 else (abs(mean) or 1.0)
        shift = mean if self.getFitIntercept() else 0.0
        return LinearProblem(
            SquaredLoss(shift, scale), 1, self.getRegParam() / scale,
            label_shift=shift, label_scale=scale,
        )

    def _make_model(self, coefficients, intercepts, aux, problem) -> "SGDLinearRegressionModel":
        return SGDLinearRegressionModel(coefficients, intercepts, aux)


class SGDLinearRegressionModel(_LinearModel, _LinearRegressionParams):
    """Model fitted by :class:`SGDLinearRegression`."""

    @property
    def coefficients(self) -> DenseVector:
        return Vectors.dense(self._coefficient_matrix[:, 0])

    @property
    def intercept(self) -> float:
        return float(self._intercepts[0])

    @property
    def scale(self) -> float:
        """Huber's fitted scale sigma; 1.0 for squared error (as in MLlib)."""
        return float(self._aux[0]) if len(self._aux) else 1.0

    def _output_fns(self):
        return {"prediction": (DoubleType(), lambda m: m[:, 0])}

    def _summary_kinds(self):
        return RegressionSummary, RegressionTrainingSummary

    def _summary_columns(self):
        return {"numCoefficients": self.numFeatures, "fitIntercept": self.getFitIntercept()}
