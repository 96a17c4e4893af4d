"""A parameter-server shard: its range's optimizer rule (:class:`ShardRule`) and its
server handler (:class:`ShardTraining`), inside a worker's task of a sharded fit
(:mod:`gradspark.trainer.sharded`). Shards report to the driver's coordinator with
the kinds below."""

from __future__ import annotations

import functools
import logging
import operator
import threading
import time
from dataclasses import dataclass
from typing import Dict

import numpy as np

from gradspark.optim import learning_rate
from gradspark.trainer.config import AsyncConfig
from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.shards import ShardLayout, pack_state

logger = logging.getLogger(__name__)


# REPORT frames to the coordinator: what they carry.
LOSS = 0  # a worker's step: [loss sum, weight sum, rows]


STEP = 1  # a shard closed a step: [penalty part, |step|^2 part, |theta|^2 part]


STATE = 2  # STEP, then the shard's packed state (a checkpoint step)


FINAL = 3  # a shard is done: [bytes sent, bytes received, messages sent, received], state


TRAFFIC_COUNTS = ("bytesSent", "bytesReceived", "messagesSent", "messagesReceived")


# What each shard's server turned away, reported as the driver's server reports it.
GUARD_COUNTS = ("framesRejected", "gradientsRejected", "connectionsRefused")


FINAL_COUNTS = TRAFFIC_COUNTS + GUARD_COUNTS  # the counts leading a shard's FINAL report


EMPTY = np.zeros(0)


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
        self.optimizer = config.first_order(rule.l2)
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
