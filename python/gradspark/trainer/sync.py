"""Bulk-synchronous training: every step is one broadcast + one treeAggregate.

The driver owns the parameters and the optimizer state; executors only
compute gradient sums of their cached blocks (see :mod:`gradspark.engine`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import List

import numpy as np

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


def train_sync(objective: LinearObjective, theta0: np.ndarray, config: SyncConfig) -> TrainingResult:
    progress = Progress(config.max_iter, config.label)
    try:
        if config.optimizer == "lbfgs":
            result = minimize_lbfgs(
                objective.smooth, theta0, objective.l1, objective.lower_bounds(),
                config.max_iter, config.tol, on_iteration=progress.update,
            )
            if not result.converged:
                logger.info("L-BFGS stopped: %s", result.message)
            out = TrainingResult(result.theta, result.history, result.iterations, result.converged)
        else:
            # Divergence is checked (and reported) below; numpy's overflow warnings are noise.
            with np.errstate(over="ignore", invalid="ignore"):
                out = _first_order(objective, theta0, config, progress)
    finally:
        progress.close()
    if not (np.all(np.isfinite(out.theta)) and np.all(np.isfinite(out.objective_history))):
        raise FloatingPointError(
            f"training diverged ({config.optimizer}, stepSize={config.step_size}): "
            "the loss or the parameters are no longer finite; lower stepSize or use "
            "optimizer='lbfgs'"
        )
    return out


def _first_order(
    objective: LinearObjective, theta: np.ndarray, config: SyncConfig, progress: Progress
) -> TrainingResult:
    optimizer = make_first_order(config.optimizer, config.momentum, config.nesterov)
    state = optimizer.init(theta)
    history: List[float] = []
    converged = False
    step = 0
    for step in range(config.max_iter):
        value, grad = objective.smooth(theta, step)
        loss = value + objective.l1_penalty(theta)
        history.append(loss)
        progress.update(step + 1, loss)
        if not math.isfinite(loss):
            break
        lr = learning_rate(config.schedule, config.step_size, step, config.max_iter)
        new_theta, state = optimizer.update(theta, grad, state, lr, objective.l1)
        new_theta = objective.project(new_theta)
        # MLlib's GradientDescent criterion: a small step relative to the weights.
        moved = np.linalg.norm(new_theta - theta)
        theta = new_theta
        if moved < config.tol * max(np.linalg.norm(theta), 1.0):
            converged = True
            break
    iterations = step + 1 if config.max_iter else 0
    return TrainingResult(theta, history, iterations, converged)
