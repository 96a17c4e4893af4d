"""Bulk-synchronous training: every step is one broadcast + one treeAggregate.

The driver owns the parameters and the optimizer state; executors only
compute gradient sums of their cached blocks (see :mod:`gradspark.engine`).
With checkpoints, the state is written every ``interval`` steps and a fit
resumes from the newest valid one.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from gradspark.checkpoints import TrainingCheckpoints
from gradspark.optim import learning_rate, make_first_order, minimize_lbfgs
from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.progress import Progress

logger = logging.getLogger(__name__)


@dataclass
class SyncConfig:
    optimizer: str = "lbfgs"
    max_iter: int = 100
    tol: float = 1e-6
    step_size: float = 0.1
    schedule: str = "constant"
    momentum: float = 0.0
    nesterov: bool = False
    label: str = "gradspark"


@dataclass
class TrainingResult:
    theta: np.ndarray
    objective_history: List[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = False
    resumed_from: Optional[int] = None  # checkpoint step the fit continued from
    metrics: Dict[str, Any] = field(default_factory=dict)  # mode-specific (async: staleness, ...)


def train_sync(
    objective: LinearObjective,
    theta0: np.ndarray,
    config: SyncConfig,
    checkpoints: Optional[TrainingCheckpoints] = None,
) -> TrainingResult:
    resumed = checkpoints.resume_state() if checkpoints else None
    progress = Progress(config.max_iter, config.label)
    try:
        if config.optimizer == "lbfgs":
            out = _lbfgs(objective, theta0, config, progress, checkpoints, resumed)
        else:
            # Divergence is checked (and reported) below; numpy's overflow warnings are noise.
            with np.errstate(over="ignore", invalid="ignore"):
                out = _first_order(objective, theta0, config, progress, checkpoints, resumed)
    finally:
        progress.close()
    check_finite(out, config)
    return out


def check_finite(result: TrainingResult, config: SyncConfig) -> None:
    """A diverged fit is an error, never a model with NaN coefficients."""
    if not (np.all(np.isfinite(result.theta)) and np.all(np.isfinite(result.objective_history))):
        raise FloatingPointError(
            f"training diverged ({config.optimizer}, stepSize={config.step_size}): "
            "the loss or the parameters are no longer finite; lower stepSize or use "
            "optimizer='lbfgs'"
        )


def first_order_update(objective: LinearObjective, optimizer, theta, grad, state, lr: float):
    """One optimizer step followed by the projection onto the parameters' domain."""
    new_theta, state = optimizer.update(theta, grad, state, lr, objective.l1)
    return objective.project(new_theta), state


def small_step(old: np.ndarray, new: np.ndarray, tol: float) -> bool:
    """MLlib's GradientDescent criterion: a small step relative to the weights."""
    return bool(np.linalg.norm(new - old) < tol * max(np.linalg.norm(new), 1.0))


def _lbfgs(objective, theta0, config, progress, checkpoints, resumed) -> TrainingResult:
    """L-BFGS-B; a resumed fit restarts from the checkpointed weights.

    scipy keeps its curvature pairs private, so a resumed run rebuilds them:
    it reaches the same optimum (within ``tol``) but not bit-identically.
    """
    done, history = 0, []
    if resumed is not None:
        theta0, done, history = resumed.theta, resumed.step, list(resumed.history)
        if resumed.converged or done >= config.max_iter:
            return TrainingResult(theta0, history, done, resumed.converged, done)
        history = history[:-1]  # the restart re-evaluates its starting point

    seen: List[float] = []

    def on_iteration(i: int, value: float, theta: np.ndarray) -> None:
        seen.append(value)
        progress.update(done + i, value)
        if checkpoints and i > 0 and checkpoints.due(done + i):
            checkpoints.save(done + i, theta, {}, history + seen)

    result = minimize_lbfgs(
        objective.smooth, theta0, objective.l1, objective.lower_bounds(),
        config.max_iter - done, config.tol, on_iteration=on_iteration,
    )
    if not result.converged:
        logger.info("L-BFGS stopped: %s", result.message)
    iterations = done + result.iterations
    history = history + result.history
    if checkpoints:
        checkpoints.save(iterations, result.theta, {}, history, result.converged)
    return TrainingResult(result.theta, history, iterations, result.converged,
                          None if resumed is None else done)


def _first_order(objective, theta, config, progress, checkpoints, resumed) -> TrainingResult:
    optimizer = make_first_order(config.optimizer, config.momentum, config.nesterov)
    state = optimizer.init(theta)
    history: List[float] = []
    start, converged = 0, False
    if resumed is not None:
        theta, start, converged = resumed.theta, resumed.step, resumed.converged
        state = resumed.optimizer_state or state
        history = list(resumed.history)
    done = start
    for step in range(start, start if converged else config.max_iter):
        done = step + 1
        value, grad = objective.smooth(theta, step)
        loss = value + objective.l1_penalty(theta)
        history.append(loss)
        progress.update(step + 1, loss)
        if not math.isfinite(loss):
            break
        lr = learning_rate(config.schedule, config.step_size, step, config.max_iter)
        new_theta, state = first_order_update(objective, optimizer, theta, grad, state, lr)
        converged = small_step(theta, new_theta, config.tol)
        theta = new_theta
        if checkpoints and (converged or checkpoints.due(done) or done == config.max_iter):
            checkpoints.save(done, theta, state, history, converged)
        if converged:
            break
    return TrainingResult(theta, history, done, converged, None if resumed is None else start)
