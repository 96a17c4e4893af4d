"""Tail (Polyak-Ruppert) averaging of a first-order optimizer's iterates.

A mini-batch step size that makes progress early also leaves the iterates
bouncing around the optimum by an amount that shrinks only with the step
size. Their running average from some step on keeps the progress and
cancels most of the bounce: on the wide sparse benchmark's data, Adam and
Adagrad at their default step sizes end 4-5% above the L-BFGS objective after
5 passes, and their averages under 1% (``docs/wide_sparse.md``). The iterates
themselves are unchanged; only the returned model is the average.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

State = Dict[str, np.ndarray]
AVERAGE, AVERAGED, UPDATES = "average", "averaged_steps", "updates"


class TailAverage:
    """Wraps an optimizer: ``state["average"]`` is the mean of the iterates after update
    ``start`` (1-based), ``state["averaged_steps"]`` how many entered it. The wrapped
    optimizer's state keys are kept as they are, so checkpoints resume both."""

    def __init__(self, inner, start: int) -> None:
        if start < 0:
            raise ValueError(f"averaging must start at a step >= 0, got {start}")
        self.inner, self.start = inner, start

    def init(self, theta: np.ndarray) -> State:
        return {**self.inner.init(theta), AVERAGE: np.zeros_like(theta),
                AVERAGED: np.zeros(1), UPDATES: np.zeros(1)}

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        inner = {k: v for k, v in state.items() if k not in (AVERAGE, AVERAGED, UPDATES)}
        new_theta, inner = self.inner.update(theta, grad, inner, lr, l1)
        updates, count, average = state[UPDATES] + 1, state[AVERAGED], state[AVERAGE]
        if updates[0] > self.start:
            count = count + 1
            average = average + (new_theta - average) / count[0]
        return new_theta, {**inner, AVERAGE: average, AVERAGED: count, UPDATES: updates}


def averaged_weights(theta: np.ndarray, state: State) -> np.ndarray:
    """The model a fit returns: the tail average when there is one, else ``theta``."""
    if AVERAGE in state and state[AVERAGED][0] > 0:
        return state[AVERAGE]
    return theta
