"""Which data path, kernels and execution strategy a fit uses (``engine``/``executionStrategy``).

Three ways to compute a step's gradient sums, measured in
``benchmarks/engine.py``:

* ``resident`` (python kernels): one long-running stage keeps every
  partition's blocks in Python workers; a step is one message round. The
  fastest per step, but the blocks live in the Python workers' memory for
  the whole fit, on top of Spark's cache.
* ``jobPerStep`` + ``jvm`` kernels: a broadcast and a ``treeAggregate`` of
  Scala kernels over blocks cached in the JVM; spills to disk like any cache.
* ``jobPerStep`` + ``python`` kernels: the same job shape with numpy kernels;
  every step moves the cached blocks into Python workers (the fallback
  when the kernels jar is not available).

``auto`` takes ``resident`` unless a worker would hold more than
:data:`RESIDENT_BYTES_PER_WORKER` of blocks (the size Spark reports for the
cached blocks), or the optimizer is L-BFGS, the JVM kernels are loaded and a
worker would hold more than :data:`LBFGS_RESIDENT_BYTES_PER_WORKER` (its tens
of passes do not repay loading the workers: ``benchmarks/engine.py``),
or another fit of the session
holds resident workers (one resident stage at a time per SparkContext: two
that each got part of the task slots would wait on each other), then the JVM
kernels (or numpy when they cannot be loaded). When the kernels jar loads, every strategy
reads its blocks from the JVM's one-pass blockify and validation; otherwise
from the Python one.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# Above this, auto does not keep blocks resident in Python workers.
RESIDENT_BYTES_PER_WORKER = 2 << 30
# L-BFGS makes a few tens of passes. Loading a resident worker costs about 1 s per
# 200 MB of its blocks here, and on big dense blocks a resident step costs what a JVM
# job does (benchmarks/engine.py): above this size per worker it does not pay.
LBFGS_RESIDENT_BYTES_PER_WORKER = 64 << 20


@dataclass(frozen=True)
class EngineChoice:
    kernels: str  # "python" | "jvm": where a step's arithmetic runs
    strategy: str  # "jobPerStep" | "resident" | "async" | "sharded"
    reason: str


_unavailable_said = threading.Event()


def jvm_kernels_available(spark) -> bool:
    """Whether the kernels jar is (or can be) loaded into this session."""
    try:
        from gradspark.engine.jvm import load_kernels

        load_kernels(spark)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means: fall back to numpy
        if _unavailable_said.is_set():
            logger.info("JVM kernels not available (%s); using the python engine", exc)
        else:  # once per process: what it costs, and the remedy
            _unavailable_said.set()
            logger.warning(
                "gradspark's JVM kernels cannot load (%s): fits fall back to the numpy "
                "kernels, whose data pass is about 15x and job-per-step steps about 7x "
                "slower (docs/guide.md#benchmark). Install a gradspark wheel built with "
                "`make dist` (it carries the jar), or build the jar with `python -m "
                "gradspark.engine.kernels_build`", exc)
        return False


def data_path(spark, engine: str, strategy: str, mode: str) -> bool:
    """Whether to blockify in the JVM (decided before the data pass)."""
    if engine == "python" and strategy == "jobPerStep" and mode == "sync":
        return False  # numpy job-per-step reads Python-cached blocks each step
    if engine == "jvm":
        from gradspark.engine.jvm import load_kernels

        load_kernels(spark)  # asked for explicitly: its failure is the user's error
        return True
    return jvm_kernels_available(spark)


def cached_bytes(sc, rdd_id: int) -> float:
    """Memory + disk size of a cached RDD, from Spark's storage info (no extra job)."""
    for info in sc._jsc.sc().getRDDStorageInfo():
        if info.id() == rdd_id:
            return float(info.memSize() + info.diskSize())
    return 0.0


def choose(engine: str, strategy: str, mode: str, jvm_data: bool, bytes_per_worker: float,
           resident_busy: bool = False, optimizer: str = "lbfgs",
           resident_needed: str = "") -> EngineChoice:
    """Resolve ``auto`` once the data pass has told us the size of the blocks.

    ``resident_busy``: another fit of the session holds resident workers (e.g.
    ``CrossValidator(parallelism=...)``); auto then runs jobs instead of waiting.
    ``resident_needed``: the Params that only resident workers implement
    (compression, local SGD, a worker quorum); auto then keeps them resident
    whatever the size, waiting for the slots if another fit holds them.
    """
    if mode == "async":
        return EngineChoice("python", "async", "async mode: resident Python workers")
    if strategy == "auto":
        if resident_needed:
            strategy, why = "resident", f"{resident_needed} needs resident workers"
        elif engine == "jvm":
            strategy, why = "jobPerStep", "engine='jvm' runs one job per step"
        elif resident_busy:
            strategy, why = "jobPerStep", ("another fit of this session holds the resident "
                                           "workers")
        elif bytes_per_worker > RESIDENT_BYTES_PER_WORKER:
            strategy, why = "jobPerStep", (f"{bytes_per_worker / 2**30:.1f} GiB of blocks per "
                                           "worker: too much to keep resident")
        elif (optimizer == "lbfgs" and jvm_data and engine == "auto"
              and bytes_per_worker > LBFGS_RESIDENT_BYTES_PER_WORKER):
            strategy, why = "jobPerStep", (f"L-BFGS makes tens of passes: loading "
                                           f"{bytes_per_worker / 2**20:.0f} MiB per resident "
                                           "worker would cost more than it saves")
        else:
            strategy, why = "resident", (f"{bytes_per_worker / 2**20:.0f} MiB of blocks per "
                                         "worker fit in the resident workers")
    else:
        why = f"executionStrategy={strategy!r}"
    if strategy == "resident" or engine == "python" or not jvm_data:
        return EngineChoice("python", strategy, why)
    return EngineChoice("jvm", strategy, why)
