"""The fit template shared by the linear estimators.

``_SGDLinearEstimator._fit`` does what every linear estimator needs, in
this order: resolve the data path (:func:`gradspark.fit.plan.plan_data`,
which checks the Params), cache validated blocks and their statistics in
one pass, let the subclass set up its problem (loss, outputs, effective
regularization), resolve the rest of the plan
(:func:`gradspark.fit.plan.plan_fit`), build the MLlib-equivalent
objective, train as the plan says (:func:`gradspark.fit.execute.train`),
map the solution back to the input's units and hand it to the subclass's
model (:mod:`gradspark.estimators.model`). Subclasses say only what
differs: the label domain, the loss, and how to turn coefficients into a
model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np
from pyspark.ml import Estimator
from pyspark.ml.util import DefaultParamsReadable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.accessors import ParamAccessors
from gradspark.checkpoints import (
    TrainingCheckpoints,
    TrainingState,
    checkpoint_store,
    data_fingerprint,
    run_directory,
    training_meta,
)
from gradspark.comm.traffic import per_step
from gradspark.connect import context_of
from gradspark.data.compaction import active_features, expand_rows
from gradspark.data.dataset import NumpyTrainingData
from gradspark.data.frames import FrameTrainingData
from gradspark.data.jvm import JvmTrainingData
from gradspark.data.statistics import DataStatistics, require_finite_statistics
from gradspark.data.validation import InvalidDataError
from gradspark.estimators.model import _LinearModel
from gradspark.fit.execute import evaluation_engine, gradient_engine, job_engine, train
from gradspark.fit.plan import lbfgs_preconditioner, parameter_space, plan_data, plan_fit
from gradspark.integrations.mlflow_tracking import log_training
from gradspark.integrations.tensorboard import tensorboard_run, write_fit_curves
from gradspark.losses import Loss
from gradspark.params import HasInitialModel, HasValidation, SGDParams
from gradspark.persistence import ParamsWritable, json_value
from gradspark.summaries import TrainingSummary
from gradspark.trainer import LinearObjective
from gradspark.trainer.divergence import check_final_objective

logger = logging.getLogger(__name__)

# The training data for each data path of the fit plan (gradspark.fit.plan.DATA_KINDS).
TRAINING_DATA = {"frame": FrameTrainingData, "python": NumpyTrainingData, "jvm": JvmTrainingData}


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

    def _fit(self, dataset: DataFrame) -> "_LinearModel":
        with tensorboard_run(self.getTensorboardDir(), f"{self.uid}-{int(time.time())}",
                             dataset.sparkSession) as board:
            model = self._train(dataset)
            if board is not None:
                write_fit_curves(board, self, model)
        return model

    def _train(self, dataset: DataFrame) -> "_LinearModel":
        data_plan = plan_data(self, dataset)  # checks the Params; the data path
        weight_col = self.getOrDefault(self.weightCol) if self.isDefined(self.weightCol) else None
        weight_col = weight_col or None
        data_class = TRAINING_DATA[data_plan.kind]

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
            plan = plan_fit(self, data_plan, context_of(dataset), data)
            objective = self._objective(problem, stats, data.num_features, active,
                                        input_features)
            objective.engine = engine = gradient_engine(plan, data, objective)
            config = plan.config
            config.preconditioner = lbfgs_preconditioner(self, objective)
            identity = self._fit_identity(dataset, stats, weight_col)
            checkpoints = self._checkpoints(dataset, identity)
            theta0 = objective.project(objective.initial(problem.initial_intercepts))
            continues = plan.trainer == "sync"  # a trainer that continues a state
            start = None
            if self.isSet(self.initialModel):
                theta0, start = self._warm_start(objective, active, input_features,
                                                 identity, continues)
                if start is not None:  # maxIter more steps
                    config.max_iter = start.step + config.max_iter
            held_out = None
            if validation is not None:
                held_out = dataclasses.replace(
                    objective, mini_batch_fraction=1.0,
                    engine=job_engine(plan, validation, problem.loss))
            result = train(plan, objective, theta0, data, engine, checkpoints, start, held_out,
                           self.getValidationTol())
            engine_metrics = getattr(engine, "metrics", {})
            outcome = {}
            if config.optimizer != "lbfgs":  # L-BFGS's history is exact and never goes up
                outcome = check_final_objective(
                    objective, evaluation_engine(plan, data, engine, problem.loss),
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
            extra={"mode": self.getMode(), "engine": plan.kernels,
                   "executionStrategy": plan.strategy, "jvmData": plan.data.jvm,
                   "gradientEvaluations": objective.evaluations,
                   "trainedFeatures": objective.num_features,
                   "parameterSpace": objective.space,
                   "preconditioning": "none" if config.preconditioner is None else "diagonal",
                   # the step a first-order fit used: stepSize, or the optimizer's default
                   **({} if config.optimizer == "lbfgs" else {"stepSize": config.step_size}),
                   "resumedFromStep": result.resumed_from, **metrics},
        )
        model = self._fitted_model(self._make_model(coefficients, intercepts, aux, problem),
                                   training_rows, history)
        if continues:
            model._training_state = TrainingState(
                step=result.iterations, theta=result.iterate,
                optimizer_state=result.optimizer_state,
                history=np.asarray(result.objective_history), converged=result.converged,
                meta=identity)
        return model

    def _objective(self, problem: LinearProblem, stats: DataStatistics, num_features: int,
                   active, input_features: int) -> LinearObjective:
        """The MLlib-equivalent objective in the parameter space, without an engine yet."""
        box = self._coefficient_box(problem.num_outputs, input_features)
        objective = LinearObjective(
            engine=None,
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
            space=parameter_space(self, stats),
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
        return objective

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

    # -- validation (early stopping) -------------------------------------------
    def _split_validation(self, dataset: DataFrame):
        """(training rows, validation rows or None) by ``validationIndicatorCol``."""
        column = self.getValidationIndicatorCol()
        if not column:
            return dataset, None
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
