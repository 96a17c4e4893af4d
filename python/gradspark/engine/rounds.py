"""A resident round on the driver: what a round asks, what a worker answers, and the
round's state (:class:`GradientRounds`, the server's handler).

In the WEIGHTS frame the ``clock`` field carries the round and ``version`` a
:class:`RoundCode`: the step, whether to sample it and, with throughput batch
sizing (:mod:`gradspark.engine.batch_sizing`), the fraction this worker
samples at. ``quorum < 1`` closes a round once that fraction of the workers
has answered; answers for a closed round are dropped (and counted).
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import threading
import time
from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np

from gradspark.engine.batch_sizing import dequantize
from gradspark.engine.sums import GradientSums

logger = logging.getLogger(__name__)


class WorkersFailed(RuntimeError):
    """The resident workers' stage ended (failed or cancelled) before the fit did."""


class RoundCode(NamedTuple):
    """What a round's ``version`` field tells a worker: ``sampled + 2 * step``, plus the
    worker's own sampling fraction in units of ``2**-20`` above bit 41 (0: the
    configured ``miniBatchFraction``; throughput batch sizing only)."""

    step: int
    sampled: bool
    fraction_units: int = 0

    FRACTION_SHIFT = 41

    def encode(self) -> int:
        return int(self.sampled) + 2 * self.step + (self.fraction_units << self.FRACTION_SHIFT)

    @classmethod
    def decode(cls, code: int) -> "RoundCode":
        step, sampled = divmod(code & ((1 << cls.FRACTION_SHIFT) - 1), 2)
        return cls(step, bool(sampled), code >> cls.FRACTION_SHIFT)

    def fraction(self, configured: float) -> float:
        """The fraction of rows this round samples (1.0: a full-batch round)."""
        if not self.sampled:
            return 1.0
        return dequantize(self.fraction_units) if self.fraction_units else configured

    def rows(self):
        """Which rows the round uses: every full-batch round the same ones (-1), a sampled
        round those of its step at its fraction."""
        return (self.step, self.fraction_units) if self.sampled else -1

    def next_sampled(self) -> int:
        """The code a worker expects next: the next step, sampled as this one was."""
        return self._replace(step=self.step + self.sampled).encode()


class Answer(NamedTuple):
    """A worker's reply to a round: a vector, and the rows behind it."""

    vector: np.ndarray
    loss_sum: float
    weight_sum: float
    count: int

    def __add__(self, other: "Answer") -> "Answer":  # type: ignore[override]
        return Answer(self.vector + other.vector, self.loss_sum + other.loss_sum,
                      self.weight_sum + other.weight_sum, self.count + other.count)

    @classmethod
    def of_sums(cls, sums: GradientSums) -> "Answer":
        return cls(sums.vector(), sums.loss_sum, sums.weight_sum, sums.count)

    def sums(self, num_features: int, num_outputs: int) -> GradientSums:
        return GradientSums.from_vector(self.vector, num_features, num_outputs, self.loss_sum,
                                        self.weight_sum, self.count)


class GradientRounds:
    """One round at a time: publish a linear map, collect the answers of ``expected`` workers.

    The driver holds one (expecting every worker in a star, the root of the
    tree otherwise) and so does every inner node of a tree, for its children.
    Implements :class:`gradspark.rpc.server.Handler`; every method runs on a
    server connection thread and holds ``self.lock``.
    """

    def __init__(self, expected: Sequence[int], vector_size: int, relay: bool = False,
                 quorum: float = 1.0) -> None:
        self.expected = list(expected)
        # Answers a round waits for: all of them, or the first quorum fraction.
        self.needed = max(1, math.ceil(quorum * len(self.expected)))
        # What a hello is answered with: the attempt the connecting worker is in. The
        # driver counts each worker's connections; a relay passes on its own attempt,
        # which it learns from upstream (a barrier stage restarts every task at once).
        self.relay = relay
        self.attempt: Optional[int] = None
        self.hellos: Dict[int, int] = {}
        self.vector_size = vector_size
        self.lock = threading.Condition()
        self.round = 0  # the round in progress; 0 before the first
        self.sample_code = 0
        self.worker_codes: Dict[int, int] = {}  # a worker's own code (throughput batching)
        self.published_at = 0.0
        self.seconds: Dict[int, float] = {}  # publish -> answer, this round
        self.timings: Dict[int, tuple] = {}  # the last closed round's (rows, seconds)
        self.vector = np.zeros(vector_size)
        self.answers: Dict[int, Answer] = {}
        self.used = {w: 0 for w in self.expected}  # answers that went into a step
        self.late = 0  # answers that came after their round closed (quorum < 1)
        self.stopped = False
        self.failure: Optional[BaseException] = None
        self.reconnects = 0
        self.gone: set = set()  # workers that said done or disconnected

    # -- Handler -----------------------------------------------------------
    def on_hello(self, worker: int, attempt: int) -> int:
        with self.lock:
            if self.relay:
                while self.attempt is None and not self.stopped:
                    self.lock.wait()
                return self.attempt or 0
            earlier = self.hellos.get(worker, 0)
            self.hellos[worker] = earlier + 1
            if earlier:
                self.reconnects += 1
                logger.warning("resident worker %d reconnected (attempt %d) at round %d",
                               worker, earlier, self.round)
            return earlier

    def set_attempt(self, attempt: int) -> None:
        with self.lock:
            self.attempt = attempt
            self.lock.notify_all()

    def on_pull(self, worker: int):
        with self.lock:
            while not self.stopped and (self.round == 0 or worker in self.answers):
                self.lock.wait()
            code = self.worker_codes.get(worker, self.sample_code)
            return self.round, code, self.stopped, self.vector

    def on_push(self, worker: int, clock: int, version: int, loss_sum: float,
                weight_sum: float, count: int, vector: np.ndarray) -> bool:
        with self.lock:
            if (self.stopped or clock != self.round or worker in self.answers
                    or worker not in self.expected):
                self.late += int(clock < self.round)
                return False
            self.answers[worker] = Answer(vector, loss_sum, weight_sum, count)
            self.seconds[worker] = time.monotonic() - self.published_at
            self.lock.notify_all()
            return True

    def on_done(self, worker: int) -> None:
        self.on_disconnect(worker)

    def on_disconnect(self, worker: int) -> None:
        with self.lock:
            self.gone.add(worker)
            self.lock.notify_all()

    def drain(self, timeout: float) -> None:
        """After :meth:`stop`: wait until every expected worker has left (a relay closing
        its server earlier would cut its children off before they heard the stop)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not set(self.expected) <= self.gone and time.monotonic() < deadline:
                self.lock.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))

    # -- the publishing side ---------------------------------------------------
    def publish(self, round_: int, vector: np.ndarray, sample_code: int,
                worker_codes: Optional[Dict[int, int]] = None) -> None:
        """Open a round; ``worker_codes`` overrides ``sample_code`` for some workers."""
        with self.lock:
            self.round, self.vector, self.sample_code, self.answers = \
                round_, vector, sample_code, {}
            self.worker_codes = worker_codes or {}
            self.seconds, self.published_at = {}, time.monotonic()
            self.lock.notify_all()

    def collect(self, timeout: float) -> Answer:
        """Wait for the expected workers' answers (all, or a quorum); their sum, in worker
        order."""
        with self.lock:
            deadline = time.monotonic() + timeout
            while len(self.answers) < self.needed:
                if self.failure is not None:
                    raise WorkersFailed(f"resident workers failed: {self.failure}") \
                        from self.failure
                if self.stopped:
                    raise WorkersFailed("resident workers stopped before the fit ended")
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(self.expected) - set(self.answers))
                    raise TimeoutError(
                        f"resident workers {missing} did not answer round {self.round} "
                        f"within {timeout:.0f} s (workerTimeout); are there enough task "
                        "slots for every worker?")
                self.lock.wait(timeout=min(left, 1.0))
            answered = [w for w in self.expected if w in self.answers]
            for w in answered:
                self.used[w] += 1
            answers = [self.answers[w] for w in answered]
            self.timings = {w: (self.answers[w].count, self.seconds[w]) for w in answered}
        return functools.reduce(operator.add, answers)

    def request(self, vector: np.ndarray, sample_code: int, timeout: float,
                worker_codes: Optional[Dict[int, int]] = None) -> Answer:
        """The driver's step: the next round, published and collected."""
        self.publish(self.round + 1, vector, sample_code, worker_codes)
        return self.collect(timeout)

    def stop(self, failure: Optional[BaseException] = None) -> None:
        with self.lock:
            self.stopped = True
            self.failure = self.failure or failure
            self.lock.notify_all()
