"""Sharded parameter servers: the weights and optimizer state live in executor tasks.

``parameterServers=N`` splits the parameters by key range
(:mod:`gradspark.trainer.shards`) over N server shards, each a
:class:`~gradspark.rpc.server.ParameterServer` thread inside one of the
workers' tasks (round robin), so the model's memory, its updates and the
weight/gradient traffic leave the driver. The driver keeps the
:class:`Coordinator`: the SSP clock (a worker asks it before each step),
the loss history (each worker reports its loss sums, each shard its part of
the penalty and of the step's norm), convergence, and the checkpoints.

A worker's step: permission for clock ``c`` from the coordinator; the rows
of step ``c`` (sampled from ``(seed, c, partition)``); pull the weights of
the features they touch from each shard (:mod:`gradspark.engine.touched`,
or whole slices on dense data); push each shard its part of the gradient
sums; report the loss sums to the coordinator.

A shard applies the async trainer's rule on its range: with
``maxStaleness = 0`` a step's pushes are summed in worker order and applied
once all workers have pushed; otherwise each push is applied on arrival.
Every optimizer here works coordinate by coordinate and, without centering,
so does the gradient, so a shard's arithmetic is the single server's on its
slice: bulk-synchronous sharded training gives the single server's weights
(tested to 1e-9). Centering (the standardized space with an intercept) ties
every coefficient's gradient to the intercept's and is refused: the raw
space, which ``parameterSpace="auto"`` picks for sparse data, has none.

The workers run as one barrier stage. Any lost task -- a worker or a shard
-- fails the stage; Spark retries it whole, the shards load the last
checkpoint the coordinator wrote (or the starting point, without
checkpoints) and every worker continues from that step. Mini-batches are
reproducible from ``(seed, step, partition)``, so a bulk-synchronous fit
killed and restored this way ends with the uninterrupted fit's weights.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from gradspark.checkpoints import CheckpointWriteError, TrainingCheckpoints
from gradspark.comm.compression import Encoded
from gradspark.engine.python import grouped_sums
from gradspark.engine.sums import GradientSums, split_map
from gradspark.engine.touched import TouchedFeatures
from gradspark.optim import learning_rate, make_first_order
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.rpc import ParameterClient, ParameterServer
from gradspark.trainer.clock import StalenessClock
from gradspark.trainer.shards import ShardLayout, join_states, pack_state, slice_state, unpack_state
from gradspark.stages.slots import require_task_slots, resident_stage_lock
from gradspark.stages.sources import RddBlocks, by_partition
from gradspark.trainer.asynchronous import AsyncConfig
from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.progress import Progress
from gradspark.trainer.sync import TrainingResult, check_finite

logger = logging.getLogger(__name__)

# REPORT frames to the coordinator: what they carry.
LOSS = 0  # a worker's step: [loss sum, weight sum, rows]
STEP = 1  # a shard closed a step: [penalty part, |step|^2 part, |theta|^2 part]
STATE = 2  # STEP, then the shard's packed state (a checkpoint step)
FINAL = 3  # a shard is done: [bytes sent, bytes received, messages sent, received], state
_TRAFFIC = ("bytesSent", "bytesReceived", "messagesSent", "messagesReceived")
# What each shard's server turned away, reported as the driver's server reports it.
_GUARD = ("framesRejected", "gradientsRejected", "connectionsRefused")
_FINAL = _TRAFFIC + _GUARD  # the counts leading a shard's FINAL report
_EMPTY = np.zeros(0)


@dataclass(frozen=True)
class ShardRule:
    """The objective and update of one shard's range: the same elementwise arithmetic as
    :class:`LinearObjective` (uncentered) and ``first_order_update`` on the whole vector."""

    num_outputs: int
    last: bool  # holds the intercepts and the loss's aux parameters
    fit_intercept: bool
    num_aux: int
    inv_std: np.ndarray  # per feature of the range
    l2: np.ndarray  # per parameter of the range
    l1: np.ndarray
    lower: np.ndarray

    @classmethod
    def of(cls, objective: LinearObjective, layout: ShardLayout, shard: int) -> "ShardRule":
        if objective.centered:
            raise ValueError(
                "parameterServers needs uncentered parameters: set parameterSpace='raw' "
                "(parameterSpace='auto' picks it for sparse data) or fitIntercept=False; "
                "centering ties every coefficient's gradient to the intercept's")
        first, end = layout.features(shard)
        lo, hi = layout.theta_range(shard)
        return cls(objective.num_outputs, layout.is_last(shard), objective.fit_intercept,
                   objective.loss.num_aux, objective.inv_std[first:end].copy(), objective.l2[lo:hi].copy(),
                   objective.l1[lo:hi].copy(), objective.lower_bounds()[lo:hi].copy())

    @property
    def size(self) -> int:
        return self.l2.size

    @property
    def map_size(self) -> int:
        """Offsets stand for intercepts in the map, fitted or not."""
        coefficients = self.inv_std.size * self.num_outputs
        return coefficients + (self.num_outputs + self.num_aux if self.last else 0)

    def map_slice(self, theta: np.ndarray) -> np.ndarray:
        """This range of :meth:`LinearObjective.map_vector`."""
        k, f = self.num_outputs, self.inv_std.size
        coef = (theta[: f * k].reshape(f, k) * self.inv_std[:, None]).ravel()
        if not self.last:
            return coef
        rest = theta[f * k:]
        intercept = rest[:k] if self.fit_intercept else np.zeros(k)
        aux = rest[k:] if self.fit_intercept else rest
        return np.concatenate([coef, intercept, aux])

    def gradient(self, theta: np.ndarray, sums: np.ndarray, weight_sum: float) -> np.ndarray:
        """This range of :meth:`LinearObjective.smooth_from_sums`'s gradient."""
        if weight_sum <= 0:
            return np.zeros_like(theta) + self.l2 * theta
        k, f = self.num_outputs, self.inv_std.size
        parts = [(sums[: f * k].reshape(f, k) * self.inv_std[:, None]).ravel()]
        if self.last:
            if self.fit_intercept:
                parts.append(sums[f * k: f * k + k])
            parts.append(sums[f * k + k:])
        return np.concatenate(parts) / weight_sum + self.l2 * theta

    def penalty(self, theta: np.ndarray) -> float:
        return 0.5 * float(self.l2 @ theta**2) + float(self.l1 @ np.abs(theta))


class ShardTraining:
    """One shard's parameters and optimizer state (a :class:`ParameterServer` handler).

    ``report(step, what, values)`` sends a REPORT to the coordinator; it is
    called with ``self.lock`` held, so a shard's reports arrive in step order.
    """

    def __init__(self, rule: ShardRule, config: AsyncConfig, num_workers: int, start: int,
                 theta: np.ndarray, state, report, checkpoint_interval: int = 0) -> None:
        self.rule = rule
        self.config = config
        self.optimizer = make_first_order(config.optimizer, config.momentum, config.nesterov)
        self.theta, self.state = theta, state
        self.report = report
        self.checkpoint_interval = checkpoint_interval
        self.bulk_synchronous = config.max_staleness == 0
        self.vector_size = rule.map_size
        self.lock = threading.Condition()
        self.clocks = [start] * num_workers
        self.done: set = set()
        self.next_step = start
        self.pending: Dict[int, Dict[int, tuple]] = {}
        self.version = 0
        self.step_start = theta.copy()
        self._map = (-1, None)

    # -- Handler -----------------------------------------------------------
    def on_hello(self, worker: int, attempt: int) -> int:
        with self.lock:
            return self.clocks[worker]

    def on_pull(self, worker: int):
        with self.lock:
            deadline = time.monotonic() + self.config.worker_timeout
            # Bulk-synchronous: the weights after every step before the worker's own.
            while self.bulk_synchronous and self.next_step < self.clocks[worker]:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"shard: step {self.next_step} not complete within "
                                       f"{self.config.worker_timeout:.0f} s")
                self.lock.wait(timeout=1.0)
            if self._map[0] != self.version:
                self._map = (self.version, self.rule.map_slice(self.theta))
            return self.clocks[worker], self.version, False, self._map[1]

    def on_push(self, worker: int, clock: int, version: int, loss_sum: float,
                weight_sum: float, count: int, vector: np.ndarray) -> bool:
        with self.lock, np.errstate(over="ignore", invalid="ignore"):
            if clock != self.clocks[worker] or worker in self.done:
                return False
            self.clocks[worker] += 1
            if self.bulk_synchronous:
                self.pending.setdefault(clock, {})[worker] = (vector, weight_sum)
            elif weight_sum > 0:
                self._apply(vector, weight_sum, clock)
            self._close_ready_steps()
            self.lock.notify_all()
            return True

    def on_done(self, worker: int) -> None:
        with self.lock, np.errstate(over="ignore", invalid="ignore"):
            self.done.add(worker)
            self._close_ready_steps()
            self.lock.notify_all()

    def on_disconnect(self, worker: int) -> None:
        with self.lock:
            self.lock.notify_all()

    # -- the update rule ---------------------------------------------------
    def _apply(self, sums: np.ndarray, weight_sum: float, step: int) -> None:
        lr = learning_rate(self.config.schedule, self.config.step_size, step,
                           self.config.max_iter)
        grad = self.rule.gradient(self.theta, sums, weight_sum)
        theta, self.state = self.optimizer.update(self.theta, grad, self.state, lr,
                                                  self.rule.l1)
        self.theta = np.maximum(theta, self.rule.lower)
        self.version += 1

    def _close_ready_steps(self) -> None:
        """Close every step all workers have pushed (as the async trainer does)."""
        active = [self.clocks[w] for w in range(len(self.clocks)) if w not in self.done]
        slowest = min(active) if active else max(self.pending, default=self.next_step - 1) + 1
        while self.next_step < slowest:
            step = self.next_step
            self.next_step += 1
            penalty = self.rule.penalty(self.theta)  # where this step's gradients were taken
            if self.bulk_synchronous:
                contributions = self.pending.pop(step, {})
                if not contributions:
                    continue
                workers = sorted(contributions)
                total = functools.reduce(operator.add, (contributions[w][0] for w in workers))
                weight = functools.reduce(operator.add, (contributions[w][1] for w in workers))
                self._apply(total, weight, step)
            values = [penalty, 0.0, 0.0]
            if self.config.tol > 0:  # the convergence test's parts (never met at tol = 0)
                moved = self.theta - self.step_start
                values[1:] = float(moved @ moved), float(self.theta @ self.theta)
                self.step_start = self.theta.copy()
            interval = self.checkpoint_interval
            if interval and (step + 1) % interval == 0:
                self.report(step, STATE, np.concatenate([values, self.packed()]))
            else:
                self.report(step, STEP, np.array(values))

    def packed(self) -> np.ndarray:
        return pack_state(self.theta, self.state)

    def wait_finished(self, num_workers: int, timeout: float) -> None:
        """Until every worker has said done (the shard's state is then final)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.done) < num_workers:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"shard: workers {sorted(set(range(num_workers)) - self.done)} "
                                       f"did not finish within {timeout:.0f} s")
                self.lock.wait(timeout=min(left, 1.0))


class Coordinator:
    """The driver's part: SSP clock, loss history, convergence, checkpoints, restarts.

    Implements :class:`gradspark.rpc.server.Handler` for ids ``0..W-1`` (workers)
    and ``W..W+N-1`` (the shards' reporting connections). A pull by a worker
    is its permission for its next step (the WEIGHTS frame's version field
    carries the stage attempt); a pull by a shard returns its slice of the
    restore point. A hello from an id already seen starts a new attempt (Spark
    retried the barrier stage): everything goes back to the restore point.
    """

    def __init__(self, objective: LinearObjective, layout: ShardLayout, config: AsyncConfig,
                 num_workers: int, theta: np.ndarray, checkpoints=None, resumed=None,
                 progress: Optional[Progress] = None) -> None:
        self.layout, self.config, self.checkpoints = layout, config, checkpoints
        self.num_workers, self.num_shards = num_workers, layout.num_shards
        self.progress = progress or Progress(config.max_iter, config.label)
        self.optimizer = make_first_order(config.optimizer, config.momentum, config.nesterov)
        self.bulk_synchronous = config.max_staleness == 0
        theta = np.array(theta, dtype=np.float64)
        self.state_template = self.optimizer.init(theta)
        start, state, history, converged = 0, self.state_template, [], False
        if resumed is not None:
            theta, start, converged = resumed.theta, resumed.step, resumed.converged
            state = resumed.optimizer_state or state
            history = list(resumed.history)
        self.resumed_from = None if resumed is None else start
        self.restore = (start, theta, state, history, converged)
        self.vector_size = 8 + max(
            pack_state(np.zeros(hi - lo), self.optimizer.init(np.zeros(hi - lo))).size
            for lo, hi in map(layout.theta_range, range(self.num_shards)))
        self.lock = threading.Condition()
        self.attempt = 0
        self.restarts = 0
        self.hellos: set = set()
        self.staleness_max = 0
        # Shard states through the driver (start, checkpoints, end), apart from each
        # step's clock messages.
        self.state_bytes = {"sent": 0, "received": 0}
        self.started = time.monotonic()
        self._reset()

    def _reset(self) -> None:
        start, _, _, history, converged = self.restore
        self.clock = StalenessClock(self.num_workers, self.config.max_staleness,
                                    self.config.worker_timeout, start)
        self.next_step = start
        self.history = list(history)
        self.converged = converged
        self.stopped = converged or start >= self.config.max_iter
        self.failure: Optional[Exception] = None  # a checkpoint write that failed
        self.losses: Dict[int, Dict[int, np.ndarray]] = {}
        self.shard_reports: Dict[int, Dict[int, np.ndarray]] = {}
        self.finals: Dict[int, np.ndarray] = {}

    # -- Handler -----------------------------------------------------------
    def on_hello(self, worker: int, attempt: int) -> int:
        with self.lock:
            if worker in self.hellos:  # Spark retried the stage: back to the restore point
                self.attempt += 1
                self.restarts += 1
                self.hellos = set()
                self._reset()
                logger.warning("sharded training: stage attempt %d restarts from step %d",
                               self.attempt, self.restore[0])
                self.lock.notify_all()
            self.hellos.add(worker)
            return self.restore[0]

    def on_pull(self, worker: int):
        with self.lock:
            if worker >= self.num_workers:  # a shard: its slice of the restore point
                vector = self._restore_slice(worker - self.num_workers)
                self.state_bytes["sent"] += vector.nbytes
                return self.restore[0], self.attempt, self.stopped, vector
            attempt = self.attempt
            deadline = time.monotonic() + self.config.worker_timeout
            while not self._may_step(worker) and attempt == self.attempt:
                if time.monotonic() > deadline:  # no wait without a deadline (a CI hang)
                    behind = [w for w in sorted(self.clock.members)
                              if self.clock.clocks[w] < self.clock.clocks[worker]]
                    raise TimeoutError(
                        f"sharded: worker {worker} at step {self.clock.clocks[worker]} waited "
                        f"{self.config.worker_timeout:.0f} s (workerTimeout) for workers "
                        f"{behind} behind it; its task fails and Spark retries the stage")
                self.lock.wait(timeout=1.0)
            self.staleness_max = max(self.staleness_max, self.clock.lead(worker))
            # A worker of a failed stage attempt that was waiting here must not go on.
            stop = self.stopped or attempt != self.attempt \
                or self.clock.clocks[worker] >= self.config.max_iter
            return self.clock.clocks[worker], attempt, stop, _EMPTY

    def _may_step(self, worker: int) -> bool:
        if self.stopped:
            return True
        if not self.clock.may_proceed(worker):
            return False
        # Bulk-synchronous: the steps before this one closed, so a converged fit stops
        # exactly where the single server's would.
        return not self.bulk_synchronous or self.next_step >= self.clock.clocks[worker]

    def on_push(self, worker, clock, version, loss_sum, weight_sum, count, vector) -> bool:
        return False  # gradients go to the shards

    def on_report(self, worker: int, step: int, attempt: int, what: int,
                  values: np.ndarray) -> bool:
        with self.lock, np.errstate(over="ignore", invalid="ignore"):
            if attempt != self.attempt:
                return False  # from a task of a failed stage attempt
            if worker < self.num_workers:
                if what != LOSS or self.stopped or step != self.clock.clocks[worker]:
                    return False
                self.losses.setdefault(step, {})[worker] = values
                self.clock.advance(worker)
            elif what == FINAL:
                self.finals[worker - self.num_workers] = values
                self.state_bytes["received"] += values.nbytes
            elif what in (STEP, STATE):
                if what == STATE:
                    self.state_bytes["received"] += values.nbytes
                self.shard_reports.setdefault(step, {})[worker - self.num_workers] = values
            else:
                return False
            self._close_ready_steps()
            self.lock.notify_all()
            return True

    def on_done(self, worker: int) -> None:
        with self.lock:
            if worker < self.num_workers:
                self.clock.finish(worker)
                self._close_ready_steps()
            self.lock.notify_all()

    def on_disconnect(self, worker: int) -> None:
        with self.lock:
            self.lock.notify_all()

    # -- steps ---------------------------------------------------------------
    def _close_ready_steps(self) -> None:
        slowest = self.clock.slowest()
        if slowest is None:
            slowest = max(self.losses, default=self.next_step - 1) + 1
        while self.next_step < slowest and not self.stopped:
            step = self.next_step
            reports = self.shard_reports.get(step, {})
            contributions = self.losses.get(step, {})
            if contributions and len(reports) < self.num_shards:
                return  # a shard has not closed this step yet
            self.next_step += 1
            self.losses.pop(step, None)
            self.shard_reports.pop(step, None)
            if not contributions:
                continue
            workers = sorted(contributions)
            loss_sum = functools.reduce(operator.add, (contributions[w][0] for w in workers))
            weight = functools.reduce(operator.add, (contributions[w][1] for w in workers))
            parts = [reports[s] for s in range(self.num_shards)]
            loss = (loss_sum / weight if weight > 0 else 0.0) + sum(p[0] for p in parts)
            moved = np.sqrt(sum(p[1] for p in parts))
            norm = np.sqrt(sum(p[2] for p in parts))
            self._close_step(step + 1, loss, bool(moved < self.config.tol * max(norm, 1.0)),
                             parts)

    def _close_step(self, done: int, loss: float, converged: bool, parts) -> None:
        self.history.append(loss)
        self.progress.update(done, loss)
        self.converged = converged
        if not np.isfinite(loss) or converged or done >= self.config.max_iter:
            self.stopped = True
        if self.checkpoints and self.checkpoints.due(done) and not self.stopped \
                and all(p.size > 3 for p in parts):
            theta, state = self._join([p[3:] for p in parts])
            self._save(done, theta, state)

    def _save(self, done: int, theta, state) -> None:
        try:
            self.checkpoints.save(done, theta, state, self.history, self.converged)
        except CheckpointWriteError as error:  # in a server thread: stop, raise later
            self.failure, self.stopped = error, True
            return
        self.restore = (done, theta, state, list(self.history), self.converged)

    def _join(self, packed: List[np.ndarray]):
        thetas, states = [], []
        for shard, vector in enumerate(packed):
            lo, hi = self.layout.theta_range(shard)
            theta, state = unpack_state(vector, self.optimizer.init(np.zeros(hi - lo)), hi - lo)
            thetas.append(theta)
            states.append(state)
        theta = np.concatenate(thetas)
        return theta, join_states(states, self.state_template, theta.size)

    def _restore_slice(self, shard: int) -> np.ndarray:
        _, theta, state, _, _ = self.restore
        lo, hi = self.layout.theta_range(shard)
        return pack_state(theta[lo:hi], slice_state(state, theta.size, lo, hi))

    def result(self, server: Optional[ParameterServer]) -> TrainingResult:
        if len(self.finals) == self.num_shards:
            theta, state = self._join([self.finals[s][len(_FINAL):]
                                       for s in range(self.num_shards)])
            if self.checkpoints:
                self._save(self.next_step, theta, state)
                if self.failure is not None:
                    raise self.failure
        else:  # the fit had nothing left to do (a converged checkpoint)
            theta = self.restore[1]
        shard_counts = {name: [int(self.finals[s][i]) if s in self.finals else 0
                               for s in range(self.num_shards)]
                        for i, name in enumerate(_FINAL)}
        shard_traffic = {name: shard_counts[name] for name in _TRAFFIC}
        guard = {"framesRejected": server.rejected_frames if server else 0,
                 "gradientsRejected": server.rejected_gradients if server else 0,
                 "connectionsRefused": server.refused_connections if server else 0}
        metrics = {
            "workers": self.num_workers, "parameterServers": self.num_shards,
            "shardFeatureBounds": list(self.layout.bounds),
            "maxStalenessBound": self.config.max_staleness, "maxStaleness": self.staleness_max,
            "stageRestarts": self.restarts, "wallTime": time.monotonic() - self.started,
            "sparsePull": self.config.sparse_pull,
            # the shards' servers follow the driver's (they are told by its challenge)
            "channelsEncrypted": bool(server and server.encrypted),
            "stateBytesSent": self.state_bytes["sent"],
            "stateBytesReceived": self.state_bytes["received"],
            **{f"shard{name[0].upper()}{name[1:]}": values
               for name, values in shard_traffic.items()},
            # the driver's coordinator and every shard's server together
            **{name: count + sum(shard_counts[name]) for name, count in guard.items()},
        }
        if server is not None:
            metrics.update(server.traffic.totals())
        return TrainingResult(theta, list(self.history), len(self.history), self.converged,
                              self.resumed_from, metrics)


def run_sharded_worker(coordinator: ParameterClient, shards: List[ParameterClient],
                       layout: ShardLayout, groups, loss, max_iter: int, fraction: float,
                       seed: int, faults=None, sparse_pull: bool = True) -> int:
    """A worker's loop (see the module docs); returns its steps."""
    worker, d, k = coordinator.worker, layout.num_features, layout.num_outputs
    touched = TouchedFeatures(groups, d, k, loss.num_aux) if sparse_pull else None
    ranges = [layout.map_range(s) for s in range(layout.num_shards)]
    steps = 0
    while True:
        permit = coordinator.pull()
        clock, attempt = permit.clock, permit.version
        if permit.stop or clock >= max_iter:
            break
        if faults is not None:
            faults.before_batch(worker, clock, attempt)
        batch = touched.batch(fraction, seed, clock) if touched is not None else None
        pieces = layout.split_keys(batch.keys) if batch is not None else None
        for s, client in enumerate(shards):
            client.request_weights(None if pieces is None else pieces[s][1])
        replies = [client.weights() for client in shards]
        if any(r.clock != clock for r in replies):
            raise RuntimeError(f"worker {worker}: shards at clocks "
                               f"{[r.clock for r in replies]}, coordinator at {clock}")
        values = np.concatenate([r.vector for r in replies])
        if batch is not None:
            sums = batch.sums(loss, values, k)
            message = batch.encode(sums).values
            outgoing = [Encoded(hi - lo, message[part], local)
                        for (lo, hi), (part, local) in zip(ranges, pieces)]
        else:
            coef, offset, aux = split_map(values, d, k)
            sums = grouped_sums(groups, loss, coef, offset, aux, fraction, seed, clock)
            vector = (sums or GradientSums.zeros(d, k, loss.num_aux)).vector()
            outgoing = [vector[lo:hi] for lo, hi in ranges]
        scalars = (0.0, 0.0, 0) if sums is None else (sums.loss_sum, sums.weight_sum,
                                                      sums.count)
        for client, reply, message in zip(shards, replies, outgoing):
            client.send_push(clock, reply.version, *scalars, message)
        if not all(client.acked() for client in shards):
            raise RuntimeError(f"worker {worker}: a shard refused step {clock}")
        coordinator.report(clock, attempt, LOSS, np.array(scalars, dtype=np.float64))
        steps += 1
    for client in shards:
        client.done()
    coordinator.done()
    return steps


def sharded_task(address, secret: bytes, objective: LinearObjective, layout: ShardLayout,
                 config: AsyncConfig, num_workers: int, loopback: bool,
                 checkpoint_interval: int):
    """The barrier task of one worker: host its shards, exchange addresses, work."""
    loss, rules = objective.loss, [ShardRule.of(objective, layout, s)
                                   for s in range(layout.num_shards)]
    fraction, seed = objective.mini_batch_fraction, objective.seed & 0xFFFFFFFF
    faults, timeout = config.faults, config.worker_timeout

    def run(worker: int, tagged):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        groups = by_partition(tagged)
        host = "127.0.0.1" if loopback else \
            ctx.getTaskInfos()[worker].address.rsplit(":", 1)[0]
        hosted: Dict[int, tuple] = {}
        clients: List[ParameterClient] = []
        try:
            for shard in layout.hosts(num_workers)[worker]:
                reporter = ParameterClient(address, secret, num_workers + shard)
                clients.append(reporter)
                start = reporter.pull()
                rule = rules[shard]
                optimizer = make_first_order(config.optimizer, config.momentum,
                                             config.nesterov)
                theta, state = unpack_state(start.vector, optimizer.init(np.zeros(rule.size)),
                                            rule.size)
                report = functools.partial(_report, reporter, start.version)
                training = ShardTraining(rule, config, num_workers, start.clock, theta, state,
                                         report, checkpoint_interval)
                # as encrypted as the driver's server, which this task just reached
                server = ParameterServer(training, host, num_workers, secret,
                                         encrypt=reporter.encrypted)
                hosted[shard] = (training, server, reporter, start.version)
            gathered = ctx.allGather(json.dumps({s: v[1].address for s, v in hosted.items()}))
            addresses = {int(s): tuple(a) for text in gathered
                         for s, a in json.loads(text).items()}
            coordinator = ParameterClient(address, secret, worker)
            clients.append(coordinator)
            shards = [ParameterClient(addresses[s], secret, worker)
                      for s in range(layout.num_shards)]
            clients.extend(shards)
            steps = run_sharded_worker(coordinator, shards, layout, groups, loss,
                                       config.max_iter, fraction, seed, faults,
                                       config.sparse_pull)
            for shard, (training, server, reporter, attempt) in hosted.items():
                training.wait_finished(num_workers, timeout)
                counts = {**server.traffic.totals(), "framesRejected": server.rejected_frames,
                          "gradientsRejected": server.rejected_gradients,
                          "connectionsRefused": server.refused_connections}
                with training.lock:
                    reporter.report(training.next_step, attempt, FINAL, np.concatenate(
                        [[counts[name] for name in _FINAL], training.packed()]))
        finally:
            for _, server, _, _ in hosted.values():
                server.close()
            for client in clients:
                client.close()
        yield worker, ctx.attemptNumber(), steps

    return run


def _report(client: ParameterClient, attempt: int, step: int, what: int,
            values: np.ndarray) -> None:
    client.report(step, attempt, what, values)


def train_sharded(objective: LinearObjective, theta0: np.ndarray, config: AsyncConfig,
                  blocks, num_shards: int,
                  checkpoints: Optional[TrainingCheckpoints] = None) -> TrainingResult:
    """Train with ``num_shards`` parameter-server shards in the workers' tasks."""
    if config.optimizer == "lbfgs":
        raise ValueError("parameterServers needs a first-order optimizer, not L-BFGS")
    if config.compression.lossy:
        raise ValueError("parameterServers supports compression='none' only (sparse pushes "
                         "are exact and already small)")
    source = blocks if hasattr(blocks, "run") else RddBlocks(blocks)
    sc = source.context
    num_workers = source.num_workers()
    if num_shards > objective.num_features:
        raise ValueError(f"parameterServers={num_shards} exceeds the {objective.num_features} "
                         "features to split")
    layout = ShardLayout.even(objective.num_features, objective.num_outputs, objective.size,
                              objective.map_size, num_shards)
    resumed = checkpoints.resume_state() if checkpoints else None
    progress = Progress(config.max_iter, config.label)
    coordinator = Coordinator(objective, layout, config, num_workers, theta0, checkpoints,
                              resumed, progress)
    ShardRule.of(objective, layout, 0)  # the centering check, before any task starts
    server = None
    try:
        if not coordinator.stopped:
            require_task_slots(sc, num_workers, use_gpu=False)
            bind, advertise = driver_endpoint(sc, config.host)
            with resident_stage_lock(sc):
                server = ParameterServer(coordinator, bind, num_workers + num_shards,
                                         advertise=advertise, encrypt=spark_encrypts(sc))
                try:
                    task = sharded_task(server.address, server.secret, objective, layout,
                                        config, num_workers, advertise.startswith("127."),
                                        checkpoints.interval if checkpoints else 0)
                    reports = source.run(task, "sharded", barrier=True)
                    logger.info("sharded: %d workers finished (%s)", len(reports), reports)
                finally:
                    server.close()
    finally:
        progress.close()
    if coordinator.failure is not None:
        raise coordinator.failure
    result = coordinator.result(server)
    check_finite(result, config)
    return result
