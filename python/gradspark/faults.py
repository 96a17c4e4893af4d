"""Test-only fault injection: stragglers and failing tasks, for tests and benchmarks.

Off unless the driver's environment sets ``GRADSPARK_FAULTS`` to a JSON object
when ``fit`` starts, e.g. ``{"fail_partition": 0, "fail_step": 3}`` (raise in
that partition's task at that step, first task attempt only; with ``"kill": true``
its Python process is killed instead) or
``{"slow_partition": 1, "slow_seconds": 0.05}`` (sleep before every batch of
that partition; ``"base_seconds"`` makes every partition sleep, an emulated
compute time for benchmarks). The plan is read on the driver and travels in the task
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
    """Raised by a task on purpose (see :mod:`gradspark.faults`)."""


@dataclass(frozen=True)
class FaultPlan:
    fail_partition: Optional[int] = None
    fail_step: int = 0
    slow_partition: Optional[int] = None
    slow_seconds: float = 0.0
    kill: bool = False  # SIGKILL the task's Python process instead of raising (a lost task)
    base_seconds: float = 0.0  # every partition sleeps this before each batch (benchmarks)

    def before_batch(self, partition: int, step: int, attempt: int) -> None:
        if self.base_seconds > 0:
            time.sleep(self.base_seconds)
        if partition == self.slow_partition and self.slow_seconds > 0:
            time.sleep(self.slow_seconds)
        if partition == self.fail_partition and step == self.fail_step and attempt == 0:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise InjectedFault(f"injected failure: partition {partition}, step {step}, "
                                f"attempt {attempt}")


def fault_plan() -> Optional[FaultPlan]:
    """The plan from the environment, or None (the normal case)."""
    spec = os.environ.get(ENVIRONMENT_VARIABLE)
    return FaultPlan(**json.loads(spec)) if spec else None
