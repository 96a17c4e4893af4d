"""The driver's side of a sharded fit: the SSP clock, the loss history, convergence and
checkpoints (:class:`Coordinator`), while the shards in the workers' tasks hold the
weights (:mod:`gradspark.trainer.shard_server`)."""

from __future__ import annotations

import functools
import logging
import operator
import threading
import time
from typing import Dict, List, Optional

import numpy as np

from gradspark.checkpoints import CheckpointWriteError
from gradspark.rpc import ParameterServer
from gradspark.trainer.config import AsyncConfig
from gradspark.trainer.clock import StalenessClock
from gradspark.trainer.objective import LinearObjective
from gradspark.integrations.progress import Progress
from gradspark.trainer.shard_server import (
    EMPTY,
    FINAL,
    FINAL_COUNTS,
    LOSS,
    STATE,
    STEP,
    TRAFFIC_COUNTS,
)
from gradspark.trainer.shards import (
    ShardLayout,
    join_states,
    pack_state,
    slice_state,
    unpack_state,
)
from gradspark.trainer.sync import TrainingResult
from gradspark.trainer.step_book import StepBook

logger = logging.getLogger(__name__)


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
        self.optimizer = config.first_order(objective.l2)  # its states' layout
        self.bulk_synchronous = config.max_staleness == 0
        book = StepBook.open(self.optimizer, theta, resumed)
        self.state_template = self.optimizer.init(np.array(theta, dtype=np.float64))
        self.resumed_from = book.resumed_from
        self.restore = (book.step, book.theta, book.state, book.history, book.converged)
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
            return self.clock.clocks[worker], attempt, stop, EMPTY

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
            theta, state = self._join([self.finals[s][len(FINAL_COUNTS):]
                                       for s in range(self.num_shards)])
            if self.checkpoints:
                self._save(self.next_step, theta, state)
                if self.failure is not None:
                    raise self.failure
        else:  # the fit had nothing left to do (a converged checkpoint)
            theta = self.restore[1]
        shard_counts = {name: [int(self.finals[s][i]) if s in self.finals else 0
                               for s in range(self.num_shards)]
                        for i, name in enumerate(FINAL_COUNTS)}
        shard_traffic = {name: shard_counts[name] for name in TRAFFIC_COUNTS}
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
