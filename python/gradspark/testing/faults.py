"""Test-only fault injection: stragglers and failing tasks, for tests and benchmarks.

Off unless the driver's environment sets ``GRADSPARK_FAULTS`` to a JSON object
when ``fit`` starts, e.g. ``{"fail_partition": 0, "fail_step": 3}`` (raise in
that partition's task at that step, first task attempt only; with ``"kill": true``
its Python process is killed instead) or
``{"slow_partition": 1, "slow_seconds": 0.05}`` (sleep before every batch of
that partition; ``"base_seconds"`` makes every partition sleep, an emulated
compute time for benchmarks; ``"row_seconds"`` and ``"slow_factor"`` one that
grows with the rows of a batch, with ``"move_every"`` a straggler that moves
between partitions). The plan is read on the driver and travels in the task
closure, so it reaches executors of any cluster; production fits never set it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from typing import Optional

ENVIRONMENT_VARIABLE = "GRADSPARK_FAULTS"


class InjectedFault(RuntimeError):
    """Raised by a task on purpose (see :mod:`gradspark.testing.faults`)."""


@dataclass(frozen=True)
class FaultPlan:
    fail_partition: Optional[int] = None
    fail_step: int = 0
    slow_partition: Optional[int] = None
    slow_seconds: float = 0.0
    kill: bool = False  # SIGKILL the task's Python process instead of raising (a lost task)
    base_seconds: float = 0.0  # every partition sleeps this before each batch (benchmarks)
    fail_batch: Optional[int] = None  # TorchEstimator: fail at this step of fail_step's epoch
    # Emulated compute that grows with the batch (benchmarks of batch sizing): every
    # worker sleeps row_seconds per row it used, the slow partition's worker slow_factor
    # times as long. With move_every > 0 the straggler moves: at step s it is partition
    # (slow_partition + s // move_every) % num_partitions.
    row_seconds: float = 0.0
    slow_factor: float = 1.0
    move_every: int = 0
    num_partitions: int = 1

    def slow_at(self, step: int) -> Optional[int]:
        """The slow partition at ``step`` (None: no straggler)."""
        if self.slow_partition is None or self.move_every <= 0:
            return self.slow_partition
        return (self.slow_partition + step // self.move_every) % max(1, self.num_partitions)

    def before_batch(self, partition: int, step: int, attempt: int) -> None:
        if self.base_seconds > 0:
            time.sleep(self.base_seconds)
        if partition == self.slow_at(step) and self.slow_seconds > 0:
            time.sleep(self.slow_seconds)
        if partition == self.fail_partition and step == self.fail_step and attempt == 0:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise InjectedFault(f"injected failure: partition {partition}, step {step}, "
                                f"attempt {attempt}")

    def after_batch(self, partitions, step: int, rows: int) -> None:
        """The emulated per-row compute of a batch of ``rows`` over ``partitions``."""
        if self.row_seconds > 0 and rows > 0:
            slow = self.slow_at(step) in partitions
            time.sleep(self.row_seconds * rows * (self.slow_factor if slow else 1.0))


def fault_plan() -> Optional[FaultPlan]:
    """The plan from the environment, or None (the normal case)."""
    spec = os.environ.get(ENVIRONMENT_VARIABLE)
    return FaultPlan(**json.loads(spec)) if spec else None
