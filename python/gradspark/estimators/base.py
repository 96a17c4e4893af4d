"""The fit template shared by the linear estimators, and the model base class.

``_SGDLinearEstimator._fit`` does what every linear estimator needs:
validate Params, cache validated blocks and their statistics in one pass
(in the JVM when the kernels jar loads), choose the gradient engine and
execution strategy (:mod:`gradspark.engine.choice`), build the
MLlib-equivalent objective in the standardized space, train on the driver
(sync steps or the async parameter server), map the solution back to the
input's units and hand it to the subclass's model. Subclasses say only what differs: the label
domain, the loss, and how to turn coefficients into a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np
from pyspark.ml import Estimator, Model
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsReader,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.ml.linalg import DenseVector, Vector, VectorUDT
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.accessors import MODEL_SETTERS, ParamAccessors
from gradspark.checkpoints import (
    TrainingCheckpoints,
    TrainingState,
    checkpoint_store,
    data_fingerprint,
    run_directory,
    training_meta,
)
from gradspark.comm.compression import Compression
from gradspark.comm.traffic import per_step
from gradspark.data.blocks import SPARSE_DENSITY
from gradspark.data.compaction import active_features, expand_rows
from gradspark.connect import context_of, is_connect
from gradspark.data.dataset import TrainingData
from gradspark.data.frames import FrameTrainingData
from gradspark.data.statistics import DataStatistics, require_finite_statistics
from gradspark.data.validation import InvalidDataError
from gradspark.engine import PythonGradientEngine
from gradspark.engine.choice import EngineChoice, choose, data_path
from gradspark.engine.frames import FrameGradientEngine
from gradspark.engine.resident import ResidentGradientEngine
from gradspark.integrations.mlflow_tracking import log_training
from gradspark.integrations.tensorboard import tensorboard_run, write_fit_curves
from gradspark.estimators.scoring import OutputFns, append_outputs
from gradspark.faults import fault_plan
from gradspark.ps.tasks import resident_stage_running, task_slots
from gradspark.losses import Loss
from gradspark.params import HasInitialModel, HasValidation, SGDParams, validate_sgd_params
from gradspark.persistence import DataFrameWriter, ParamsWritable, json_value
from gradspark.summaries import PredictionSummary, TrainingSummary
from gradspark.trainer import AsyncConfig, LinearObjective, SyncConfig, train_async, train_sync
from gradspark.trainer.sharded import train_sharded
from gradspark.trainer.divergence import check_final_objective
from gradspark.trainer.local_sgd import LocalSGDResponse, train_local_sgd
from gradspark.trainer.validation import EarlyStopping

logger = logging.getLogger(__name__)


@dataclass
class LinearProblem:
    """What a subclass decides once the data statistics are known."""

    loss: Loss
    num_outputs: int
    reg_param: float  # effective regParam in the standardized space
    label_shift: float = 0.0
    label_scale: float = 1.0
    initial_intercepts: Optional[np.ndarray] = None


def regularization_vectors(
    objective: LinearObjective, reg_param: float, elastic_net: float, standardization: bool,
):
    """Per-parameter (l2, l1) strengths in the objective's parameter space, as MLlib defines
    the penalty.

    MLlib penalizes the standardized coefficients ``beta_s`` when
    ``standardization=True``, and the original-scale ones ``beta_s / sigma``
    (L2: ``/ sigma**2``) otherwise. With ``beta_s = r * theta``
    (:meth:`LinearObjective.penalty_scale`) both become per-coordinate weights on
    ``theta``. Intercepts and auxiliary parameters are never penalized.
    """
    l2 = np.zeros(objective.size)
    l1 = np.zeros(objective.size)
    if reg_param > 0:
        # |coefficient penalized| per unit of theta
        per_unit = objective.penalty_scale() if standardization else objective.inv_std
        n = objective.num_coefficients
        k = objective.num_outputs
        l2[:n] = np.repeat(reg_param * (1.0 - elastic_net) * per_unit**2, k)
        l1[:n] = np.repeat(reg_param * elastic_net * per_unit, k)
    return l2, l1


class _SGDLinearEstimator(Estimator, SGDParams, HasInitialModel, HasValidation,
                          ParamAccessors, DefaultParamsReadable, ParamsWritable):
    """Base class; see the concrete estimators for the user-facing docs."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # setParams(**kwargs) takes what the constructor takes: say so to inspect and
        # IDEs, as MLlib's spelled-out setParams does.
        own = vars(cls).get("setParams")
        if own is not None:
            own.__signature__ = inspect.signature(cls.__init__)

    def _set_given(self, kwargs: Dict[str, Any]):
        # None means "not given": leave the Param at its default (unlike pyspark's
        # _set, which would store None and make e.g. getSeed() return None).
        return self._set(**{k: v for k, v in kwargs.items() if v is not None})

    def _label_domain(self) -> str:
        raise NotImplementedError

    def _problem(self, stats: DataStatistics) -> LinearProblem:
        raise NotImplementedError

    def _make_model(
        self, coefficients: np.ndarray, intercepts: np.ndarray, aux: np.ndarray,
        problem: LinearProblem,
    ) -> "_LinearModel":
        raise NotImplementedError

    def _validate_params(self) -> None:
        validate_sgd_params(self)

    def _data_checkpoint_dir(self) -> Optional[str]:
        if not self.getCheckpointData():
            return None
        if not self.getCheckpointDir():
            raise ValueError("checkpointData=True needs a checkpointDir (on reliable storage)")
        return self.getCheckpointDir().rstrip("/") + "/rdd"

    def _fit_identity(self, dataset: DataFrame, stats: DataStatistics,
                      weight_col: Optional[str]) -> Dict[str, Any]:
        """What a checkpoint or a warm-start state must match: estimator, data, Params."""
        columns = [self.getFeaturesCol(), self.getLabelCol()] + ([weight_col] if weight_col else [])
        params = {p.name: json_value(v) for p, v in self.extractParamMap().items()
                  if p.name != "initialModel"}
        return training_meta(type(self).__name__,
                             data_fingerprint(dataset.select(*columns).schema.json(), stats),
                             params)

    def _checkpoints(self, dataset: DataFrame,
                     identity: Dict[str, Any]) -> Optional[TrainingCheckpoints]:
        if not self.getCheckpointDir():
            return None
        store = checkpoint_store(dataset.sparkSession,
                                 run_directory(self.getCheckpointDir(), identity),
                                 self.getKeepCheckpoints())
        return TrainingCheckpoints(store, self.getCheckpointInterval(), identity,
                                   self.getResume())

    def _warm_start(self, objective: LinearObjective, active, input_features: int,
                    identity: Dict[str, Any], exact: bool):
        """``(theta0, start state or None)`` from ``initialModel``: its final training state
        when it was fitted in this session on the same data and Params (``exact``: a mode
        whose trainer continues a state), else its coefficients."""
        model = self.getInitialModel()
        shape = (input_features, objective.num_outputs)
        if not isinstance(model, _LinearModel) or model._coefficient_matrix.shape != shape:
            found = getattr(model, "_coefficient_matrix", None)
            raise ValueError(
                f"initialModel must be a model of this estimator with {shape[0]} features and "
                f"{shape[1]} output(s); got {type(model).__name__}"
                + (f" of shape {found.shape}" if found is not None else ""))
        state = model._training_state
        if exact and state is not None and state.meta == identity:
            logger.info("%s: continuing initialModel's fit from its step %d",
                        type(self).__name__, state.step)
            return state.theta, state
        why = ("loaded, or fitted elsewhere" if state is None
               else "another mode" if not exact else "other data or Params")
        logger.info("%s: warm start from initialModel's coefficients (%s: no optimizer "
                    "state to continue)", type(self).__name__, why)
        coefficients = model._coefficient_matrix
        if active is not None:
            coefficients = coefficients[active]
        theta = objective.from_original_space(coefficients, model._intercepts, model._aux)
        return objective.project(theta), None

    def _trainer_config(self) -> SyncConfig:
        common = dict(
            optimizer=self.getOptimizer(),
            max_iter=self.getMaxIter(),
            tol=self.getTol(),
            step_size=self.getStepSize(),
            schedule=self.getLearningRateSchedule(),
            momentum=self.getMomentum(),
            nesterov=self.getNesterov(),
            label=type(self).__name__,
        )
        if self.getMode() == "async" or self.getParameterServers():
            bound = self.getMaxStaleness() if self.getMode() == "async" else 0
            return AsyncConfig(max_staleness=bound,
                               worker_timeout=self.getWorkerTimeout(),
                               host=self.getParameterServerHost(),
                               compression=self._compression(),
                               sparse_pull=self.getSparsePull(),
                               stale_policy=self.getStaleGradientPolicy(),
                               delay_compensation=self.getDelayCompensation(),
                               adaptive_compensation=self.getAdaptiveCompensation(),
                               **common)
        return SyncConfig(local_steps=self.getLocalSteps(), **common)

    def _compression(self) -> Compression:
        return Compression(self.getCompression(), self.getCompressionRatio(),
                           self.getErrorFeedback())

    def _fit(self, dataset: DataFrame) -> "_LinearModel":
        with tensorboard_run(self.getTensorboardDir(), f"{self.uid}-{int(time.time())}",
                             dataset.sparkSession) as board:
            model = self._train(dataset)
            if board is not None:
                write_fit_curves(board, self, model)
        return model

    def _train(self, dataset: DataFrame) -> "_LinearModel":
        self._validate_params()
        weight_col = self.getOrDefault(self.weightCol) if self.isDefined(self.weightCol) else None
        weight_col = weight_col or None
        connect = is_connect(dataset)
        if connect and self.getEngine() == "jvm":
            raise ValueError("engine='jvm' calls the JVM kernels through py4j, which a Spark "
                             "Connect session does not have; use engine='auto' or 'python'")
        jvm_data = not connect and data_path(dataset.sparkSession, self.getEngine(),
                                             self.getExecutionStrategy(), self._workers_mode())
        if connect:
            logger.info("%s: Spark Connect session: numpy kernels over a cached block frame "
                        "(the JVM kernels need py4j)", type(self).__name__)
        data_class = (FrameTrainingData if connect
                      else jvm_training_data() if jvm_data else TrainingData)

        def blocks(rows: DataFrame, checkpoint_dir: Optional[str] = None):
            return data_class(rows, self.getFeaturesCol(), self.getLabelCol(), weight_col,
                              self._label_domain(), self.getBlockSize(),
                              self.getAggregationDepth(), checkpoint_dir=checkpoint_dir)

        training_rows, validation_rows = self._split_validation(dataset)
        data = blocks(training_rows, self._data_checkpoint_dir())
        with data, self._validation_data(blocks, validation_rows) as validation:
            input_features = data.num_features
            active = active_features(data.statistics)
            if active is not None:
                data.compact(active)
                if validation is not None:
                    validation.compact(active)
                logger.info("%s: training on the %d of %d features that vary",
                            type(self).__name__, len(active), input_features)
            stats = data.statistics
            require_finite_statistics(stats, self.getFeaturesCol(), self.getLabelCol(),
                                      weight_col)
            problem = self._problem(stats)
            if validation is not None:
                self._check_validation_labels(validation, problem)
            num_features = data.num_features
            choice = self._choose_engine(context_of(dataset), data, jvm_data)
            engine = self._gradient_engine(data, choice, problem)
            box = self._coefficient_box(problem.num_outputs, input_features)
            objective = LinearObjective(
                engine=engine,
                loss=problem.loss,
                num_features=num_features,
                num_outputs=problem.num_outputs,
                fit_intercept=self.getFitIntercept(),
                features_mean=stats.features.mean,
                features_std=stats.features_std,
                l2=np.zeros(0),
                l1=np.zeros(0),
                label_shift=problem.label_shift,
                label_scale=problem.label_scale,
                mini_batch_fraction=self.getMiniBatchFraction(),
                seed=self.getSeed(),
                space=self._parameter_space(stats),
                center=box is None,
            )
            objective.l2, objective.l1 = regularization_vectors(
                objective, problem.reg_param, self.getElasticNetParam(),
                self.getStandardization())
            if box is not None:
                self._check_box_supported(objective)
                (lower, upper), intercepts = box
                if active is not None:
                    lower, upper = lower[active], upper[active]
                objective.constrain((lower, upper), intercepts)
            config = self._trainer_config()
            identity = self._fit_identity(dataset, stats, weight_col)
            checkpoints = self._checkpoints(dataset, identity)
            theta0 = objective.project(objective.initial(problem.initial_intercepts))
            continues = (not isinstance(config, AsyncConfig) and config.local_steps == 1)
            start = None
            if self.isSet(self.initialModel):
                theta0, start = self._warm_start(objective, active, input_features,
                                                 identity, continues)
                if start is not None:  # maxIter more steps
                    config.max_iter = start.step + config.max_iter
            if choice.strategy == "resident" and self._compression().lossy:
                engine.objective = dataclasses.replace(objective, engine=None)
            if self.getParameterServers():
                result = train_sharded(objective, theta0, config, data.block_source(),
                                       self.getParameterServers(), checkpoints)
            elif isinstance(config, AsyncConfig):
                result = train_async(objective, theta0, config, data.block_source(),
                                     checkpoints)
            elif config.local_steps > 1:
                engine.respond = LocalSGDResponse.of(objective, config, fault_plan())
                with engine:
                    result = train_local_sgd(objective, theta0, config, engine, checkpoints)
            else:
                early_stopping = None
                if validation is not None:
                    held_out = dataclasses.replace(
                        objective, mini_batch_fraction=1.0,
                        engine=self._job_engine(validation, jvm_data, problem))
                    early_stopping = EarlyStopping(lambda theta: held_out.data_term(theta)[0],
                                                   self.getValidationTol())
                with engine if choice.strategy == "resident" else contextlib.nullcontext():
                    result = train_sync(objective, theta0, config, checkpoints, start,
                                        early_stopping)
            engine_metrics = getattr(engine, "metrics", {})
            outcome = {}
            if config.optimizer != "lbfgs":  # L-BFGS's history is exact and never goes up
                outcome = check_final_objective(
                    objective, self._evaluation_engine(data, engine, choice, jvm_data, problem),
                    theta0, result.theta, config)
            coefficients, intercepts, aux = objective.original_space(result.theta)
            coefficients = expand_rows(coefficients, active, input_features)
        metrics = {**engine_metrics, **result.metrics, **outcome}
        metrics.update(per_step(metrics, result.iterations))

        history = TrainingSummary(
            objectiveHistory=list(result.objective_history),
            totalIterations=result.iterations,
            converged=result.converged,
            optimizer=config.optimizer,
            numInstances=stats.count,
            weightSum=stats.weight_sum,
            validationHistory=list(result.metrics.get("validationHistory", [])),
            bestIteration=result.metrics.get("bestIteration"),
            extra={"mode": self.getMode(), "engine": choice.kernels,
                   "executionStrategy": choice.strategy, "jvmData": jvm_data,
                   "gradientEvaluations": objective.evaluations,
                   "trainedFeatures": num_features, "parameterSpace": objective.space,
                   "resumedFromStep": result.resumed_from, **metrics},
        )
        model = self._fitted_model(self._make_model(coefficients, intercepts, aux, problem),
                                   training_rows, history)
        if continues:
            model._training_state = TrainingState(
                step=result.iterations, theta=result.theta,
                optimizer_state=result.optimizer_state,
                history=np.asarray(result.objective_history), converged=result.converged,
                meta=identity)
        return model

    def _fitted_model(self, model: "_LinearModel", training_rows: DataFrame,
                      history: TrainingSummary) -> "_LinearModel":
        """``model`` with this estimator's uid and Params, and its training summary."""
        # As MLlib's: the model takes its estimator's uid (CrossValidator sub-models and
        # Pipeline stages are mapped back to their estimators by it).
        model._resetUid(self.uid)
        self._copyValues(model)
        model._summary = model._summary_on(training_rows, history)
        log_training(model)  # to an active MLflow run, when MLflow's autolog is on
        return model

    def _coefficient_box(self, num_outputs: int, num_features: int):
        """Box constraints in the input's units, ``((lower, upper) d x k coefficients,
        (lower, upper) k intercepts)``, or None (the default: unconstrained)."""
        return None

    def _check_box_supported(self, objective: LinearObjective) -> None:
        if (objective.l1 > 0).any():
            raise ValueError("bounds on coefficients need L2 regularization only "
                             "(elasticNetParam=0 or regParam=0), as in MLlib")
        if self.getParameterServers():
            raise ValueError("bounds on coefficients are not supported with "
                             "parameterServers > 0")

    def _parameter_space(self, stats: DataStatistics) -> str:
        """``parameterSpace``, with ``auto`` resolved (see the Param's doc and
        :mod:`gradspark.trainer.objective`)."""
        space = self.getParameterSpace()
        if space == "auto":
            first_order_on_sparse = (self.getOptimizer() != "lbfgs"
                                     and stats.density < SPARSE_DENSITY)
            space = "raw" if first_order_on_sparse else "standardized"
        return space

    def _workers_mode(self) -> str:
        """``mode``, as far as choosing the engine goes: sharded servers need the same
        long-running workers as async mode."""
        return "async" if self.getParameterServers() else self.getMode()

    def _choose_engine(self, sc, data, jvm_data: bool) -> EngineChoice:
        if self.getParameterServers():
            return EngineChoice("python", "sharded", f"parameterServers="
                                f"{self.getParameterServers()}: shards in the workers' tasks")
        workers = min(data.num_partitions, task_slots(sc))
        bytes_per_worker = data.stored_bytes() / workers
        strategy = self.getExecutionStrategy()
        if self.getValidationIndicatorCol() and strategy == "auto":
            strategy = "jobPerStep"  # validation passes need the task slots between steps
        choice = choose(self.getEngine(), strategy, self._workers_mode(),
                        jvm_data, bytes_per_worker, resident_stage_running(sc),
                        self.getOptimizer(), self.needsResidentWorkers())
        if self.getCompression() == "topk" and self.getOptimizer() in ("adam", "adagrad", "ftrl"):
            logger.warning("%s: compression='topk' with optimizer=%r: adaptive steps scale "
                           "each coordinate's rare, accumulated top-k values up, which "
                           "trains badly; use optimizer='sgd' (benchmarks/communication.py)",
                           type(self).__name__, self.getOptimizer())
        logger.info("%s: %s kernels, %s (%s; blockified in the %s)", type(self).__name__,
                    choice.kernels, choice.strategy, choice.reason,
                    "JVM" if jvm_data else "Python workers")
        return choice

    def _gradient_engine(self, data, choice: EngineChoice, problem: LinearProblem):
        """The engine the objective calls; a resident one is started by ``with engine:``
        around the training (local SGD sets its ``respond`` first)."""
        depth = self.getAggregationDepth()
        if choice.kernels == "jvm":
            from gradspark.engine.jvm import JvmGradientEngine

            return JvmGradientEngine(data, problem.loss, depth)
        if choice.strategy == "resident":
            engine = ResidentGradientEngine(
                data.block_source(), problem.loss, data.num_features, problem.num_outputs,
                self.getMiniBatchFraction(), self.getSeed(), self.getParameterServerHost(),
                self.getWorkerTimeout(), self.getAggregationTopology(), depth,
                compression=self._compression(), quorum=self.getWorkerQuorum(),
                sparse_pull=self.getSparsePull(), batch_sizing=self.getBatchSizing())
            return engine
        # (async mode's workers compress their own pushes; this engine is unused there)
        compression = self._compression() if choice.strategy == "jobPerStep" else Compression()
        return python_job_engine(data, problem.loss, depth, compression)


    def _evaluation_engine(self, data, engine, choice: EngineChoice, jvm_data: bool,
                           problem: LinearProblem):
        """An engine that sums every row once per call, outside any resident stage: the
        fit's own when it runs a job per step, else a job-per-step one over the same blocks."""
        if choice.strategy == "jobPerStep":
            return engine
        return self._job_engine(data, jvm_data, problem)

    def _job_engine(self, data, jvm_data: bool, problem: LinearProblem):
        """A job-per-step engine over ``data``'s blocks, for its data path."""
        depth = self.getAggregationDepth()
        if jvm_data:
            from gradspark.engine.jvm import JvmGradientEngine

            return JvmGradientEngine(data, problem.loss, depth)
        return python_job_engine(data, problem.loss, depth)

    # -- validation (early stopping) -------------------------------------------
    def _split_validation(self, dataset: DataFrame):
        """(training rows, validation rows or None) by ``validationIndicatorCol``."""
        column = self.getValidationIndicatorCol()
        if not column:
            return dataset, None
        if self.getMode() == "async" or self.getParameterServers() or self.getLocalSteps() > 1:
            raise ValueError("validationIndicatorCol needs sync mode with localSteps=1 "
                             "(the validation loss is measured between steps)")
        if self.getExecutionStrategy() == "resident":
            raise ValueError("validationIndicatorCol runs a job per step (validation passes "
                             "cannot run while resident workers hold the task slots); "
                             "use executionStrategy='auto' or 'jobPerStep'")
        kinds = dict(dataset.dtypes)
        if column not in kinds:
            raise ValueError(f"validationIndicatorCol {column!r} not found; the DataFrame has "
                             f"columns {sorted(kinds)}")
        if kinds[column] != "boolean":
            raise ValueError(f"validationIndicatorCol {column!r} must be boolean, "
                             f"not {kinds[column]}")
        held_out = F.coalesce(F.col(column), F.lit(False))  # null: a training row
        return dataset.filter(~held_out), dataset.filter(held_out)

    def _validation_data(self, blocks, rows: Optional[DataFrame]):
        if rows is None:
            return contextlib.nullcontext()
        try:
            return blocks(rows)
        except InvalidDataError as error:
            raise InvalidDataError(f"validation rows ({self.getValidationIndicatorCol()} "
                                   f"true): {error.message}") from None

    def _check_validation_labels(self, validation, problem: LinearProblem) -> None:
        classes = len(validation.statistics.class_weights)
        if problem.num_outputs > 1 and classes > problem.num_outputs:
            raise InvalidDataError(
                f"validation rows ({self.getValidationIndicatorCol()} true) hold class "
                f"{classes - 1}, which the training rows never show ({problem.num_outputs} "
                "classes)")


def python_job_engine(data, loss: Loss, depth: int, compression: Compression = Compression()):
    """The numpy job-per-step engine for the data's kind: RDD jobs, or ``mapInArrow`` jobs
    over a block frame (Spark Connect)."""
    if isinstance(data, FrameTrainingData):
        return FrameGradientEngine(data.block_source(), loss, depth, compression)
    return PythonGradientEngine(data.python_blocks(), loss, depth, compression)


def jvm_training_data():
    from gradspark.engine.jvm import JvmTrainingData  # loads nothing until a fit asks

    return JvmTrainingData


class _LinearModel(Model, SGDParams, ParamAccessors, MLReadable, MLWritable):
    """A fitted linear model: coefficient matrix (d x k) and intercepts (k)."""

    _setter_params = MODEL_SETTERS

    _data_fields = ("coefficients", "intercepts", "aux")

    def __init__(
        self,
        coefficient_matrix: Optional[np.ndarray] = None,
        intercepts: Optional[np.ndarray] = None,
        aux: Optional[np.ndarray] = None,
    ) -> None:
        super().__init__()
        self._coefficient_matrix = (
            np.zeros((0, 1)) if coefficient_matrix is None else np.asarray(coefficient_matrix)
        )
        self._intercepts = np.zeros(1) if intercepts is None else np.asarray(intercepts)
        self._aux = np.zeros(0) if aux is None else np.asarray(aux)
        self._summary: Optional[PredictionSummary] = None
        # The state a fit in this session ended in, for initialModel (not saved).
        self._training_state: Optional[TrainingState] = None

    @property
    def numFeatures(self) -> int:
        return self._coefficient_matrix.shape[0]

    @property
    def hasSummary(self) -> bool:
        return self._summary is not None

    @property
    def summary(self) -> PredictionSummary:
        """The training history and MLlib's metrics on the training data (see
        :mod:`gradspark.summaries`); metrics are computed on first access."""
        if self._summary is None:
            raise RuntimeError(
                "no training summary: this model was loaded or copied, not fitted in this session"
            )
        return self._summary

    def copy(self, extra=None) -> "_LinearModel":
        that = super().copy(extra)
        that._summary = self._summary
        that._training_state = self._training_state
        return that

    # -- predictions -------------------------------------------------------
    def _output_fns(self) -> OutputFns:
        """``{role: (Spark type, fn(margins))}`` for each output column, keyed by the
        Param's name without ``Col`` (``prediction``, ``rawPrediction``, ...). ``fn``
        maps an ``n x k`` margin matrix to ``n`` values (or ``n`` vectors as rows); it
        must not refer to ``self``: it is shipped to the executors."""
        raise NotImplementedError

    def _transform(self, dataset: DataFrame) -> DataFrame:
        self._require_features(dataset)
        outputs = [(self.getOrDefault(f"{role}Col"), dtype, fn)
                   for role, (dtype, fn) in self._output_fns().items()]
        return append_outputs(dataset, self.getFeaturesCol(), self._coefficient_matrix,
                              self._intercepts, outputs)

    def _predict_one(self, role: str, features: Vector):
        if features.size != self.numFeatures:
            raise ValueError(f"the features vector has size {features.size}; this model "
                             f"was fitted on {self.numFeatures} features")
        dtype, fn = self._output_fns()[role]
        value = fn(self._margins_fn()(features)[None, :])[0]
        return DenseVector(value) if isinstance(dtype, VectorUDT) else float(value)

    def predict(self, value: Vector) -> float:
        """The prediction for one feature vector, as ``transform`` computes it."""
        return self._predict_one("prediction", value)

    # -- summaries -----------------------------------------------------------
    def _summary_on(self, dataset: DataFrame,
                    history: Optional[TrainingSummary] = None) -> PredictionSummary:
        """MLlib's summary of this model's predictions on ``dataset``; a training summary
        when given the fit's ``history``. Output columns left empty get a name here, as
        MLlib does for its summaries."""
        missing = [c for c in (self.getFeaturesCol(), self.getLabelCol())
                   if c not in dataset.columns]
        if missing:
            raise ValueError(f"column(s) {missing} not found; the DataFrame has columns "
                             f"{sorted(dataset.columns)}")
        model = self.copy()
        for role in self._output_fns():
            if not model.getOrDefault(f"{role}Col"):
                model._set(**{f"{role}Col": f"{role}_{self.uid}"})
        predictions = model.transform(dataset)
        weight_col = self.getOrDefault(self.weightCol) if self.isDefined(self.weightCol) else ""
        columns = dict(predictions=predictions, labelCol=model.getLabelCol(),
                       predictionCol=model.getPredictionCol(),
                       featuresCol=model.getFeaturesCol(),
                       weightCol=weight_col if weight_col in dataset.columns else None)
        kind, trained = model._summary_kinds()
        columns.update(model._summary_columns())
        if history is None:
            return kind(**columns)
        return trained(history, **columns, **model._training_summary_columns())

    def _summary_kinds(self) -> Tuple[type, type]:
        """(evaluation summary class, training summary class) for this model."""
        raise NotImplementedError

    def _summary_columns(self) -> Dict[str, Any]:
        """Constructor arguments the model's summary classes take beyond the columns."""
        return {}

    def _training_summary_columns(self) -> Dict[str, Any]:
        """Constructor arguments only its training summary class takes."""
        return {}

    def evaluate(self, dataset: DataFrame) -> PredictionSummary:
        """MLlib's ``model.evaluate(df)``: the metrics of this model on ``dataset``."""
        return self._summary_on(dataset)

    def _margins_fn(self):
        coef, intercepts = self._coefficient_matrix, self._intercepts

        def margins(v) -> np.ndarray:
            if hasattr(v, "indices"):
                return v.values @ coef[v.indices] + intercepts
            return v.toArray() @ coef + intercepts

        return margins

    # -- export to MLlib's model classes ---------------------------------------
    _mllib_class: type  # pyspark.ml's model class (set by each model)
    _mllib_params: type  # MLlib's Params mixin of that class

    def _mllib_data(self) -> Tuple[tuple, Any]:
        """(row, StructType) of MLlib's ``data/`` Parquet for this model."""
        raise NotImplementedError

    def toMLlib(self, path: Optional[str] = None):
        """This model as pyspark.ml's own model class (``LogisticRegressionModel``, ...),
        scored by MLlib's JVM ``transform``; see :mod:`gradspark.estimators.mllib_export`
        (on a cluster, give a ``path`` on storage every executor reads)."""
        from gradspark.estimators.mllib_export import to_mllib

        return to_mllib(self, path)

    def saveAsMLlib(self, path: str, overwrite: bool = False) -> None:
        """Write this model in MLlib's layout, loadable by MLlib's reader (Scala, Java,
        pyspark, a Connect server without gradspark)."""
        from gradspark.estimators.mllib_export import save_as_mllib

        save_as_mllib(self, path, overwrite)

    # -- persistence -----------------------------------------------------
    def write(self) -> MLWriter:
        return _LinearModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _LinearModelReader(cls)

    def _require_features(self, dataset: DataFrame) -> None:
        fields = [f.name for f in dataset.schema.fields]
        if self.getFeaturesCol() not in fields:
            raise ValueError(
                f"features column {self.getFeaturesCol()!r} not found; the DataFrame has "
                f"columns {sorted(fields)}"
            )


class _LinearModelWriter(DataFrameWriter):
    def __init__(self, instance: _LinearModel) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        m = self.instance
        self.save_metadata(m, path, extra={"shape": list(m._coefficient_matrix.shape)})
        row = (
            m._coefficient_matrix.ravel().tolist(),
            m._intercepts.tolist(),
            m._aux.tolist(),
        )
        self.save_data(self.sparkSession.createDataFrame(
            [row], "coefficients array<double>, intercepts array<double>, aux array<double>"
        ), path)


class _LinearModelReader(MLReader):
    def __init__(self, cls) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> _LinearModel:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        data = self.sparkSession.read.parquet(f"{path}/data").first()
        shape = tuple(metadata["shape"])
        model = self.cls(
            np.asarray(data.coefficients, dtype=np.float64).reshape(shape),
            np.asarray(data.intercepts, dtype=np.float64),
            np.asarray(data.aux, dtype=np.float64),
        )
        model._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(model, metadata)
        return model
