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

import logging
import threading
from typing import Dict, Optional

import numpy as np

from gradspark.comm.compression import Compression
from gradspark.engine.batch_sizing import BatchSizing, quantize
from gradspark.engine.resident_workers import GradientResponse, Tree, serve_rounds, tree_task
from gradspark.engine.rounds import Answer, GradientRounds, RoundCode, WorkersFailed
from gradspark.engine.sums import GradientSums
from gradspark.engine.worker_step import WorkerStep
from gradspark.losses import Loss
from gradspark.rpc import ParameterServer
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.stages.slots import require_task_slots, resident_stage_lock
from gradspark.stages.sources import resident_task

logger = logging.getLogger(__name__)

__all__ = ["ResidentGradientEngine", "WorkersFailed"]


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
        # Where the workers read their blocks (gradspark.stages.sources: RddBlocks,
        # FrameBlocks), as TrainingData.block_source() gives it.
        self.source = blocks
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
            WorkerStep(self.loss, self.num_features, self.num_outputs,
                       self.mini_batch_fraction, self.seed, self.faults, self.objective),
            self.sparse_pull)
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
