"""Asynchronous training: workers push gradients to the driver's parameter server (SSP).

Workers are long-running Spark tasks, one per partition of the cached blocks,
coalesced to the number of task slots: SSP waits for every worker, so all of
them must run at once (a worker without a slot would hold the others back
until ``workerTimeout`` took it out of the clock). A worker keeps its blocks
in memory for the whole fit and loops: pull the weights (waiting while it is
more than ``maxStaleness`` steps ahead of the slowest worker), compute the
gradient sums of a mini-batch of its rows (``miniBatchFraction``, sampled from
``(seed, step, worker)``), push them.

The server applies the same optimizers as sync mode:

* ``maxStaleness = 0`` (bulk-synchronous): a step's pushes are summed in
  worker order and applied as one update once every worker has pushed -- the
  same arithmetic as a sync step, so the result matches sync mode.
* otherwise each push is one update, with the mean gradient of that worker's
  batch, applied on arrival (asynchronous SGD); the learning-rate schedule
  advances per step, not per push.

A step's loss enters the history (and the progress log, the convergence test
and the checkpoints) once every worker still in the clock has passed it. It is
measured on the weights each worker pulled, so with staleness it lags slightly.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from typing import Dict, List, Optional

import numpy as np

from gradspark.checkpoints import CheckpointWriteError, TrainingCheckpoints
from gradspark.comm.compression import Compression, Encoded
from gradspark.data.blocks import Block
from gradspark.engine.sums import GradientSums, add_sums
from gradspark.engine.worker_step import WorkerStep, scalars_of
from gradspark.optim import learning_rate
from gradspark.rpc import ParameterClient, ParameterServer
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.stages.slots import resident_stage_lock
from gradspark.stages.sources import resident_task
from gradspark.trainer.clock import StalenessClock
from gradspark.trainer.objective import LinearObjective
from gradspark.integrations.progress import Progress
from gradspark.trainer.staleness import StaleGradients
from gradspark.trainer.sync import (
    TrainingResult,
    check_finite,
    first_order_update,
    small_step,
)
from gradspark.trainer.config import AsyncConfig
from gradspark.trainer.step_book import StepBook

logger = logging.getLogger(__name__)




class _Running:
    """Count, sum and max of an observed quantity."""

    def __init__(self) -> None:
        self.count, self.total, self.max = 0, 0.0, 0
        self.histogram: Dict[int, int] = {}

    def add(self, value: int) -> None:
        self.count += 1
        self.total += value
        self.max = max(self.max, value)
        self.histogram[value] = self.histogram.get(value, 0) + 1

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


class AsyncTraining:
    """The parameter server's state and update rule (its :class:`~gradspark.rpc.server.Handler`).

    Every method runs on a server connection thread and holds ``self.lock``.
    """

    def __init__(self, objective: LinearObjective, theta: np.ndarray, config: AsyncConfig,
                 num_workers: int, checkpoints: Optional[TrainingCheckpoints] = None,
                 resumed=None, progress: Optional[Progress] = None) -> None:
        self.objective = objective
        self.config = config
        self.checkpoints = checkpoints
        self.progress = progress or Progress(config.max_iter, config.label)
        self.optimizer = config.first_order(objective.l2)
        book = StepBook.open(self.optimizer, theta, resumed)
        self.theta, self.state, self.history = book.theta, book.state, book.history
        self.converged, self.resumed_from, start = book.converged, book.resumed_from, book.step
        self.bulk_synchronous = config.max_staleness == 0
        self.clock = StalenessClock(num_workers, config.max_staleness, config.worker_timeout,
                                    start)
        self.lock = threading.Condition()
        self.vector_size = objective.map_size
        self.version = 0  # updates applied
        self._map = (-1, None)  # (version, the linear map workers pull at it)
        self.stale = StaleGradients(config.stale_policy, config.delay_compensation,
                                    config.adaptive_compensation)
        # compensate: the weights each worker pulled (self.theta is replaced, never
        # modified, by an update, so these are references, not copies)
        self.pulled: Dict[int, tuple] = {}
        self.next_step = start  # first step whose loss is not yet recorded
        self.pending: Dict[int, Dict[int, GradientSums]] = {}
        self.step_start_theta = self.theta.copy()
        self.stopped = self.converged or start >= config.max_iter
        self.failure: Optional[Exception] = None  # a checkpoint write that failed
        self.started = time.monotonic()
        self.staleness = _Running()  # steps ahead of the slowest worker, at each pull
        self.update_delay = _Running()  # updates applied between a pull and its push
        self.worker_updates = [0] * num_workers
        self.worker_rows = [0] * num_workers  # rows of the accepted gradients
        self.stale_dropped = 0
        self.evictions = 0
        self.reconnects = 0

    # -- Handler -----------------------------------------------------------
    def on_hello(self, worker: int, attempt: int) -> int:
        with self.lock:
            start = self.clock.join(worker)
            if attempt > 0:
                self.reconnects += 1
                logger.warning("worker %d (task attempt %d) reconnected at step %d",
                               worker, attempt, start)
            return start

    def on_pull(self, worker: int):
        with self.lock:
            self.clock.join(worker)
            self.clock.waiting[worker] += 1
            try:
                while not self._finished(worker) and not self.clock.may_proceed(worker):
                    self.lock.wait(timeout=min(1.0, self.config.worker_timeout / 4))
                    if self.clock.evict_silent():
                        self.evictions += 1
                        self._record_ready_steps()
                        self.lock.notify_all()
            finally:
                self.clock.waiting[worker] -= 1
            self.clock.touch(worker)
            stop = self._finished(worker)
            if not stop:
                self.staleness.add(self.clock.lead(worker))
                if self.stale.policy == "compensate":
                    self.pulled[worker] = (self.version, self.theta)
            if self._map[0] != self.version:  # one map per update, whatever the pulls
                self._map = (self.version, self.objective.map_vector(self.theta))
            return self.clock.clocks[worker], self.version, stop, self._map[1]

    def on_push(self, worker: int, clock: int, version: int, loss_sum: float,
                weight_sum: float, count: int, vector: np.ndarray) -> bool:
        with self.lock, np.errstate(over="ignore", invalid="ignore"):
            self.clock.join(worker)
            if self.stopped or clock != self.clock.clocks[worker]:
                self.stale_dropped += 1  # e.g. computed before the worker was evicted
                return False
            if self.config.compression.lossy:
                vector = self.objective.sums_from_theta_space(vector)
            sums = GradientSums.from_vector(vector, self.objective.num_features,
                                            self.objective.num_outputs, loss_sum,
                                            weight_sum, count)
            self.objective.evaluations += 1
            self.update_delay.add(self.version - version)
            self.clock.advance(worker)
            self.worker_updates[worker] += 1
            self.worker_rows[worker] += count
            self.pending.setdefault(clock, {})[worker] = sums
            if not self.bulk_synchronous and weight_sum > 0:
                kept_version, kept = self.pulled.pop(worker, (None, None))
                self._update(sums, clock,
                             (self.version - version, kept if kept_version == version else None))
            self._record_ready_steps()
            self.lock.notify_all()
            return True

    def on_done(self, worker: int) -> None:
        with self.lock:
            self.clock.finish(worker)
            self._record_ready_steps()
            self.lock.notify_all()

    def on_disconnect(self, worker: int) -> None:
        with self.lock:
            self.clock.touch(worker)  # the timeout runs from here unless it reconnects
            self.lock.notify_all()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()

    # -- the update rule ---------------------------------------------------
    def _finished(self, worker: int) -> bool:
        return self.stopped or self.clock.clocks[worker] >= self.config.max_iter

    def _update(self, sums: GradientSums, step: int, stale=None) -> float:
        """One optimizer step; ``stale``: ``(tau, weights pulled or None)`` of an
        asynchronous push, for the stale-gradient policy."""
        objective = self.objective
        value, grad = objective.data_term_from_sums(self.theta, sums)
        lr = learning_rate(self.config.schedule, self.config.step_size, step,
                           self.config.max_iter)
        if stale is not None:
            grad, lr = self.stale.apply(grad, lr, stale[0], self.theta, stale[1])
        value, grad = objective.add_l2(self.theta, value, grad)
        loss = value + objective.l1_penalty(self.theta)
        self.theta, self.state = first_order_update(objective, self.optimizer, self.theta,
                                                    grad, self.state, lr)
        self.version += 1
        if not np.all(np.isfinite(self.theta)):
            self.stopped = True  # diverged: check_finite reports it
        return loss

    def _record_ready_steps(self) -> None:
        """Close every step all workers in the clock have pushed (all, once they are done)."""
        slowest = self.clock.slowest()
        if slowest is None:
            slowest = max(self.pending, default=self.next_step - 1) + 1
        while self.next_step < slowest and not self.stopped:
            step = self.next_step
            self.next_step += 1
            contributions = self.pending.pop(step, {})
            if not contributions:
                continue
            total = functools.reduce(add_sums, (contributions[w] for w in sorted(contributions)))
            if self.bulk_synchronous:
                loss = self._update(total, step)
            else:
                value, _ = self.objective.smooth_from_sums(self.theta, total)
                loss = value + self.objective.l1_penalty(self.theta)
            self._close_step(step + 1, loss)

    def _close_step(self, done: int, loss: float) -> None:
        self.history.append(loss)
        self.progress.update(done, loss)
        self.converged = small_step(self.step_start_theta, self.theta, self.config.tol)
        self.step_start_theta = self.theta.copy()
        if not np.isfinite(loss) or self.converged or done >= self.config.max_iter:
            self.stopped = True
        if self.checkpoints and (self.stopped or self.checkpoints.due(done)):
            try:
                self.checkpoints.save(done, self.theta, self.state, self.history,
                                      self.converged)
            except CheckpointWriteError as error:  # in a server thread: stop, raise later
                self.failure, self.stopped = error, True

    def result(self, server: Optional[ParameterServer]) -> TrainingResult:
        metrics = {
            "workers": len(self.worker_updates),
            "maxStalenessBound": self.config.max_staleness,
            "updatesApplied": self.version,
            "gradientsAccepted": int(sum(self.worker_updates)),
            "workerUpdates": list(self.worker_updates),
            "gradientsRejected": server.rejected_gradients if server else 0,
            "framesRejected": server.rejected_frames if server else 0,
            "connectionsRefused": server.refused_connections if server else 0,
            "channelsEncrypted": bool(server and server.encrypted),
            "staleGradientsDropped": self.stale_dropped,
            "maxStaleness": self.staleness.max,
            "meanStaleness": self.staleness.mean,
            "stalenessHistogram": {str(k): v for k, v
                                   in sorted(self.staleness.histogram.items())},
            "workerRowsPerSecond": [rows / max(time.monotonic() - self.started, 1e-9)
                                    for rows in self.worker_rows],
            "maxUpdateDelay": self.update_delay.max,
            "meanUpdateDelay": self.update_delay.mean,
            "evictions": self.evictions,
            "reconnects": self.reconnects,
            "wallTime": time.monotonic() - self.started,
            "compression": self.config.compression.name,
            "sparsePull": self.config.sparse_pull,
            **self.stale.metrics(),
        }
        if server is not None:
            metrics.update(server.traffic.totals())
        return TrainingResult(self.theta, list(self.history), len(self.history),
                              self.converged, self.resumed_from, metrics)


def run_worker(client: ParameterClient, groups: Dict[int, List[Block]], step: WorkerStep,
               max_iter: int, attempt: int = 0, compression: Compression = Compression(),
               sparse_pull: bool = True) -> int:
    """A worker's loop: pull, compute the sums of a (sampled) pass, push; returns pushes.

    ``groups`` are the worker's blocks by input partition (see
    :func:`gradspark.stages.sources.by_partition`); each partition samples from
    ``(seed, step, partition)``, as in sync mode (:class:`WorkerStep`). The
    pushed sums are compressed with this worker's own error-feedback residual,
    in the optimizer's space when ``step.objective`` is set (lossy compression).

    ``sparse_pull`` (sparse blocks): the worker samples its next step's rows
    before pulling and asks for the weights of the features they touch only
    (:mod:`gradspark.engine.touched`); exact pushes then go over the same
    keys. Its next step is its clock, which the server may move (a rejoin
    after eviction): a reply for another clock is pulled again.
    """
    worker = client.worker
    compress = compression.new()
    touched = step.touched(groups) if sparse_pull else None
    clock = client.start_clock
    pushes = 0
    while True:
        batch = step.sample(touched, clock)
        weights = client.pull(None if batch is None else batch.keys)
        if weights.stop or weights.clock >= max_iter:
            break
        if batch is not None and weights.clock != clock:
            clock = weights.clock  # the server moved this worker's clock: sample that step
            continue
        step.before([worker], weights.clock, attempt)
        sums = step.sums(groups, weights.vector, weights.clock, batch)
        step.after([worker], weights.clock, sums)
        encoded = step.encode(sums, batch)
        message = encoded if isinstance(encoded, Encoded) else compress(encoded)
        client.push(weights.clock, weights.version, *scalars_of(sums), message)
        pushes += 1
        clock = weights.clock + 1
    client.done()
    return pushes


def worker_task(address, secret: bytes, objective: LinearObjective, max_iter: int,
                compression: Compression, sparse_pull: bool = True, faults=None):
    """The function each long-running Spark task runs over its partitions' blocks."""
    space = dataclasses.replace(objective, engine=None) if compression.lossy else None
    step = WorkerStep(objective.loss, objective.num_features, objective.num_outputs,
                      objective.mini_batch_fraction, objective.seed & 0xFFFFFFFF, faults, space)

    def loop(client, groups, attempt):
        return run_worker(client, groups, step, max_iter, attempt, compression, sparse_pull)

    return resident_task(address, secret, loop)


def train_async(
    objective: LinearObjective,
    theta0: np.ndarray,
    config: AsyncConfig,
    blocks,
    checkpoints: Optional[TrainingCheckpoints] = None,
) -> TrainingResult:
    """Train with a parameter server in this (driver) process; see the module docs.

    ``blocks``: an RDD of Blocks, or a source from :mod:`gradspark.stages.sources`.
    """
    if config.optimizer == "lbfgs":
        raise ValueError("mode='async' needs a first-order optimizer, not L-BFGS")
    source = blocks
    sc = source.context
    num_workers = source.num_workers()
    resumed = checkpoints.resume_state() if checkpoints else None
    progress = Progress(config.max_iter, config.label)
    training = AsyncTraining(objective, theta0, config, num_workers, checkpoints, resumed,
                             progress)
    server = None
    try:
        if not training.stopped:
            bind, advertise = driver_endpoint(sc, config.host)
            with resident_stage_lock(sc):  # one stage of long-running workers at a time
                server = ParameterServer(training, bind, num_workers, advertise=advertise,
                                         encrypt=spark_encrypts(sc))
                try:
                    run = worker_task(server.address, server.secret, objective,
                                      config.max_iter, config.compression, config.sparse_pull,
                                      config.faults)
                    reports = source.run(run, "async")
                    logger.info("async: %d workers finished (%s)", len(reports), reports)
                finally:
                    training.stop()
                    server.close()
    finally:
        progress.close()
    if training.failure is not None:
        raise training.failure
    result = training.result(server)
    check_finite(result, config)
    return result
