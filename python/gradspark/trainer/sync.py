"""Bulk-synchronous training: every step is one broadcast + one treeAggregate.

The driver owns the parameters and the optimizer state; executors only
compute gradient sums of their cached blocks (see :mod:`gradspark.engine`).
With checkpoints, the state is written every ``interval`` steps and a fit
resumes from the newest valid one.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Dict, List, Optional

import numpy as np

from gradspark.checkpoints import TrainingCheckpoints, TrainingState
from gradspark.optim import SVRG, learning_rate, minimize_lbfgs
from gradspark.trainer.objective import LinearObjective
from gradspark.integrations.progress import Progress
from gradspark.trainer.early_stopping import EarlyStopping
from gradspark.trainer.config import SyncConfig, TrainingResult
from gradspark.trainer.step_book import StepBook

logger = logging.getLogger(__name__)


def train_sync(
    objective: LinearObjective,
    theta0: np.ndarray,
    config: SyncConfig,
    checkpoints: Optional[TrainingCheckpoints] = None,
    start: Optional[TrainingState] = None,
    early_stopping: Optional[EarlyStopping] = None,
) -> TrainingResult:
    """Train from ``theta0``; or continue from a checkpoint in ``checkpoints`` or, without
    one, from ``start`` (a warm start: the state a previous fit ended in). With
    ``early_stopping``, the validation loss is measured at the start and after every
    step, and the best step's parameters are returned."""
    resumed = (checkpoints.resume_state() if checkpoints else None) or start
    progress = Progress(config.max_iter, config.label)
    try:
        if config.optimizer == "lbfgs":
            out = _lbfgs(objective, theta0, config, progress, checkpoints, resumed,
                         early_stopping)
        else:
            # Divergence is checked (and reported) below; numpy's overflow warnings are noise.
            with np.errstate(over="ignore", invalid="ignore"):
                out = _first_order(objective, theta0, config, progress, checkpoints, resumed,
                                   early_stopping)
    finally:
        progress.close()
    check_finite(out, config)
    if early_stopping is not None and early_stopping.best_theta is not None:
        out.theta = early_stopping.best_theta
        out.metrics.update(early_stopping.metrics())
    return out


def check_finite(result: TrainingResult, config: SyncConfig) -> None:
    """A diverged fit is an error, never a model with NaN coefficients."""
    if not (np.all(np.isfinite(result.theta)) and np.all(np.isfinite(result.objective_history))):
        raise FloatingPointError(
            f"training diverged ({config.optimizer}, stepSize={config.step_size}): "
            "the loss or the parameters are no longer finite; lower stepSize, or use "
            "optimizer='lbfgs' (sync mode)"
        )


def first_order_update(objective: LinearObjective, optimizer, theta, grad, state, lr: float):
    """One optimizer step followed by the projection onto the parameters' domain."""
    new_theta, state = optimizer.update(theta, grad, state, lr, objective.l1)
    return objective.project(new_theta), state


def small_step(old: np.ndarray, new: np.ndarray, tol: float) -> bool:
    """MLlib's GradientDescent criterion: a small step relative to the weights."""
    return bool(np.linalg.norm(new - old) < tol * max(np.linalg.norm(new), 1.0))


# Above this many recorded numbers an L-BFGS checkpoint keeps the weights only.
_MAX_RECORDED_VALUES = 1 << 24


def _digest(theta: np.ndarray) -> int:
    return int.from_bytes(hashlib.blake2b(theta.tobytes(), digest_size=8).digest(), "big")


class EvaluationLog:
    """Every (point, value, gradient) an L-BFGS run evaluated, and their replay.

    scipy keeps L-BFGS's curvature pairs private, but the run is a deterministic
    function of the values and gradients it is given. A resumed run therefore
    starts from the original point and is handed the recorded evaluations
    (each checked against a digest of the point asked for) until they run out;
    it retraces the interrupted run exactly, with no distributed pass, and goes
    on from there.
    """

    def __init__(self, smooth, recorded: Optional[Dict[str, np.ndarray]] = None,
                 record: bool = True) -> None:
        self.smooth = smooth
        self.record = record
        self.digests: List[int] = []
        self.values: List[float] = []
        self.grads: List[np.ndarray] = []
        if recorded:
            self.digests = [int(d) for d in recorded["evaluation_digests"]]
            self.values = [float(v) for v in recorded["evaluation_values"]]
            self.grads = list(recorded["evaluation_grads"])
        self.replayable = len(self.values)
        self.position = 0

    def __call__(self, theta: np.ndarray):
        i = self.position
        # (hashing the point costs ~15 ms per million parameters: only when it is used)
        digest = _digest(theta) if self.record or i < self.replayable else 0
        if i < self.replayable:
            if self.digests[i] == digest:
                self.position += 1
                return self.values[i], self.grads[i].copy()
            logger.warning("L-BFGS replay diverged at evaluation %d (another scipy or numpy?); "
                           "evaluating from here on", i)
            del self.digests[i:], self.values[i:], self.grads[i:]
            self.replayable = i
        value, grad = self.smooth(theta)
        self.position += 1
        if self.record and (len(self.grads) + 1) * grad.size > _MAX_RECORDED_VALUES:
            logger.warning("L-BFGS evaluations too large to record (%d parameters): a resumed "
                           "fit will restart from the checkpointed weights", grad.size)
            self.record = False
            self.digests, self.values, self.grads = [], [], []
        if self.record:
            self.digests.append(digest)
            self.values.append(float(value))
            self.grads.append(np.array(grad, dtype=np.float64))
        return value, grad

    def state(self) -> Dict[str, np.ndarray]:
        if not self.record or not self.grads:
            return {}  # nothing recorded: a resume restarts from the weights
        return {
            "evaluation_digests": np.array(self.digests, dtype=np.uint64),
            "evaluation_values": np.array(self.values, dtype=np.float64),
            "evaluation_grads": np.stack(self.grads),
        }


def _lbfgs(objective, theta0, config, progress, checkpoints, resumed,
           early_stopping=None) -> TrainingResult:
    """L-BFGS-B; a resumed fit replays its recorded evaluations (see :class:`EvaluationLog`).

    A checkpoint without them (a model too wide to record) restarts from the
    checkpointed weights: the same optimum within ``tol``, not bit for bit.
    """
    done, offset, prefix, recorded = 0, 0, [], None
    if resumed is not None:
        done = resumed.step
        if resumed.converged or done >= config.max_iter:
            return TrainingResult(resumed.theta, list(resumed.history), done, resumed.converged,
                                  done)
        if "evaluation_values" in resumed.optimizer_state:
            recorded = resumed.optimizer_state
        else:
            # The restart re-evaluates its starting point, the last entry of the history.
            theta0, offset, prefix = resumed.theta, done, list(resumed.history)[:-1]
    log = EvaluationLog(objective.smooth, recorded, record=checkpoints is not None)
    seen: List[float] = []

    def on_iteration(i: int, value: float, theta: np.ndarray) -> None:
        step = offset + i
        seen.append(value)
        if recorded is not None and step <= done:
            return  # replayed: already logged and checkpointed by the interrupted run
        progress.update(step, value)
        if checkpoints and i > 0 and checkpoints.due(step):
            checkpoints.save(step, theta, log.state(), prefix + seen)
        if early_stopping is not None and early_stopping(step, theta):
            raise StopIteration  # scipy ends the minimization at this iterate

    result = minimize_lbfgs(
        log, theta0, objective.l1, objective.lower_bounds(),
        config.max_iter - offset, config.tol, on_iteration=on_iteration,
        upper=objective.upper_bounds(), scaling=config.preconditioner,
    )
    if not result.converged:
        logger.info("L-BFGS stopped: %s", result.message)
    iterations = offset + result.iterations
    history = prefix + result.history
    if checkpoints:
        checkpoints.save(iterations, result.theta, log.state(), history, result.converged)
    return TrainingResult(result.theta, history, iterations, result.converged,
                          None if resumed is None else done)


def _step_gradient(objective: LinearObjective, optimizer, theta: np.ndarray, step: int,
                   state: Dict[str, np.ndarray]):
    """``(value, gradient, state)`` of one update: the mini-batch of ``step``, or what SVRG
    asks to evaluate (its snapshots and corrections)."""
    if isinstance(optimizer, SVRG):
        return optimizer.step_gradient(theta, state, objective.smooth, step)
    return (*objective.smooth(theta, step), state)


def _first_order(objective, theta, config, progress, checkpoints, resumed,
                 early_stopping=None) -> TrainingResult:
    optimizer = config.first_order(objective.l2, objective.curvature_bound)
    book = StepBook.open(optimizer, theta, resumed)
    start = book.step
    if early_stopping is not None:
        early_stopping(start, book.theta)
    for step in range(start, start if book.converged else config.max_iter):
        done, theta = step + 1, book.theta
        value, grad, state = _step_gradient(objective, optimizer, theta, step, book.state)
        loss = value + objective.l1_penalty(theta)
        book.history.append(loss)
        progress.update(step + 1, loss)
        if not math.isfinite(loss):
            book.step = done
            break
        lr = learning_rate(config.schedule, config.step_size, step, config.max_iter)
        new_theta, state = first_order_update(objective, optimizer, theta, grad, state, lr)
        converged = small_step(theta, new_theta, config.tol)
        book.close_step(done, new_theta, state, converged, checkpoints,
                        converged or (checkpoints and checkpoints.due(done))
                        or done == config.max_iter)
        if converged or (early_stopping is not None and early_stopping(done, new_theta)):
            break
    return book.result(with_state=True)
