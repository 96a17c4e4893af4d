"""Resident workers: one long-running Spark stage holds the blocks; a step is one message round.

The job-per-step engines pay, every step, for scheduling a Spark job and for
moving the cached blocks to the code that reads them. Here each worker (one
task per task slot) loads its blocks into memory once and then serves the
driver's requests for the whole fit: the driver publishes the raw-space
linear map, every worker answers with the gradient sums of all its rows, the
driver sums the answers in worker order. Sync semantics are exact: a step is
complete only when every worker has answered for it, and each input
partition samples its mini-batch from ``(seed, step, partition)`` as in the
job-per-step engine.

It reuses the async mode's machinery (:mod:`gradspark.rpc`): the same
authenticated wire format, server and client, and the same long-running
task wrapper. Only the handler differs: instead of an SSP clock it keeps one
round at a time. In the WEIGHTS frame the ``clock`` field carries the round
and ``version`` a :class:`RoundCode`: the step, whether to sample it and, with
throughput batch sizing (:mod:`gradspark.engine.batch_sizing`), the fraction
this worker samples at.

Communication (:mod:`gradspark.comm`): a worker's answer may be
compressed (``compression``; each worker keeps its own error-feedback
residual for the whole fit), and ``quorum < 1`` closes a round once that
fraction of the workers has answered ("backup workers", Chen et al. 2016):
a slow executor no longer sets the pace, but a step then sums only the
partitions of the workers that answered first -- an unbiased sample only if
which worker is slow is random; a worker that is always slow is always left
out. Answers for a closed round are dropped (and counted). Local SGD
(:mod:`gradspark.trainer.local_sgd`) runs on the same rounds with another
``respond`` function.

Failures: a failed task is retried by Spark; it reconnects, reloads its
blocks and answers the round in progress. A stage that fails for good (or a
round not answered within ``timeout`` seconds) raises on the driver, in the
optimizer's call, so the fit fails cleanly and a rerun resumes from its
checkpoint.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import operator
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from gradspark.comm.compression import Compression, Encoded
from gradspark.engine.batch_sizing import BatchSizing, dequantize, quantize
from gradspark.engine.python import grouped_sums
from gradspark.engine.sums import GradientSums, split_map
from gradspark.engine.touched import TouchedBatch, TouchedFeatures
from gradspark.losses import Loss
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.rpc import ParameterClient, ParameterServer
from gradspark.stages.slots import require_task_slots, resident_stage_lock
from gradspark.stages.sources import RddBlocks, by_partition, resident_task

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


@dataclass(frozen=True)
class Tree:
    """Fan-in tree over workers 0..n-1 in heap order; worker 0 talks to the driver.

    The fan-in follows ``treeAggregate``'s rule for ``aggregationDepth``:
    ``max(2, ceil(n ** (1 / depth)))``.
    """

    num_workers: int
    fan_in: int

    @classmethod
    def for_depth(cls, num_workers: int, depth: int) -> "Tree":
        return cls(num_workers, max(2, math.ceil(num_workers ** (1.0 / max(depth, 1)))))

    def parent(self, worker: int) -> Optional[int]:
        return None if worker == 0 else (worker - 1) // self.fan_in

    def children(self, worker: int) -> List[int]:
        first = self.fan_in * worker + 1
        return list(range(first, min(first + self.fan_in, self.num_workers)))

    def depth(self) -> int:
        """Levels from the root to the deepest worker (the last one, in heap order)."""
        levels, worker = 1, self.num_workers - 1
        while worker > 0:
            worker, levels = self.parent(worker), levels + 1
        return levels


@dataclass(frozen=True)
class GradientResponse:
    """A worker's answer to a gradient round: the sums of its rows at the published map.

    Picklable; it travels to the workers in the stage's closure. Every
    ``respond`` function (see also :mod:`gradspark.trainer.local_sgd`) takes
    ``(request, groups, attempt)`` and returns an :class:`Answer`.
    """

    loss: Loss
    num_features: int
    num_outputs: int
    fraction: float
    seed: int
    faults: object = None
    # Lossy compression: answer in the optimizer's space (LinearObjective.sums_to_theta_space)
    objective: object = None
    sparse_pull: bool = False  # see touched() and gradspark.engine.touched

    @property
    def answer_size(self) -> int:
        return self.num_features * self.num_outputs + self.num_outputs + self.loss.num_aux

    def touched(self, groups) -> Optional[TouchedFeatures]:
        """A worker's source of sparse-pull batches (None: it pulls the whole vector)."""
        if not self.sparse_pull:
            return None
        return TouchedFeatures(groups, self.num_features, self.num_outputs, self.loss.num_aux)

    def batch(self, touched: TouchedFeatures, code: int) -> Optional[TouchedBatch]:
        """The rows of the round with ``code`` (a :class:`RoundCode`), over their features."""
        round_code = RoundCode.decode(code)
        return touched.batch(round_code.fraction(self.fraction), self.seed, round_code.step)

    def first_code(self) -> int:
        """What a worker expects its first round to be: step 0, sampled if it samples."""
        return int(self.fraction < 1.0)

    def __call__(self, request, groups, attempt: int,
                 batch: Optional[TouchedBatch] = None) -> Answer:
        """The answer; over ``batch``'s keys (``request.vector`` holds their values) when
        given, as an Encoded message unless lossy compression needs the whole vector."""
        code = RoundCode.decode(request.version)
        step, fraction = code.step, code.fraction(self.fraction)
        # Throughput batching: sums weighted by the inverse inclusion probability, relative
        # to the configured fraction (1 when this worker samples at that fraction).
        weight = self.fraction / fraction if code.fraction_units else 1.0
        if self.faults is not None:
            for partition in groups:
                self.faults.before_batch(partition, step, attempt)
        d, k = self.num_features, self.num_outputs
        if batch is not None:
            sums = batch.sums(self.loss, request.vector, k)
            if sums is not None and weight != 1.0:
                sums = sums.scaled(weight)
            self._emulate(groups, step, sums)
            message = batch.encode(sums)
            vector = message if self.objective is None else \
                self.objective.sums_to_theta_space(message.decode())
            if sums is None:
                return Answer(vector, 0.0, 0.0, 0)
            return Answer(vector, sums.loss_sum, sums.weight_sum, sums.count)
        coef, offset, aux = split_map(request.vector, d, k)
        sums = grouped_sums(groups, self.loss, coef, offset, aux, fraction, self.seed, step) \
            or GradientSums.zeros(d, k, self.loss.num_aux)
        if weight != 1.0:
            sums = sums.scaled(weight)
        self._emulate(groups, step, sums)
        answer = Answer.of_sums(sums)
        if self.objective is not None:
            answer = answer._replace(vector=self.objective.sums_to_theta_space(answer.vector))
        return answer

    def _emulate(self, groups, step: int, sums: Optional[GradientSums]) -> None:
        if self.faults is not None and sums is not None:
            self.faults.after_batch(set(groups), step, sums.count)


def serve_rounds(client: ParameterClient, groups, respond, compression: Compression,
                 relay: Optional[GradientRounds] = None, timeout: float = 300.0) -> int:
    """A resident worker's loop: take a round's request, answer it (compressed).

    With ``relay`` (an inner node of a tree) the round is passed on to the
    children first, and the answer is this worker's plus theirs. The
    attempt (for fault injection) is what the upstream's welcome said.
    """
    answered = 0
    attempt = client.start_clock
    compress = compression.new()  # this worker's error-feedback residual lives here
    # Sparse pulls (a leaf's gradient answers): the keys go with the pull, so the worker
    # samples the round it expects next; a reply for another round is pulled again.
    touched = respond.touched(groups) if relay is None and hasattr(respond, "touched") \
        else None
    expected = respond.first_code() if touched is not None else 0
    if relay is not None:
        relay.set_attempt(attempt)
    try:
        while True:
            batch = respond.batch(touched, expected) if touched is not None else None
            request = client.pull(None if batch is None else batch.keys)
            if request.stop:
                break
            if batch is not None and (RoundCode.decode(request.version).rows()
                                      != RoundCode.decode(expected).rows()):
                expected = request.version
                continue
            if relay is not None:
                relay.publish(request.clock, request.vector, request.version)
            answer = respond(request, groups, attempt, batch) if batch is not None else \
                respond(request, groups, attempt)
            if relay is not None:
                answer = answer + relay.collect(timeout)
            message = answer.vector if isinstance(answer.vector, Encoded) else \
                compress(answer.vector)
            client.push(request.clock, request.version, answer.loss_sum, answer.weight_sum,
                        answer.count, message)
            answered += 1
            expected = RoundCode.decode(request.version).next_sampled()
        client.done()
    finally:
        if relay is not None:
            relay.stop()
            relay.drain(timeout)
    return answered


def tree_task(driver_address, secret: bytes, tree: Tree, loopback: bool, respond,
              compression: Compression, timeout: float, encrypt: bool = False):
    """The barrier task of one tree node: relay server, address exchange, then the loop."""

    def run(worker: int, tagged):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        groups = by_partition(tagged)
        children = tree.children(worker)
        relay = server = None
        try:
            if children:
                relay = GradientRounds(children, respond.answer_size, relay=True)
                host = "127.0.0.1" if loopback else \
                    ctx.getTaskInfos()[worker].address.rsplit(":", 1)[0]
                server = ParameterServer(relay, host, tree.num_workers, secret,
                                         encrypt=encrypt)
            addresses = ctx.allGather(json.dumps(server.address if server else None))
            parent = tree.parent(worker)
            upstream = tuple(driver_address) if parent is None else \
                tuple(json.loads(addresses[parent]))
            with ParameterClient(upstream, secret, worker, ctx.attemptNumber()) as client:
                answered = serve_rounds(client, groups, respond, compression, relay=relay,
                                        timeout=timeout)
        finally:
            if relay is not None:
                relay.stop()  # children waiting in a hello or a pull hear it (no-op if done)
            if server is not None:
                server.close()
        yield worker, ctx.attemptNumber(), answered

    return run


class ResidentGradientEngine:
    """Gradient sums from workers that keep their blocks in memory for the whole fit.

    Same interface as :class:`~gradspark.engine.python.PythonGradientEngine`;
    use it as a context manager (``with engine:``) so the stage is started
    once and always stopped.

    ``topology="star"``: every worker answers the driver (plain tasks, each
    retried on its own). ``"tree"``: workers answer their parent in a
    :class:`Tree` and only the root answers the driver, so the driver sends
    and receives one message per step whatever the number of workers; it is
    a barrier stage (the nodes learn each other's addresses through
    ``allGather``), which Spark retries as a whole when a node fails.

    ``compression`` applies to every answer (each worker, and each inner
    tree node, keeps its own residual); ``quorum < 1`` (star only) closes a
    round on the first ``ceil(quorum * workers)`` answers. ``respond``
    replaces the gradient answer (default :class:`GradientResponse`); the
    driver then calls :meth:`exchange` instead of :meth:`gradient_sums`.
    """

    strategy = "resident"

    def __init__(self, blocks, loss: Loss, num_features: int, num_outputs: int,
                 mini_batch_fraction: float = 1.0, seed: int = 0, host: str = "",
                 timeout: float = 300.0, topology: str = "star",
                 aggregation_depth: int = 2, *, compression: Compression = Compression(),
                 quorum: float = 1.0, respond=None, sparse_pull: bool = True,
                 batch_sizing: str = "fixed", objective=None, faults=None) -> None:
        self.batch_sizing = batch_sizing
        self.sizing: Optional[BatchSizing] = None  # star only: the driver sees every answer
        self.compression = compression
        self.quorum = quorum
        self.respond = respond
        self.sparse_pull = sparse_pull
        # Engine-less, when compression is lossy: see GradientResponse.
        self.objective = objective
        self.faults = faults  # test-only fault injection (gradspark.testing.faults)
        # An RDD of Blocks, or a source from gradspark.stages.sources (RddBlocks, FrameBlocks).
        self.source = blocks if hasattr(blocks, "run") else RddBlocks(blocks)
        self.loss = loss
        self.num_features = num_features
        self.num_outputs = num_outputs
        self.mini_batch_fraction = mini_batch_fraction
        self.seed = seed & 0xFFFFFFFF
        self.host = host
        self.timeout = timeout
        self.topology = topology
        self.aggregation_depth = aggregation_depth
        self.tree: Optional[Tree] = None
        self.rounds: Optional[GradientRounds] = None
        self.server: Optional[ParameterServer] = None
        self._job: Optional[threading.Thread] = None
        self._holds_lock = False
        self.job_group = f"gradspark-resident-{id(self):x}"

    def __enter__(self) -> "ResidentGradientEngine":
        try:
            self.start()
        except BaseException:
            # __exit__ does not run when __enter__ raises: release the stage lock and
            # the server here, or every later resident fit of this context would wait
            # for ever on a lock nobody holds any more.
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def metrics(self) -> Dict[str, object]:
        if self.rounds is None:
            return {}
        rounds = self.rounds
        workers = self.tree.num_workers if self.tree else len(rounds.expected)
        metrics = {"residentWorkers": workers, "aggregationTopology": self.topology,
                   "treeDepth": self.tree.depth() if self.tree else 1,
                   "rounds": rounds.round, "reconnects": rounds.reconnects,
                   "compression": self.compression.name,
                   "sparsePull": self.sparse_pull and self.respond is None}
        if self.quorum < 1.0:
            metrics.update(workerQuorum=self.quorum, quorumWorkers=rounds.needed,
                           lateAnswersDropped=rounds.late,
                           workerAnswersUsed=[rounds.used[w] for w in rounds.expected])
        if self.sizing is not None:
            metrics.update(self.sizing.metrics())
        if self.server is not None:
            metrics.update(self.server.traffic.totals(), channelsEncrypted=self.server.encrypted)
        return metrics

    def start(self) -> None:
        """Start the server and the workers' stage (in a thread: its job runs for the fit).

        Waits while another fit of this SparkContext has resident workers (see
        :func:`resident_stage_lock`); ``auto`` does not choose this strategy then.
        """
        sc = self.source.context
        self._stage_lock = resident_stage_lock(sc)
        if not self._stage_lock.acquire(blocking=False):
            logger.info("resident: waiting for another fit's resident workers to finish")
            self._stage_lock.acquire()
        self._holds_lock = True
        tree = self.topology == "tree"
        num_workers = self.source.num_workers()
        respond = self.respond or GradientResponse(
            self.loss, self.num_features, self.num_outputs, self.mini_batch_fraction,
            self.seed, self.faults, self.objective, self.sparse_pull)
        if tree:
            require_task_slots(sc, num_workers, use_gpu=False)
            self.tree = Tree.for_depth(num_workers, self.aggregation_depth)
        rounds = self.rounds = GradientRounds([0] if tree else range(num_workers),
                                              respond.answer_size, quorum=self.quorum)
        if not tree:
            self.sizing = BatchSizing(self.mini_batch_fraction, range(num_workers),
                                      adaptive=self.batch_sizing == "throughput")
        bind, advertise = driver_endpoint(sc, self.host)
        self.server = ParameterServer(rounds, bind, num_workers, advertise=advertise,
                                      encrypt=spark_encrypts(sc))
        compression = self.compression
        if tree:
            task = tree_task(self.server.address, self.server.secret, self.tree,
                             advertise.startswith("127."), respond, compression, self.timeout,
                             self.server.encrypted)
        else:
            def loop(client, groups, attempt):
                return serve_rounds(client, groups, respond, compression)

            task = resident_task(self.server.address, self.server.secret, loop)
        source = self.source
        job_group = self.job_group

        def run_stage() -> None:
            try:
                sc.setJobGroup(job_group, "gradspark resident workers", True)
                reports = source.run(task, "resident", barrier=tree)
                logger.info("resident: %d workers finished (%s)", len(reports), reports)
                rounds.stop()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the driver's request
                rounds.stop(exc)

        self._job = threading.Thread(target=run_stage, name="gradspark-resident", daemon=True)
        self._job.start()
        logger.info("resident: %d workers (%s%s) serve gradient rounds from %s:%d",
                    num_workers, self.topology,
                    f", fan-in {self.tree.fan_in}" if tree else "", *self.server.address)

    def gradient_sums(self, coef: np.ndarray, offset: np.ndarray, aux: np.ndarray,
                      fraction: float = 1.0, seed: int = 0,
                      step: int = 0) -> Optional[GradientSums]:
        """Sums over every row, or the mini-batch of ``step`` when ``fraction < 1``.

        The fraction and seed are the engine's (they travel in the stage's
        closure); ``fraction`` here only says full batch or mini-batch.
        """
        if self.rounds is None:
            raise RuntimeError("ResidentGradientEngine used outside its `with` block")
        sampled = fraction < 1.0
        if sampled and (fraction != self.mini_batch_fraction
                        or (seed & 0xFFFFFFFF) != self.seed):
            raise ValueError("a resident stage samples with the fraction and seed it was "
                             "started with")
        vector = np.concatenate([np.asarray(coef).ravel(), offset, aux])
        answer = self.exchange(vector, 2 * step + int(sampled))
        if answer.count == 0:
            return None
        if self.objective is not None:
            answer = answer._replace(vector=self.objective.sums_from_theta_space(answer.vector))
        return answer.sums(self.num_features, self.num_outputs)

    def exchange(self, vector: np.ndarray, code: int) -> Answer:
        """One round: publish ``vector`` and ``code`` (a :class:`RoundCode`), return the sum
        of the answers. Throughput batch sizing gives a worker its own fraction in its
        code, and measures the round's times."""
        if self.rounds is None:
            raise RuntimeError("ResidentGradientEngine used outside its `with` block")
        round_code, sizing = RoundCode.decode(code), self.sizing
        worker_codes = None
        if sizing is not None and round_code.sampled and not sizing.balanced():
            worker_codes = {
                w: code if f == sizing.fraction else
                round_code._replace(fraction_units=quantize(f)).encode()
                for w, f in sizing.fractions().items()}
        answer = self.rounds.request(vector, code, self.timeout, worker_codes)
        if sizing is not None:
            sizing.observe(self.rounds.timings, round_code.sampled)
        return answer

    def close(self) -> None:
        try:
            if self.rounds is not None:
                self.rounds.stop()
            if self._job is not None:
                self._job.join(timeout=30)
                if self._job.is_alive():
                    self.source.context.cancelJobGroup(self.job_group)
                    self._job.join(timeout=30)
            if self.server is not None:
                self.server.close()
        finally:
            if self._holds_lock:
                self._holds_lock = False
                self._stage_lock.release()
