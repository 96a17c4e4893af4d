"""Task slots: how many tasks a stage of long-running or barrier tasks can run at once.

Long-running workers (resident, async, sharded) and barrier stages (DDP) need
every task running at the same time: a task left without a slot would hold
the others back until a timeout. :func:`require_task_slots` fails fast when
the cluster cannot run them all (waiting a little for executors that are
still registering), and one lock per SparkContext keeps two such stages of
one session from each taking part of the slots (:func:`resident_stage_lock`).
"""

from __future__ import annotations

import threading
import time
from typing import Dict


# One stage of long-running workers (resident or async) per SparkContext at a time:
# two that each got some of the task slots would wait for each other's slots forever
# (until workerTimeout).
_stage_locks: Dict[int, threading.Lock] = {}
_stage_locks_guard = threading.Lock()


def resident_stage_lock(sc) -> threading.Lock:
    with _stage_locks_guard:
        return _stage_locks.setdefault(id(sc), threading.Lock())


def resident_stage_running(sc) -> bool:
    """Whether another fit of this SparkContext holds resident workers now."""
    return resident_stage_lock(sc).locked()


def task_slots(sc) -> int:
    return max(int(sc.defaultParallelism), 1)


#: Executors of a fresh cluster register over the first seconds; wait this long
#: for enough of them before saying the cluster is too small.
SLOT_WAIT_SECONDS = 60.0


def max_concurrent_tasks(sc, profile=None) -> int:
    """Task slots of ``profile`` (default: the default resource profile; counts cores and
    GPUs; a Spark Connect session says only how many cores)."""
    from gradspark.connect import ConnectContext

    if isinstance(sc, ConnectContext):
        return sc.defaultParallelism
    jsc = sc._jsc.sc()
    manager = jsc.resourceProfileManager()
    if profile is None:
        return int(jsc.maxNumConcurrentTasks(manager.resourceProfileFromId(0)))
    manager.addResourceProfile(profile._java_resource_profile)  # as a stage using it would
    return int(jsc.maxNumConcurrentTasks(profile._java_resource_profile))


def check_gpu_conf(conf, master: str = "") -> bool:
    """useGpu needs Spark to give each training task a whole GPU of its own (NCCL: one rank
    per GPU). True: every task already gets one (``spark.task.resource.gpu.amount``);
    False: only executors own GPUs, and the training stage must ask for them with
    :func:`gpu_stage_profile`."""
    amount = conf.get("spark.task.resource.gpu.amount", None)
    if not amount:
        if conf.get("spark.executor.resource.gpu.amount", None):
            if master.startswith("local[") or master == "local":
                raise ValueError(
                    "useGpu=True with only spark.executor.resource.gpu.amount set needs "
                    "stage-level scheduling, which local masters lack: set "
                    "spark.task.resource.gpu.amount=1, or run on a cluster manager")
            return False
        raise ValueError(
            "useGpu=True but Spark schedules no GPUs: set spark.executor.resource.gpu.amount "
            "and a GPU discovery script (spark.executor.resource.gpu.discoveryScript), and "
            "either spark.task.resource.gpu.amount=1 (every task holds a GPU) or nothing "
            "more (only the training stage asks for GPUs, by stage-level scheduling)")
    if float(amount) < 1:
        raise ValueError(
            f"useGpu=True needs spark.task.resource.gpu.amount >= 1, got {amount}: NCCL runs "
            "one rank per GPU, and a fraction would put several ranks on one GPU")
    return True


def gpu_stage_profile(conf):
    """The training stage's ResourceProfile when only executors own GPUs: one GPU and
    ``spark.task.cpus`` cores per task (a TaskResourceProfile: standalone, YARN and
    Kubernetes since Spark 3.4, with the executors as they are). The stages before it
    (ETL, the repartition) keep the default profile and run on CPU slots without holding
    a GPU, as xgboost.spark schedules its training."""
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    requests = TaskResourceRequests().cpus(int(conf.get("spark.task.cpus", "1") or 1))
    return ResourceProfileBuilder().require(requests.resource("gpu", 1.0)).build


def require_task_slots(sc, num_workers: int, use_gpu: bool,
                       wait_seconds: float = SLOT_WAIT_SECONDS):
    """Raise a clear error if ``num_workers`` barrier tasks cannot all run at once.

    Returns the ResourceProfile the stage must run with (None: the default one)."""
    conf = sc.getConf()
    profile = None
    if use_gpu and not check_gpu_conf(conf, sc.master):
        profile = gpu_stage_profile(conf)
    if sc.master.startswith("local[") or sc.master == "local":
        wait_seconds = 0.0  # one JVM: its slots are all there from the start
    deadline = time.monotonic() + wait_seconds
    slots = max_concurrent_tasks(sc, profile)
    while slots < num_workers and time.monotonic() < deadline:
        time.sleep(0.5)
        slots = max_concurrent_tasks(sc, profile)
    if slots < num_workers:
        resource = ("tasks of one GPU each (stage-level)" if profile is not None else
                    f"tasks with spark.task.resource.gpu.amount="
                    f"{conf.get('spark.task.resource.gpu.amount')} GPU(s) each"
                    if use_gpu else "tasks")
        raise ValueError(
            f"numWorkers={num_workers} needs {num_workers} concurrent barrier tasks, but the "
            f"cluster can run only {slots} {resource} at once; lower numWorkers or add "
            f"executors")
    return profile


