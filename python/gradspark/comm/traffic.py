"""Bytes and messages a fit moves: what each step costs on the wire.

:class:`Traffic` counts a parameter server's frames as they are written or
read (header, payload and tag), on the server's side of every connection:
for the driver's server that is everything that crosses the driver's
network interface for training. :class:`JobTraffic` counts the arrays of a
job-per-step engine, whose messages Spark frames.
"""

from __future__ import annotations

import threading
from typing import Dict


class Traffic:
    """Running totals over the connections a server has had (open ones included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: Dict[int, object] = {}
        self._closed = {"bytesSent": 0, "bytesReceived": 0, "messagesSent": 0,
                         "messagesReceived": 0}
        self.gradient_messages = 0
        self.gradient_bytes = 0

    def watch(self, channel) -> None:
        with self._lock:
            self._open[id(channel)] = channel

    def unwatch(self, channel) -> None:
        with self._lock:
            if self._open.pop(id(channel), None) is not None:
                self._add(self._closed, channel)

    def gradient(self, channel) -> None:
        """Count the frame ``channel`` last received as a gradient (a PUSH)."""
        with self._lock:
            self.gradient_messages += 1
            self.gradient_bytes += channel.last_received_bytes

    @staticmethod
    def _add(totals: Dict[str, int], channel) -> None:
        totals["bytesSent"] += channel.bytes_sent
        totals["bytesReceived"] += channel.bytes_received
        totals["messagesSent"] += channel.sent
        totals["messagesReceived"] += channel.received

    def totals(self) -> Dict[str, int]:
        with self._lock:
            totals = dict(self._closed)
            for channel in self._open.values():
                self._add(totals, channel)
            totals["gradientMessages"] = self.gradient_messages
            totals["gradientBytes"] = self.gradient_bytes
        return totals


class JobTraffic:
    """A job-per-step engine's arrays: each step's weights out, each partition's sums back.

    ``bytesSent`` counts the weights once per step, whatever the number of
    executors that fetch them; ``bytesReceived`` (= ``gradientBytes``) the
    partitions' sums as they leave their tasks (encoded, when compressed)
    plus their three scalars. Spark's pickling and framing are not included.
    """

    def __init__(self) -> None:
        self.totals = dict(bytesSent=0, bytesReceived=0, messagesSent=0, messagesReceived=0,
                           gradientMessages=0, gradientBytes=0)

    def step(self, weights_bytes: int, sums_bytes: int, sums: int) -> None:
        totals = self.totals
        totals["bytesSent"] += weights_bytes
        totals["messagesSent"] += 1
        for key in ("bytesReceived", "gradientBytes"):
            totals[key] += sums_bytes
        for key in ("messagesReceived", "gradientMessages"):
            totals[key] += sums


def per_step(totals: Dict[str, float], steps: int) -> Dict[str, float]:
    """Per-step figures of :meth:`Traffic.totals` (``{}`` without traffic), for a summary.

    A step is one optimizer step of the fit (``totalIterations``), so local SGD's
    rounds of several steps show as fewer bytes per step. Sharded servers
    (:mod:`gradspark.trainer.sharded`) add their shards' figures, and the
    driver's without the shard states it passes on at the start, at
    checkpoints and at the end (``driverStep...``: the clock's share alone).
    """
    if "bytesSent" not in totals:
        return {}
    steps = max(steps, 1)
    figures = {"bytesSentPerStep": totals["bytesSent"] / steps,
               "bytesReceivedPerStep": totals["bytesReceived"] / steps}
    if "shardBytesSent" in totals:
        figures.update(
            shardBytesSentPerStep=sum(totals["shardBytesSent"]) / steps,
            shardBytesReceivedPerStep=sum(totals["shardBytesReceived"]) / steps,
            driverStepBytesSentPerStep=(totals["bytesSent"] - totals["stateBytesSent"]) / steps,
            driverStepBytesReceivedPerStep=(
                totals["bytesReceived"] - totals["stateBytesReceived"]) / steps)
    else:
        figures["meanGradientBytes"] = \
            totals["gradientBytes"] / max(totals["gradientMessages"], 1)
    return figures
