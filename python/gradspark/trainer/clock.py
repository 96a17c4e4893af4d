"""Stale Synchronous Parallel bookkeeping: each worker's clock, and who may go on.

A worker's clock is the number of gradients it has pushed. With bound ``s`` a
worker at clock ``c`` may pull weights only while ``c - slowest <= s``, where
``slowest`` is the lowest clock among the workers still *in the clock*.
``s = 0`` is bulk-synchronous, ``s < 0`` means no bound (Hogwild-style).

Every expected worker is in the clock from the start, so a slow starter holds
the others back exactly as a slow worker does. A worker that has not been
heard from for ``timeout`` seconds (never connected, disconnected, or silent
while not waiting on the clock) leaves it, so a lost worker cannot block the
rest forever; when it comes back it rejoins at the slowest member's clock, or
its own if that is later.

Not thread-safe by itself: the caller holds one lock around every call.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, List, Optional

logger = logging.getLogger(__name__)


class StalenessClock:
    def __init__(self, num_workers: int, bound: int, timeout: float, start: int = 0,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.bound = bound
        self.timeout = timeout
        self.now = now
        self.clocks: List[int] = [start] * num_workers
        self.members = set(range(num_workers))
        self.finished: set = set()
        self.last_seen = [now()] * num_workers
        self.waiting = [0] * num_workers  # pulls of this worker blocked on the bound

    def slowest(self) -> Optional[int]:
        """Lowest clock in the clock; None when nobody is left in it."""
        return min((self.clocks[w] for w in self.members), default=None)

    def lead(self, worker: int) -> int:
        """How many clock ticks this worker is ahead of the slowest member."""
        slowest = self.slowest()
        return 0 if slowest is None else self.clocks[worker] - slowest

    def may_proceed(self, worker: int) -> bool:
        return self.bound < 0 or self.lead(worker) <= self.bound

    def touch(self, worker: int) -> None:
        self.last_seen[worker] = self.now()

    def join(self, worker: int) -> int:
        """(Re)connect a worker; returns the clock it continues from."""
        self.touch(worker)
        if worker not in self.members and worker not in self.finished:
            slowest = self.slowest()
            if slowest is not None:
                self.clocks[worker] = max(self.clocks[worker], slowest)
            self.members.add(worker)
            logger.warning("worker %d rejoined the clock at %d", worker, self.clocks[worker])
        return self.clocks[worker]

    def advance(self, worker: int) -> None:
        self.clocks[worker] += 1
        self.touch(worker)

    def finish(self, worker: int) -> None:
        self.members.discard(worker)
        self.finished.add(worker)

    def evict_silent(self) -> List[int]:
        """Take workers unheard of for ``timeout`` seconds out of the clock."""
        now = self.now()
        evicted = [w for w in sorted(self.members)
                   if not self.waiting[w] and now - self.last_seen[w] > self.timeout]
        for w in evicted:
            self.members.discard(w)
            logger.warning(
                "worker %d silent for more than %.0f s at clock %d: it leaves the clock so "
                "the others are not blocked", w, self.timeout, self.clocks[w],
            )
        return evicted
