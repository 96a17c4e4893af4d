"""Handing a barrier stage's tasks to ``torch.distributed``.

Driver side, :func:`require_task_slots` fails fast when the cluster cannot
run ``numWorkers`` tasks at once (a barrier stage that does not fit would
otherwise wait for slots that never come). Executor side,
:func:`process_group` turns the barrier tasks into one process group:

* rank = the task's partition id, world size = the number of barrier tasks;
* rank 0 starts a ``TCPStore`` on a port the OS picks, bound to its task's own
  address (torch's default listens on every interface), and the port reaches
  the other ranks through ``BarrierTaskContext.allGather`` (no guessed port,
  so no race for it);
* ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` are
  set too, for user code that reads them;
* NCCL on the GPU Spark assigned to the task, gloo on the CPU;
* ``destroy_process_group`` always runs, also on error, but the group object
  itself is kept alive until the next group in this Python worker (see
  :data:`_RETIRED_GROUPS`).
"""

from __future__ import annotations

import datetime
import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

def duplicate_devices(assignments: List[str]) -> Optional[str]:
    """The first ``host/gpu`` given to two ranks (their ranks in the message), or None."""
    first: Dict[str, int] = {}
    for rank, device in enumerate(assignments):
        if device in first:
            return f"ranks {first[device]} and {rank} were both given GPU {device}"
        first[device] = rank
    return None


#: Process groups of earlier tasks in this Python worker. Destroying a gloo group
#: joins its worker threads while the caller holds the GIL; a thread that is
#: still releasing its last collective's tensors needs the GIL for that, so the
#: two wait on each other forever. It happened when a failing rank's DDP model was
#: freed right after its last all-reduce: the rank never reported its error,
#: Spark never retried the stage and the other rank waited in a collective. Kept
#: here, a group is freed only when the next task in this worker starts a group
#: (its threads long idle by then), or never, when a failed task's worker exits.
_RETIRED_GROUPS: List[object] = []


@dataclass(frozen=True)
class ProcessGroup:
    rank: int
    world_size: int
    local_rank: int
    device: "object"  # torch.device
    backend: str


def _task_gpu(ctx) -> int:
    """CUDA ordinal of the GPU Spark assigned to this task."""
    gpus = ctx.resources().get("gpu")
    if gpus is None or not gpus.addresses:
        raise RuntimeError(
            "useGpu=True but Spark assigned this task no GPU: set "
            "spark.task.resource.gpu.amount and spark.executor.resource.gpu.amount")
    address = gpus.addresses[0].strip()
    # Spark reports physical GPU ids; under CUDA_VISIBLE_DEVICES torch counts
    # only the visible ones, renumbered from 0.
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    return visible.index(address) if address in visible else int(address)


@contextmanager
def process_group(use_gpu: bool, timeout_seconds: float = 1800.0) -> Iterator[ProcessGroup]:
    """Join this barrier task to the stage's ``torch.distributed`` process group."""
    import torch
    import torch.distributed as dist
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    hosts = [info.address.rsplit(":", 1)[0] for info in ctx.getTaskInfos()]
    world_size = len(hosts)
    local_rank = hosts[:rank].count(hosts[rank])
    if use_gpu:
        if not torch.cuda.is_available():
            raise RuntimeError("useGpu=True but torch on this executor has no CUDA device")
        device = torch.device("cuda", _task_gpu(ctx))
        # Two ranks on one GPU fail deep inside NCCL ("Duplicate GPU detected"), and
        # Spark would retry the stage: say which ranks, and why, here.
        clash = duplicate_devices(ctx.allGather(
            f"{hosts[rank]}/{ctx.resources()['gpu'].addresses[0].strip()}"))
        if clash:
            raise RuntimeError(f"useGpu=True: {clash}; each executor's GPU discovery "
                               "script must report distinct GPUs (on one machine, run one "
                               "worker that owns them all)")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    timeout = datetime.timedelta(seconds=timeout_seconds)
    store = None
    listener = None
    if rank == 0:
        # torch's store listens on every interface and takes unauthenticated keys: hand
        # it a socket bound to this task's own address instead (loopback in local mode).
        listener = socket.create_server((hosts[0], 0), backlog=max(64, world_size))
        store = dist.TCPStore(hosts[0], listener.getsockname()[1], world_size,
                              is_master=True, timeout=timeout, wait_for_workers=False,
                              master_listen_fd=listener.fileno())
    port = int(ctx.allGather(str(store.port) if store is not None else "")[0])
    if store is None:
        store = dist.TCPStore(hosts[0], port, world_size, is_master=False, timeout=timeout)
    os.environ.update(MASTER_ADDR=hosts[0], MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(local_rank))
    backend = "nccl" if use_gpu else "gloo"
    _RETIRED_GROUPS.clear()
    if listener is not None:  # the store serves on its fd: kept open as long as the group
        _RETIRED_GROUPS.append(listener)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timeout)
    _RETIRED_GROUPS.append(dist.group.WORLD)
    try:
        yield ProcessGroup(rank, world_size, local_rank, device, backend)
    finally:
        dist.destroy_process_group()
