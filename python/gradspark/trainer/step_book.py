"""The step book: where a first-order fit stands, kept the same way by every trainer.

A fit starts from ``theta0`` with a fresh optimizer state, or from the state a
checkpoint (or a warm start) recorded: its weights, optimizer state, steps
done, loss history and convergence. :meth:`StepBook.open` is that choice, in
one place for the sync, async, sharded and local-SGD trainers;
:meth:`StepBook.close_step` records a closed step and writes the checkpoint
when one is due; :meth:`StepBook.result` is what the trainer returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from gradspark.optim.averaging import AVERAGED, UPDATES, averaged_weights
from gradspark.trainer.config import TrainingResult


@dataclass
class StepBook:
    theta: np.ndarray
    state: Dict[str, np.ndarray]
    step: int = 0  # steps done
    history: List[float] = field(default_factory=list)
    converged: bool = False
    resumed_from: Optional[int] = None  # the checkpoint step the fit continued from

    @classmethod
    def open(cls, optimizer, theta0: np.ndarray, resumed=None) -> "StepBook":
        """A fresh start at ``theta0``, or the recorded state ``resumed`` (a checkpoint's
        :class:`~gradspark.checkpoints.TrainingState`, or a warm start's)."""
        theta = np.array(theta0, dtype=np.float64)
        state = optimizer.init(theta)
        if resumed is None:
            return cls(theta, state)
        if resumed.optimizer_state and AVERAGED in state \
                and AVERAGED not in resumed.optimizer_state:
            # A checkpoint of a trainer that does not average (parameter servers resume in
            # sync mode): its steps count as updates before averaging starts.
            state = {**state, **resumed.optimizer_state, UPDATES: np.array([resumed.step],
                                                                           dtype=np.float64)}
        else:
            state = resumed.optimizer_state or state
        return cls(resumed.theta, state, resumed.step,
                   list(resumed.history), resumed.converged, resumed.step)

    def close_step(self, step: int, theta: np.ndarray, state: Dict[str, np.ndarray],
                   converged: bool, checkpoints=None, save: bool = False) -> None:
        """Step ``step`` is done (its loss already in :attr:`history`); checkpointed when
        ``save`` and the fit has checkpoints."""
        self.step, self.theta, self.state, self.converged = step, theta, state, converged
        if checkpoints and save:
            checkpoints.save(step, theta, state, self.history, converged)

    def result(self, metrics: Optional[Dict[str, Any]] = None,
               with_state: bool = False) -> TrainingResult:
        """The fit's outcome; its weights are the tail average when the optimizer keeps
        one (:mod:`gradspark.optim.averaging`), the last iterate otherwise."""
        metrics = dict(metrics or {})
        if AVERAGED in self.state:
            metrics["averagedSteps"] = int(self.state[AVERAGED][0])
        theta = averaged_weights(self.theta, self.state)
        return TrainingResult(theta, self.history, self.step, self.converged,
                              self.resumed_from, metrics,
                              dict(self.state) if with_state else {},
                              None if theta is self.theta else self.theta)
