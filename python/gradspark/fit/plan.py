"""The fit plan: a linear estimator's Params resolved, once, into how the fit runs.

A fit's path is decided here and nowhere else, in two steps:

1. :func:`plan_data`, before the data pass: the Params are checked
   (:func:`gradspark.fit.rules.check_params`) and the data path chosen:
   ``frame`` (a Spark Connect session: numpy kernels over a cached block
   frame), ``jvm`` (the kernels jar blockifies, validates and caches in the
   JVM) or ``python`` (numpy blockify in Python workers).
2. :func:`plan_fit`, after it, when Spark has told the size of the cached
   blocks: the kernels, the execution strategy and the trainer, as a frozen
   :class:`FitPlan`. :mod:`gradspark.fit.execute` builds the engine and runs
   the trainer the plan names, without looking at Params again.

Three ways to compute a sync step's gradient sums, measured in
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
worker would hold more than :data:`LBFGS_RESIDENT_BYTES_PER_WORKER` of dense
blocks or :data:`LBFGS_SPARSE_RESIDENT_BYTES_PER_WORKER` of sparse ones (past
those, its tens of passes do not repay loading the workers:
``benchmarks/engine.py``, ``benchmarks/strategy_choice.py``), or
another fit of the session holds resident workers (one resident stage at a
time per SparkContext: two that each got part of the task slots would wait on
each other), then the JVM kernels (or numpy when they cannot be loaded).
Async mode and parameter-server shards always run resident Python workers.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from gradspark.comm.compression import Compression
from gradspark.connect import is_connect
from gradspark.data.blocks import SPARSE_DENSITY
from gradspark.data.statistics import DataStatistics
from gradspark.fit.rules import averaging_supported, check_params, has_l1
from gradspark.jvm.loader import jvm_kernels_available, load_kernels
from gradspark.optim.lbfgs import is_unbounded
from gradspark.params import SGDParams
from gradspark.stages.slots import resident_stage_running, task_slots
from gradspark.testing.faults import FaultPlan, fault_plan
from gradspark.trainer import AsyncConfig, SyncConfig

logger = logging.getLogger(__name__)

# Above this, auto does not keep blocks resident in Python workers.
RESIDENT_BYTES_PER_WORKER = 2 << 30
# L-BFGS makes a few tens of passes. Loading a resident worker costs about 1 s per
# 200 MB of its blocks here, and on big dense blocks a resident step saves a JVM job's
# fixed cost but little arithmetic (benchmarks/engine.py): past this size per worker
# the load costs more than the steps save (strategy_choice.py: dense 100,000-1,000,000
# rows x 100 ran 1.3-2.4x faster in jobs).
LBFGS_RESIDENT_BYTES_PER_WORKER = 64 << 20
# On sparse blocks a JVM step also pays for every partition's feature-sized result:
# resident fits were 1.1-2.4x faster on 12 of 15 shapes from 36 to 648 MiB per worker
# (ctr and tail generators, 2^18-2^24 buckets; strategy_choice.py, three runs). Of the
# other three, two did not repeat and one was within 6% (docs/wide_sparse.md).
# Measured up to 648 MiB; the cap bounds the workers' copy of the blocks, held on top
# of Spark's cache.
LBFGS_SPARSE_RESIDENT_BYTES_PER_WORKER = 1 << 30
# preconditioning='auto' scales L-BFGS by the curvature bounds once the largest is more
# than this times the smallest: below it the scalar H0 of the newest pair covers it.
PRECONDITIONING_SPREAD = 2.0

DATA_KINDS = ("frame", "jvm", "python")
TRAINERS = ("sync", "localSGD", "async", "sharded")


@dataclass(frozen=True)
class DataPlan:
    """Where the one data pass runs, decided before it."""

    kind: str  # one of DATA_KINDS

    @property
    def jvm(self) -> bool:
        return self.kind == "jvm"


@dataclass(frozen=True)
class WorkerSettings:
    """What long-running workers are told beyond the trainer's config."""

    mini_batch_fraction: float
    seed: int
    host: str  # parameterServerHost: the address driver-side servers bind
    worker_timeout: float
    topology: str  # aggregationTopology
    quorum: float  # workerQuorum
    sparse_pull: bool
    batch_sizing: str
    parameter_servers: int


@dataclass(frozen=True)
class FitPlan:
    """How a fit runs, resolved once from Params and the size of the cached blocks."""

    data: DataPlan
    kernels: str  # "python" | "jvm": where a step's arithmetic runs
    strategy: str  # "jobPerStep" | "resident" | "async" | "sharded"
    trainer: str  # one of TRAINERS
    reason: str  # why this strategy (logged, and in the summary's log line)
    config: Union[SyncConfig, AsyncConfig]
    compression: Compression
    workers: WorkerSettings
    aggregation_depth: int
    # JVM job-per-step on sparse blocks: each partition's steps gather and return only
    # the features it holds (LocalFeatures.scala), not d-sized arrays.
    local_features: bool = False

    @property
    def faults(self) -> Optional[FaultPlan]:
        """Test-only fault injection (gradspark.testing.faults): the config carries it to the
        trainers, the plan to the engines."""
        return self.config.faults

    @property
    def resident(self) -> bool:
        return self.strategy == "resident"


def workers_mode(params: SGDParams) -> str:
    """``mode``, as far as choosing the engine goes: sharded servers need the same
    long-running workers as async mode."""
    return "async" if params.getParameterServers() else params.getMode()


def compression_of(params: SGDParams) -> Compression:
    return Compression(params.getCompression(), params.getCompressionRatio(),
                       params.getErrorFeedback())


def plan_data(params: SGDParams, dataset) -> DataPlan:
    """Check the Params and choose the data path (before the data pass)."""
    check_params(params)
    label = type(params).__name__
    if is_connect(dataset):
        if params.getEngine() == "jvm":
            raise ValueError("engine='jvm' calls the JVM kernels through py4j, which a Spark "
                             "Connect session does not have; use engine='auto' or 'python'")
        logger.info("%s: Spark Connect session: numpy kernels over a cached block frame "
                    "(the JVM kernels need py4j)", label)
        return DataPlan("frame")
    engine, strategy = params.getEngine(), params.getExecutionStrategy()
    if engine == "python" and strategy == "jobPerStep" and workers_mode(params) == "sync":
        return DataPlan("python")  # numpy job-per-step reads Python-cached blocks each step
    if engine == "jvm":
        load_kernels(dataset.sparkSession)  # asked for explicitly: its failure is the user's
        return DataPlan("jvm")
    return DataPlan("jvm" if jvm_kernels_available(dataset.sparkSession) else "python")


def averaging_start(params: SGDParams) -> Optional[int]:
    """``iterateAveraging`` resolved: the update after which iterates are averaged (the
    end of the first pass, or half of maxIter if that comes first), or None."""
    choice = params.getIterateAveraging()
    if choice == "none":
        return None
    fraction = params.getMiniBatchFraction()
    if choice == "auto" and not (
            params.getOptimizer() in ("sgd", "adagrad", "adam") and fraction < 1.0
            and averaging_supported(params) and not has_l1(params)
            and not params.getValidationIndicatorCol()):
        return None
    return min(math.ceil(1.0 / fraction), params.getMaxIter() // 2)


def trainer_config(params: SGDParams) -> Union[SyncConfig, AsyncConfig]:
    """The trainer's settings from the Params."""
    common = dict(
        optimizer=params.getOptimizer(),
        max_iter=params.getMaxIter(),
        tol=params.getTol(),
        step_size=params.getStepSize(),
        schedule=params.getLearningRateSchedule(),
        momentum=params.getMomentum(),
        nesterov=params.getNesterov(),
        lazy_updates=params.getLazyUpdates(),
        label=type(params).__name__,
    )
    if params.getMode() == "async" or params.getParameterServers():
        bound = params.getMaxStaleness() if params.getMode() == "async" else 0
        return AsyncConfig(max_staleness=bound,
                           worker_timeout=params.getWorkerTimeout(),
                           host=params.getParameterServerHost(),
                           compression=compression_of(params),
                           sparse_pull=params.getSparsePull(),
                           stale_policy=params.getStaleGradientPolicy(),
                           delay_compensation=params.getDelayCompensation(),
                           adaptive_compensation=params.getAdaptiveCompensation(),
                           **common)
    return SyncConfig(local_steps=params.getLocalSteps(), average_after=averaging_start(params),
                      updates_per_pass=math.ceil(1.0 / params.getMiniBatchFraction()),
                      **common)


def plan_fit(params: SGDParams, data_plan: DataPlan, sc, data) -> FitPlan:
    """The whole plan, once the data pass has cached ``data`` (``sc``: the session's
    SparkContext, or a Connect session's :class:`~gradspark.connect.ConnectContext`)."""
    config = trainer_config(params)
    trainer = ("sharded" if params.getParameterServers()
               else "async" if isinstance(config, AsyncConfig)
               else "localSGD" if config.local_steps > 1 else "sync")
    if trainer == "sharded":
        kernels, strategy, why = "python", "sharded", (
            f"parameterServers={params.getParameterServers()}: shards in the workers' tasks")
    else:
        workers = min(data.num_partitions, task_slots(sc))
        kernels, strategy, why = choose(params, data_plan, data.stored_bytes() / workers,
                                        resident_stage_running(sc),
                                        data.statistics.density < SPARSE_DENSITY)
    if params.getCompression() == "topk" and params.getOptimizer() in ("adam", "adagrad",
                                                                       "ftrl"):
        logger.warning("%s: compression='topk' with optimizer=%r: adaptive steps scale "
                       "each coordinate's rare, accumulated top-k values up, which "
                       "trains badly; use optimizer='sgd' (benchmarks/communication.py)",
                       type(params).__name__, params.getOptimizer())
    logger.info("%s: %s kernels, %s (%s; blockified in the %s)", type(params).__name__,
                kernels, strategy, why, "JVM" if data_plan.jvm else "Python workers")
    config.faults = fault_plan()  # the one seam where test-only fault injection enters
    workers = WorkerSettings(
        params.getMiniBatchFraction(), params.getSeed(), params.getParameterServerHost(),
        params.getWorkerTimeout(), params.getAggregationTopology(), params.getWorkerQuorum(),
        params.getSparsePull(), params.getBatchSizing(), params.getParameterServers())
    local = (kernels == "jvm" and strategy == "jobPerStep"
             and data.statistics.density < SPARSE_DENSITY)
    return FitPlan(data_plan, kernels, strategy, trainer, why, config,
                   compression_of(params), workers, params.getAggregationDepth(), local)


def choose(params: SGDParams, data_plan: DataPlan, bytes_per_worker: float,
           resident_busy: bool = False, sparse: bool = False):
    """``(kernels, strategy, reason)``: ``auto`` resolved by the size of the blocks.

    ``resident_busy``: another fit of the session holds resident workers (e.g.
    ``CrossValidator(parallelism=...)``); auto then runs jobs instead of waiting.
    ``sparse``: the blocks are sparse (their density is below ``SPARSE_DENSITY``).
    Params that only resident workers implement (compression, local SGD, a worker
    quorum) keep them resident whatever the size, waiting for the slots if
    another fit holds them.
    """
    if workers_mode(params) == "async":
        return "python", "async", "async mode: resident Python workers"
    engine, strategy = params.getEngine(), params.getExecutionStrategy()
    if params.getValidationIndicatorCol() and strategy == "auto":
        strategy = "jobPerStep"  # validation passes need the task slots between steps
    resident_needed = params.needsResidentWorkers()
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
        elif (params.getOptimizer() == "lbfgs" and data_plan.jvm and engine == "auto"
              and bytes_per_worker > (LBFGS_SPARSE_RESIDENT_BYTES_PER_WORKER if sparse
                                      else LBFGS_RESIDENT_BYTES_PER_WORKER)):
            strategy, why = "jobPerStep", (f"L-BFGS makes tens of passes: loading "
                                           f"{bytes_per_worker / 2**20:.0f} MiB of "
                                           f"{'sparse' if sparse else 'dense'} blocks per "
                                           "resident worker would cost more than it saves")
        else:
            strategy, why = "resident", (f"{bytes_per_worker / 2**20:.0f} MiB of blocks per "
                                         "worker fit in the resident workers")
    else:
        why = f"executionStrategy={strategy!r}"
    if strategy == "resident" or engine == "python" or not data_plan.jvm:
        return "python", strategy, why
    return "jvm", strategy, why


def lbfgs_preconditioner(params: SGDParams, objective) -> Optional[np.ndarray]:
    """``preconditioning`` resolved for ``objective`` (a
    :class:`~gradspark.trainer.objective.LinearObjective` with its L2/L1 terms and
    bounds): L-BFGS's diagonal initial inverse Hessian ``min(h) / h`` from the
    curvature bounds ``h`` (:meth:`LinearObjective.curvature_bound`; 0 where ``h`` is
    0, a parameter whose gradient is always 0), or None for MLlib's scalar one.

    With ``standardization=False`` MLlib's L2 strength of a standardized coefficient
    is ``regParam / sigma_j^2``: on sparse binary data ``regParam / p_j`` for a
    feature in a fraction ``p_j`` of the rows, from ``regParam`` for the common
    features to ``regParam * rows`` for the rarest. One scalar ``H0`` steps the
    coordinates of such a spread of curvatures badly; the diagonal one is L-BFGS on
    ``theta * sqrt(h)``, where every bound is the same (docs/wide_sparse.md: 3 to 5
    iterations instead of 20 to MLlib's 20-iteration objective on the benchmark's
    sets)."""
    choice = params.getPreconditioning()
    if choice == "none" or params.getOptimizer() != "lbfgs":
        return None
    why_not = None
    if not is_unbounded(objective.l1, objective.lower_bounds(), objective.upper_bounds()):
        why_not = "an L1 penalty or bounds, which scipy's L-BFGS-B solves"
    elif objective.loss.curvature is None or objective.loss.num_aux:
        why_not = f"a loss with a curvature bound, which {objective.loss.name!r} has not"
    if why_not is not None:
        if choice == "diagonal":
            raise ValueError(f"preconditioning='diagonal' needs {why_not}: set "
                             f"preconditioning='auto' or 'none'")
        return None
    bound = objective.curvature_bound()
    positive = bound[bound > 0]
    if positive.size == 0:
        return None
    low = float(positive.min())
    if choice == "auto" and float(positive.max()) <= PRECONDITIONING_SPREAD * low:
        return None
    return np.divide(low, bound, out=np.zeros_like(bound), where=bound > 0)


def parameter_space(params: SGDParams, stats: DataStatistics) -> str:
    """``parameterSpace``, with ``auto`` resolved (see the Param's doc and
    :mod:`gradspark.trainer.objective`)."""
    space = params.getParameterSpace()
    if space == "auto":
        first_order_on_sparse = (params.getOptimizer() != "lbfgs"
                                 and stats.density < SPARSE_DENSITY)
        space = "raw" if first_order_on_sparse else "standardized"
    return space
