"""The last check of a first-order fit: did it end below where it started?

A mini-batch fit's ``objectiveHistory`` holds each step's mini-batch loss,
and a loss that spikes and falls again passes any check on the history's
tail, so neither says whether the model is any good. This evaluates the
exact training objective (every row, the penalty included) at the starting
point and at the returned weights: two full passes, a small price next to a
first-order fit's tens to thousands of steps. A fit that ends above its start
warns loudly (:class:`DivergenceWarning`, and the ``gradspark`` log) with
what to change; the model is still returned, so that a ``CrossValidator``
can rank it, and the summary records both values.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import Dict

import numpy as np

from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.sync import SyncConfig

logger = logging.getLogger(__name__)


class DivergenceWarning(UserWarning):
    """A first-order fit returned weights whose training objective is above the start's."""


def exact_objective(objective: LinearObjective, theta: np.ndarray) -> float:
    """Full-data loss plus the whole penalty at ``theta``."""
    value, _ = objective.smooth(theta)
    return float(value + objective.l1_penalty(theta))


def check_final_objective(objective: LinearObjective, engine, theta0: np.ndarray,
                          theta: np.ndarray, config: SyncConfig) -> Dict[str, object]:
    """Evaluate the objective at ``theta0`` and ``theta`` through ``engine`` (one that sums
    every row: a job-per-step engine), warn when the fit went up, and return the summary
    entries ``initialObjective``, ``finalObjective``, ``diverged``."""
    exact = dataclasses.replace(objective, engine=engine)
    with np.errstate(over="ignore", invalid="ignore"):
        initial = exact_objective(exact, theta0)
        final = exact_objective(exact, theta)
    diverged = not final <= initial  # NaN counts as diverged
    if diverged:
        advice = [f"lower stepSize (now {config.step_size:g})"]
        if objective.mini_batch_fraction < 1.0:
            advice.append(f"raise miniBatchFraction (now {objective.mini_batch_fraction:g})")
        message = (f"{config.label}: the fit ended at a training objective of {final:.6g}, "
                   f"above the {initial:.6g} of its starting point (every row, penalty "
                   f"included): optimizer={config.optimizer!r} diverged or oscillated. "
                   f"{', '.join(advice)}, or use optimizer='lbfgs' (sync mode, full batch).")
        logger.warning(message)
        warnings.warn(message, DivergenceWarning, stacklevel=4)
    return {"initialObjective": initial, "finalObjective": final, "diverged": diverged}
