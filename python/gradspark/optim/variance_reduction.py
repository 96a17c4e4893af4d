"""SVRG: mini-batch steps corrected by a full gradient at a snapshot, with curvature-scaled
per-coordinate steps.

Plain mini-batch optimizers give a feature a step only in the batches that hold
it: on wide sparse data a feature seen five times gets 25 steps in 5 passes,
and those middle-frequency features keep Adam, Adagrad and FTRL 1-2% above the
optimum (``docs/wide_sparse.md``). SVRG (Johnson & Zhang, 2013) steps along

    g_B(theta) - g_B(snapshot) + g(snapshot)

the batch's gradient, less the same batch's gradient at a snapshot, plus the
full gradient there: unbiased, with a variance that vanishes as ``theta`` and
the snapshot near the optimum, and every coordinate's full-data gradient in
every step. Each coordinate steps ``lr / h_j``, with ``h_j`` a bound on the
objective's curvature along it (the loss's curvature times the feature's
mean square, plus its L2 strength: :meth:`LinearObjective.curvature_bound`):
rare and frequent features move in proportion to how flat the objective is
along them, as Adagrad's do, without a history of gradients.

Snapshots are taken at updates ``0, P, 3P, 5P, ...`` with ``P`` the updates
of one pass: the first round is one pass (the start is far from the
optimum), the later ones two. A snapshot update costs one full pass and steps
along the full gradient; every other update evaluates its batch twice, at
``theta`` and at the snapshot, on the same rows (a batch is a function of
the seed and the step). The snapshot and its gradient are optimizer state,
so checkpoints and continued fits carry them as they carry Adam's moments.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from gradspark.optim.proximal import proximal_step

State = Dict[str, np.ndarray]
Evaluate = Callable[[np.ndarray, Optional[int]], Tuple[float, np.ndarray]]
SNAPSHOT, FULL_GRADIENT, UPDATES = "snapshot", "full_gradient", "t"


class SVRG:
    """``init``/``update`` as the other optimizers; the trainer gets each update's gradient
    from :meth:`step_gradient`, which decides what to evaluate."""

    def __init__(self, curvature: np.ndarray, updates_per_pass: int) -> None:
        if updates_per_pass < 1:
            raise ValueError(f"updates_per_pass must be >= 1, got {updates_per_pass}")
        curvature = np.asarray(curvature, dtype=np.float64)
        if np.any(~(curvature >= 0)):
            raise ValueError("the curvature bounds must be finite and >= 0")
        # A coordinate with no curvature (a feature that never occurs, without L2) has
        # no data gradient either; a zero step keeps it where it is.
        self.inverse_curvature = np.divide(1.0, curvature, out=np.zeros_like(curvature),
                                           where=curvature > 0)
        self.updates_per_pass = updates_per_pass

    def init(self, theta: np.ndarray) -> State:
        return {SNAPSHOT: theta.copy(), FULL_GRADIENT: np.zeros_like(theta),
                UPDATES: np.zeros(1)}

    def snapshot_due(self, state: State) -> bool:
        """Whether the next update is a snapshot: at 0, P, 3P, 5P, ..."""
        t, p = int(state[UPDATES][0]), self.updates_per_pass
        return t == 0 or (t >= p and (t - p) % (2 * p) == 0)

    def step_gradient(self, theta: np.ndarray, state: State, evaluate: Evaluate,
                      step: int) -> Tuple[float, np.ndarray, State]:
        """``(value, gradient, state)`` of update ``step``. ``evaluate(weights, step)`` is the
        smooth objective (data plus L2) and its gradient on the batch of ``step``, or on
        every row when ``step`` is None. At a snapshot: every row, kept as the snapshot.
        Otherwise the batch's gradient, less the same batch's at the snapshot, plus the
        snapshot's full gradient (the L2 terms combine to ``l2 * theta``)."""
        if self.snapshot_due(state):
            value, grad = evaluate(theta, None)
            return value, grad, {**state, SNAPSHOT: theta.copy(), FULL_GRADIENT: grad}
        value, grad = evaluate(theta, step)
        _, at_snapshot = evaluate(state[SNAPSHOT], step)  # the same rows
        return value, grad - at_snapshot + state[FULL_GRADIENT], state

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        """A proximal step of ``lr / h_j`` per coordinate along ``grad`` (the corrected
        gradient, or the full one at a snapshot)."""
        new_theta = proximal_step(theta, grad, lr * self.inverse_curvature, l1)
        return new_theta, {**state, UPDATES: state[UPDATES] + 1}


def snapshots_before(updates: int, updates_per_pass: int) -> int:
    """How many of the first ``updates`` updates are snapshots (at 0, P, 3P, 5P, ...)."""
    if updates <= 0:
        return 0
    p = updates_per_pass
    return 1 if updates <= p else 2 + (updates - 1 - p) // (2 * p)


def data_passes(updates: int, updates_per_pass: int, fraction: float) -> float:
    """The passes over the data that ``updates`` SVRG updates read: one per snapshot, and
    two batches of ``fraction`` per other update."""
    snapshots = snapshots_before(updates, updates_per_pass)
    return snapshots + 2 * fraction * (updates - snapshots)


def updates_within(passes: float, fraction: float) -> int:
    """The most SVRG updates (``maxIter``) that read at most ``passes`` passes."""
    per_pass = math.ceil(1.0 / fraction)
    updates = 0
    while data_passes(updates + 1, per_pass, fraction) <= passes + 1e-9:
        updates += 1
    return updates
