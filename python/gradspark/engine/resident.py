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

It reuses the async mode's machinery (:mod:`gradspark.ps`): the same
authenticated wire format, server and client, and the same long-running
task wrapper. Only the handler differs: instead of an SSP clock it keeps one
round at a time. In the WEIGHTS frame the ``clock`` field carries the round
and ``version`` the step and whether to sample it: ``2 * step + sampled``.

Failures: a failed task is retried by Spark; it reconnects, reloads its
blocks and answers the round in progress. A stage that fails for good (or a
round not answered within ``timeout`` seconds) raises on the driver, in the
optimizer's call, so the fit fails cleanly and a rerun resumes from its
checkpoint.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Dict, Optional

import numpy as np
from pyspark import RDD

from gradspark.engine.python import grouped_sums
from gradspark.engine.sums import GradientSums, add_sums
from gradspark.faults import fault_plan
from gradspark.losses import Loss
from gradspark.ps import ParameterClient, ParameterServer
from gradspark.ps.tasks import resident_task, worker_partitions

logger = logging.getLogger(__name__)


class WorkersFailed(RuntimeError):
    """The resident workers' stage ended (failed or cancelled) before the fit did."""


class GradientRounds:
    """The server-side state of resident training: one request, all workers' answers.

    Implements :class:`gradspark.ps.server.Handler`; every method runs on a
    server connection thread and holds ``self.lock``.
    """

    def __init__(self, num_workers: int, num_features: int, num_outputs: int,
                 vector_size: int) -> None:
        self.num_workers = num_workers
        self.num_features = num_features
        self.num_outputs = num_outputs
        self.vector_size = vector_size
        self.lock = threading.Condition()
        self.round = 0  # rounds published; workers answer round `self.round`
        self.sample_code = 0
        self.vector = np.zeros(vector_size)
        self.answers: Dict[int, GradientSums] = {}
        self.stopped = False
        self.failure: Optional[BaseException] = None
        self.reconnects = 0

    # -- Handler -----------------------------------------------------------
    def on_hello(self, worker: int, attempt: int) -> int:
        with self.lock:
            if attempt > 0:
                self.reconnects += 1
                logger.warning("resident worker %d (task attempt %d) reconnected at round %d",
                               worker, attempt, self.round)
            return self.round

    def on_pull(self, worker: int):
        with self.lock:
            while not self.stopped and (self.round == 0 or worker in self.answers):
                self.lock.wait()
            return self.round, self.sample_code, self.stopped, self.vector

    def on_push(self, worker: int, clock: int, version: int, loss_sum: float,
                weight_sum: float, count: int, vector: np.ndarray) -> bool:
        with self.lock:
            if self.stopped or clock != self.round or worker in self.answers:
                return False
            self.answers[worker] = GradientSums.from_vector(
                vector, self.num_features, self.num_outputs, loss_sum, weight_sum, count)
            self.lock.notify_all()
            return True

    def on_done(self, worker: int) -> None:
        pass

    def on_disconnect(self, worker: int) -> None:
        pass

    # -- the driver's side ---------------------------------------------------
    def request(self, vector: np.ndarray, sample_code: int,
                timeout: float) -> Optional[GradientSums]:
        """Publish a round and wait for every worker's answer; their sum, in worker order."""
        with self.lock:
            self.round += 1
            self.vector, self.sample_code, self.answers = vector, sample_code, {}
            self.lock.notify_all()
            deadline = time.monotonic() + timeout
            while len(self.answers) < self.num_workers:
                if self.failure is not None:
                    raise WorkersFailed(f"resident workers failed: {self.failure}") \
                        from self.failure
                if self.stopped:
                    raise WorkersFailed("resident workers stopped before the fit ended")
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.num_workers)) - set(self.answers))
                    raise TimeoutError(
                        f"resident workers {missing} did not answer round {self.round} "
                        f"within {timeout:.0f} s (workerTimeout); are there enough task "
                        "slots for every worker?")
                self.lock.wait(timeout=min(left, 1.0))
            answers = [self.answers[w] for w in range(self.num_workers)]
        return functools.reduce(add_sums, answers)

    def stop(self, failure: Optional[BaseException] = None) -> None:
        with self.lock:
            self.stopped = True
            self.failure = self.failure or failure
            self.lock.notify_all()


def serve_rounds(client: ParameterClient, groups, loss: Loss, num_features: int,
                 num_outputs: int, fraction: float, seed: int, attempt: int = 0,
                 faults=None) -> int:
    """A resident worker's loop: take a round's linear map, answer with its sums."""
    d, k = num_features, num_outputs
    answered = 0
    while True:
        request = client.pull()
        if request.stop:
            break
        step, sampled = divmod(request.version, 2)
        if faults is not None:
            for partition in groups:
                faults.before_batch(partition, step, attempt)
        coef = request.vector[: d * k].reshape(d, k)
        offset, aux = request.vector[d * k: d * k + k], request.vector[d * k + k:]
        sums = grouped_sums(groups, loss, coef, offset, aux, fraction if sampled else 1.0,
                            seed, step) or GradientSums.zeros(d, k, loss.num_aux)
        client.push(request.clock, request.version, sums.loss_sum, sums.weight_sum,
                    sums.count, sums.vector())
        answered += 1
    client.done()
    return answered


class ResidentGradientEngine:
    """Gradient sums from workers that keep their blocks in memory for the whole fit.

    Same interface as :class:`~gradspark.engine.python.PythonGradientEngine`;
    use it as a context manager (``with engine:``) so the stage is started
    once and always stopped.
    """

    strategy = "resident"

    def __init__(self, blocks: RDD, loss: Loss, num_features: int, num_outputs: int,
                 mini_batch_fraction: float = 1.0, seed: int = 0, host: str = "",
                 timeout: float = 300.0) -> None:
        self.blocks = blocks
        self.loss = loss
        self.num_features = num_features
        self.num_outputs = num_outputs
        self.mini_batch_fraction = mini_batch_fraction
        self.seed = seed & 0xFFFFFFFF
        self.host = host
        self.timeout = timeout
        self.rounds: Optional[GradientRounds] = None
        self.server: Optional[ParameterServer] = None
        self._job: Optional[threading.Thread] = None
        self.job_group = f"gradspark-resident-{id(self):x}"

    def __enter__(self) -> "ResidentGradientEngine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def metrics(self) -> Dict[str, object]:
        if self.rounds is None:
            return {}
        return {"residentWorkers": self.rounds.num_workers, "rounds": self.rounds.round,
                "reconnects": self.rounds.reconnects}

    def start(self) -> None:
        """Start the server and the workers' stage (in a thread: its job runs for the fit)."""
        sc = self.blocks.context
        workers = worker_partitions(self.blocks, "resident")
        num_workers = workers.getNumPartitions()
        vector_size = self.num_features * self.num_outputs + self.num_outputs \
            + self.loss.num_aux
        rounds = self.rounds = GradientRounds(num_workers, self.num_features,
                                              self.num_outputs, vector_size)
        host = self.host or sc.getConf().get("spark.driver.host", "127.0.0.1")
        self.server = ParameterServer(rounds, host, num_workers)
        loss, d, k = self.loss, self.num_features, self.num_outputs
        fraction, seed, faults = self.mini_batch_fraction, self.seed, fault_plan()

        def loop(client, groups, attempt):
            return serve_rounds(client, groups, loss, d, k, fraction, seed, attempt, faults)

        task = resident_task(self.server.address, self.server.secret, loop)
        job_group = self.job_group

        def run_stage() -> None:
            try:
                sc.setJobGroup(job_group, "gradspark resident workers", True)
                reports = workers.mapPartitionsWithIndex(task).collect()
                logger.info("resident: %d workers finished (%s)", len(reports), reports)
                rounds.stop()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the driver's request
                rounds.stop(exc)

        self._job = threading.Thread(target=run_stage, name="gradspark-resident", daemon=True)
        self._job.start()
        logger.info("resident: %d workers serve gradient rounds from %s:%d", num_workers,
                    *self.server.address)

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
        sums = self.rounds.request(vector, 2 * step + int(sampled), self.timeout)
        return sums if sums.count > 0 else None

    def close(self) -> None:
        if self.rounds is not None:
            self.rounds.stop()
        if self._job is not None:
            self._job.join(timeout=30)
            if self._job.is_alive():
                self.blocks.context.cancelJobGroup(self.job_group)
                self._job.join(timeout=30)
        if self.server is not None:
            self.server.close()
