"""What a trainer is told (:class:`SyncConfig`, :class:`AsyncConfig`) and what it returns
(:class:`TrainingResult`); built by the fit plan (:func:`gradspark.fit.plan.trainer_config`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from gradspark.comm.compression import Compression
from gradspark.optim import TailAverage, make_first_order


@dataclass
class SyncConfig:
    optimizer: str = "lbfgs"
    max_iter: int = 100
    tol: float = 1e-6
    step_size: float = 0.1
    schedule: str = "constant"
    momentum: float = 0.0
    nesterov: bool = False
    lazy_updates: bool = True  # see gradspark.optim.first_order
    average_after: Optional[int] = None  # average the iterates after this update (sync only)
    updates_per_pass: int = 1  # ceil(1 / miniBatchFraction): SVRG's snapshot interval
    label: str = "gradspark"
    local_steps: int = 1  # > 1: local SGD on resident workers (gradspark.trainer.local_sgd)
    # L-BFGS's diagonal initial inverse Hessian (gradspark.fit.plan.lbfgs_preconditioner);
    # None: MLlib's scalar one
    preconditioner: Optional[np.ndarray] = None
    faults: object = None  # test-only fault injection (gradspark.testing.faults)

    def first_order(self, l2: Optional[np.ndarray] = None,
                    curvature: Optional[Callable[[], np.ndarray]] = None):
        """The configured first-order optimizer. Given the per-parameter ``l2`` of the
        parameters it updates, and with ``lazy_updates``, Adagrad, Adam and FTRL are lazy
        (:mod:`gradspark.optim.first_order`); their gradients must then be ``data + l2 *
        theta`` as :meth:`LinearObjective.add_l2` forms them. SVRG calls ``curvature``
        for its per-parameter bounds (:meth:`LinearObjective.curvature_bound`)."""
        optimizer = make_first_order(
            self.optimizer, self.momentum, self.nesterov, l2 if self.lazy_updates else None,
            curvature() if self.optimizer == "svrg" and curvature else None,
            self.updates_per_pass)
        if self.average_after is None:
            return optimizer
        return TailAverage(optimizer, self.average_after)


@dataclass
class TrainingResult:
    theta: np.ndarray
    objective_history: List[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = False
    resumed_from: Optional[int] = None  # checkpoint step the fit continued from
    metrics: Dict[str, Any] = field(default_factory=dict)  # mode-specific (async: staleness, ...)
    optimizer_state: Dict[str, np.ndarray] = field(default_factory=dict)  # first-order, at the end
    last_iterate: Optional[np.ndarray] = None  # where the steps ended, when theta is an average

    @property
    def iterate(self) -> np.ndarray:
        """The weights the optimizer's state belongs to (a continued fit starts there)."""
        return self.theta if self.last_iterate is None else self.last_iterate


@dataclass
class AsyncConfig(SyncConfig):
    max_staleness: int = 2  # < 0: no bound
    worker_timeout: float = 300.0
    host: str = ""  # address the server binds; "" = spark.driver.host
    compression: Compression = Compression()  # what workers do to their gradients
    sparse_pull: bool = True  # pull/push only the features a step touches (sparse blocks)
    stale_policy: str = "none"  # see gradspark.trainer.staleness
    delay_compensation: float = 0.04
    adaptive_compensation: bool = False
