"""Spark Connect: what a Connect session offers where the trainers use a ``SparkContext``.

A Spark Connect client (``SparkSession.builder.remote(...)``) has DataFrames
but no ``SparkContext``, no RDDs, no broadcasts and no py4j gateway. Every
fit therefore runs on DataFrame primitives there (see ``docs/connect.md``):
the data pass, each job-per-step step and the long-running stages (resident
workers, async workers, sharded servers, DDP) are ``mapInArrow`` stages, the
latter with ``barrier=True``; weights travel in the stage's closure instead of
a broadcast.

:class:`ConnectContext` is the handful of ``SparkContext`` services those
stages need (task slots, the host the workers reach the driver-side server
on, job cancellation), answered through the Connect session. It is an
adapter, not a stand-in: anything else a ``SparkContext`` does is absent.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from typing import Dict, Optional

logger = logging.getLogger(__name__)

_LOCAL_MASTER = re.compile(r"^local(?:\[(\d+|\*)(?:,\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[(\d+),\s*(\d+),\s*\d+\]$")


def is_connect(spark) -> bool:
    """Whether ``spark`` (a session, or a DataFrame's session) is a Spark Connect client."""
    session = getattr(spark, "sparkSession", spark)
    return type(session).__module__.startswith("pyspark.sql.connect")


class _ConnectConf:
    """``SparkConf.get`` over the session's runtime configuration."""

    def __init__(self, context: "ConnectContext") -> None:
        self._context = context

    def get(self, key: str, default: Optional[str] = None) -> Optional[str]:
        if key == "spark.driver.host":
            # The servers the workers reach live in *this* (client) process.
            return self._context.client_host
        value = self._context.spark.conf.get(key, None)
        return default if value is None else value


class ConnectContext:
    """The ``SparkContext`` services the gradspark stages use, for a Connect session.

    One per session (:func:`context_of`), so that the one-resident-stage lock
    (:func:`gradspark.stages.sources.resident_stage_lock`) is per session too.
    """

    def __init__(self, spark) -> None:
        self.spark = spark
        self.master = spark.conf.get("spark.master", "") or ""
        self._slots: Optional[int] = None

    @property
    def defaultParallelism(self) -> int:  # noqa: N802 - SparkContext's name
        """The cluster's default parallelism, i.e. its task slots.

        ``spark.default.parallelism`` when set; for local masters from the
        master URL; otherwise from the number of partitions Spark gives a
        ``range`` (``spark.sql.leafNodeDefaultParallelism`` defaults to the
        context's parallelism), which costs one tiny job, once per session.
        """
        if self._slots is None:
            self._slots = self._task_slots()
        return self._slots

    def _task_slots(self) -> int:
        configured = self.spark.conf.get("spark.default.parallelism", None)
        if configured:
            return int(configured)
        local = _LOCAL_MASTER.match(self.master)
        if local:
            cores = local.group(1)
            if cores is None:
                return 1
            return (os.cpu_count() or 1) if cores == "*" else int(cores)
        cluster = _LOCAL_CLUSTER.match(self.master)
        if cluster:
            return int(cluster.group(1)) * int(cluster.group(2))
        from pyspark.sql import functions as F

        partitions = self.spark.range(0, 1 << 20).agg(
            F.max(F.spark_partition_id()).alias("last")).first()["last"]
        return int(partitions) + 1

    @property
    def client_host(self) -> str:
        """The address executors use to reach servers in this process.

        Loopback when the Connect server runs on this machine (a local master,
        or ``sc://localhost``); else this host's name as it resolves here. Set
        ``parameterServerHost`` when executors must use another address.
        """
        if _LOCAL_MASTER.match(self.master) or _LOCAL_CLUSTER.match(self.master):
            return "127.0.0.1"
        url = os.environ.get("SPARK_REMOTE", "")
        if "localhost" in url or "127.0.0.1" in url:
            return "127.0.0.1"
        return socket.gethostbyname(socket.getfqdn())

    def getConf(self) -> _ConnectConf:  # noqa: N802
        return _ConnectConf(self)

    # Job groups become Connect operation tags (both are per thread).
    def setJobGroup(self, group: str, description: str,  # noqa: N802
                    interruptOnCancel: bool = False) -> None:  # noqa: N803
        self.spark.addTag(group)

    def cancelJobGroup(self, group: str) -> None:  # noqa: N802
        self.spark.interruptTag(group)


_contexts: Dict[int, ConnectContext] = {}
_contexts_guard = threading.Lock()


def context_of(spark):
    """``spark.sparkContext`` for a classic session, a :class:`ConnectContext` for Connect."""
    session = getattr(spark, "sparkSession", spark)
    if not is_connect(session):
        return session.sparkContext
    with _contexts_guard:
        context = _contexts.get(id(session))
        if context is None or context.spark is not session:
            context = _contexts[id(session)] = ConnectContext(session)
        return context


class InClosure:
    """A value that travels in the task's closure, read as ``.value`` like a broadcast."""

    def __init__(self, value) -> None:
        self.value = value


def ship(spark, value):
    """``sparkContext.broadcast(value)`` on a classic session; on Connect, which has no
    broadcasts, the value in the closure (:class:`InClosure`)."""
    if is_connect(spark):
        return InClosure(value)
    return getattr(spark, "sparkSession", spark).sparkContext.broadcast(value)
