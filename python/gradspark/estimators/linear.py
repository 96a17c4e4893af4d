"""Linear regression (squared error or Huber) trained by distributed SGD/L-BFGS."""

from __future__ import annotations

import logging
from typing import List, Optional

import numpy as np

from pyspark import keyword_only
from pyspark.ml.linalg import DenseVector, Vectors, VectorUDT
from pyspark.ml.regression import LinearRegressionModel
from pyspark.ml.regression import _LinearRegressionParams as _MLlibLinearRegressionParams
from pyspark.sql import DataFrame
from pyspark.sql.types import DoubleType, StructField, StructType

from gradspark.data.blocks import REAL
from gradspark.data.gram import gram_sums, vector_width
from gradspark.data.statistics import DataStatistics
from gradspark.estimators.base import LinearProblem, _SGDLinearEstimator
from gradspark.estimators.model import _LinearModel
from gradspark.fit.rules import check_params
from gradspark.losses import HuberLoss, SquaredLoss
from gradspark.optim.normal_equations import MAX_NUM_FEATURES, solve_normal_equations
from gradspark.summaries import RegressionSummary, RegressionTrainingSummary, TrainingSummary

logger = logging.getLogger(__name__)

LOSSES = ("squaredError", "huber")
SOLVERS = ("auto", "normal", "l-bfgs")


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
        stepSize: Optional[float] = None,
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
    def setParams(self, **kwargs) -> "SGDLinearRegression":
        """Set any of the constructor's Params."""
        return self._set_given(self._input_kwargs)

    def _label_domain(self) -> str:
        return REAL

    def _train(self, dataset: DataFrame) -> "SGDLinearRegressionModel":
        if self._solves_normal_equations(dataset):
            return self._fit_normal_equations(dataset)
        return super()._train(dataset)

    def _iterative_only(self) -> List[str]:
        """The Params set here that only the iterative (L-BFGS/first-order) path has."""
        reasons = [f"{name}={value!r}" for name, value, default in (
            ("optimizer", self.getOptimizer(), "lbfgs"), ("mode", self.getMode(), "sync"),
            ("parameterServers", self.getParameterServers(), 0),
            ("validationIndicatorCol", self.getValidationIndicatorCol(), ""))
            if value != default]
        return reasons + (["initialModel"] if self.isSet(self.initialModel) else [])

    def _solves_normal_equations(self, dataset: DataFrame) -> bool:
        """MLlib's choice: the normal equations for squared error with solver='normal', or
        'auto' up to 4,096 features; L-BFGS otherwise. Here 'auto' also takes the
        iterative path when a Param only it has is set (an optimizer, async mode, ...)."""
        solver = self.getSolver()
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {list(SOLVERS)}, got {solver!r}")
        if solver == "l-bfgs":
            return False
        if self.getLoss() != "squaredError":
            if solver == "normal":
                raise ValueError("LinearRegression with huber loss only supports the L-BFGS "
                                 "solver: set solver='auto' or 'l-bfgs'")
            return False
        iterative = self._iterative_only()
        if solver == "normal":
            if iterative:
                raise ValueError(f"solver='normal' solves the normal equations in one pass; "
                                 f"{', '.join(iterative)} need the iterative solver: set "
                                 "solver='l-bfgs' or 'auto'")
            return True
        return not iterative and vector_width(dataset, self.getFeaturesCol()) <= MAX_NUM_FEATURES

    def _fit_normal_equations(self, dataset: DataFrame) -> "SGDLinearRegressionModel":
        """One aggregation of the weighted Gram matrix, then MLlib's WeightedLeastSquares
        on the driver (:mod:`gradspark.optim.normal_equations`)."""
        check_params(self)
        weight_col = self.getOrDefault(self.weightCol) if self.isDefined(self.weightCol) else None
        sums = gram_sums(dataset, self.getFeaturesCol(), self.getLabelCol(), weight_col or None)
        if sums.num_features > MAX_NUM_FEATURES:
            raise ValueError(f"solver='normal' takes at most {MAX_NUM_FEATURES} features (as "
                             f"MLlib's); the data has {sums.num_features}: use "
                             "solver='l-bfgs' or 'auto'")
        solution = solve_normal_equations(sums, self.getFitIntercept(), self.getRegParam(),
                                          self.getElasticNetParam(), self.getStandardization())
        logger.info("%s: normal equations (%s) on %d features", type(self).__name__,
                    solution.solver, sums.num_features)
        history = TrainingSummary(
            objectiveHistory=list(solution.objective_history),
            totalIterations=len(solution.objective_history) - 1, converged=True,
            optimizer="normal", numInstances=sums.rows, weightSum=sums.weight_sum,
            # the keys an iterative fit's summary.extra has, so code reading them works
            extra={"solver": solution.solver, "mode": "sync", "engine": "normal",
                   "executionStrategy": "normalEquations", "jvmData": False,
                   "gradientEvaluations": 0, "trainedFeatures": sums.num_features,
                   "parameterSpace": "standardized", "preconditioning": "none",
                   "resumedFromStep": None},
            diagInvAtWA=None if solution.diag_inv_atwa is None
            else solution.diag_inv_atwa.tolist())
        model = SGDLinearRegressionModel(solution.coefficients[:, None],
                                         np.array([solution.intercept]), np.zeros(0))
        return self._fitted_model(model, dataset, history)

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

    _mllib_class = LinearRegressionModel
    _mllib_params = _MLlibLinearRegressionParams

    def _mllib_data(self):
        schema = StructType([StructField("intercept", DoubleType()),
                             StructField("coefficients", VectorUDT()),
                             StructField("scale", DoubleType())])
        return (self.intercept, self.coefficients, self.scale), schema

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

    def _training_summary_columns(self):
        # what tValues divide: the coefficients, then the intercept (MLlib's order)
        estimates = list(self._coefficient_matrix[:, 0])
        return {"estimates": estimates + [self.intercept] if self.getFitIntercept()
                else estimates}
