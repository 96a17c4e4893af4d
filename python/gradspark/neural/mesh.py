"""How TorchEstimator's ranks are arranged: ``meshShape``, a 2-D grid of ranks.

Every strategy sees the barrier tasks as a grid of ``replicas x parallel`` ranks:

============  ==========================  ==================================
strategy      rows (``replicas``)          columns (``parallel``)
============  ==========================  ==================================
``ddp``       every rank (``[W, 1]``)      one rank
``fsdp``      replicas (HSDP when > 1)     ranks one copy is sharded over
``tensor``    data-parallel replicas       ranks one layer's matrices split over
``pipeline``  data-parallel replicas       pipeline stages
============  ==========================  ==================================

``meshShape`` is ``[replicas, parallel]``; left empty it is ``[1, W]`` (one copy
split over all ranks) for the model-parallel strategies and fsdp, ``[W, 1]`` for ddp.

Ranks are placed host by host: the grid is filled in order of ``(host, rank)``,
so a column group (the model-parallel dimension, whose collectives run every
layer) stays inside one host whenever each host runs a multiple of
``parallel`` ranks; the replicas' all-reduce, once per step, crosses hosts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import List, Sequence, Tuple

logger = logging.getLogger(__name__)

#: The model-parallel strategies: the ranks of one grid row train on the same rows.
MODEL_PARALLEL = ("tensor", "pipeline")

#: Short on purpose: with dimension names of 36+ characters, FSDP on a 2-D mesh (HSDP)
#: grew every rank's memory by ~80 MB a step under gloo in torch 2.13 (a 17 M-parameter
#: MLP: 0.8 GB to 3.4 GB in 20 steps; with 8 hex digits of suffix it stays at 1.1 GB).
#: The cause is inside torch; it did not happen with names of 34 characters or fewer.
SUFFIX_DIGITS = 8
DIMENSION_NAMES = {"ddp": ("dp", "none"), "fsdp": ("rep", "shard"), "tensor": ("dp", "tp"),
                   "pipeline": ("dp", "pp")}


def mesh_shape(strategy: str, requested: Sequence[int], world: int) -> Tuple[int, int]:
    """``(replicas, parallel)`` for ``meshShape=requested`` on ``world`` ranks; ValueError
    naming the Param when the shape does not fit."""
    if not requested:
        return (world, 1) if strategy == "ddp" else (1, world)
    shape = tuple(int(n) for n in requested)
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"meshShape must be two positive sizes [replicas, parallel], "
                         f"got {list(requested)}")
    if shape[0] * shape[1] != world:
        raise ValueError(f"meshShape {list(shape)} holds {shape[0] * shape[1]} ranks but "
                         f"numWorkers={world}")
    if strategy == "ddp" and shape[1] != 1:
        raise ValueError(f"strategy='ddp' replicates the whole model on every rank: its "
                         f"meshShape is [numWorkers, 1], got {list(shape)}; use 'fsdp', "
                         f"'tensor' or 'pipeline' to split the model")
    return shape  # type: ignore[return-value]


def place_ranks(hosts: Sequence[str], shape: Tuple[int, int]) -> List[List[int]]:
    """The grid of ranks: ``grid[replica][position]``, filled host by host so that a
    row (the model-parallel group) stays on one host where the hosts allow it."""
    first_seen = {}
    for host in hosts:
        first_seen.setdefault(host, len(first_seen))
    ordered = sorted(range(len(hosts)), key=lambda rank: (first_seen[hosts[rank]], rank))
    replicas, parallel = shape
    grid = [ordered[row * parallel:(row + 1) * parallel] for row in range(replicas)]
    split = [row for row in grid if len({hosts[rank] for rank in row}) > 1]
    if split and parallel > 1:
        logger.warning("meshShape %s: %d of %d model-parallel groups span hosts (each host "
                       "runs a number of ranks that is not a multiple of %d); their "
                       "per-layer collectives cross the network", list(shape), len(split),
                       replicas, parallel)
    return grid


def dimension_names(strategy: str, suffix: str) -> Tuple[str, str]:
    """The mesh's two dimension names for ``strategy``, made unique by ``suffix``."""
    return tuple(f"{name}-{suffix}" for name in DIMENSION_NAMES[strategy])  # type: ignore


@dataclass(frozen=True)
class RankGrid:
    """Where one rank sits: the grid, its row (replica) and column (position)."""

    strategy: str
    grid: List[List[int]]
    rank: int

    @property
    def replicas(self) -> int:
        return len(self.grid)

    @property
    def parallel(self) -> int:
        return len(self.grid[0])

    @property
    def row(self) -> int:
        return next(i for i, ranks in enumerate(self.grid) if self.rank in ranks)

    @property
    def column(self) -> int:
        return self.grid[self.row].index(self.rank)

    @property
    def batch_group(self) -> List[int]:
        """The ranks that train on one batch together (their partitions' rows): the row
        under tensor and pipeline parallelism, this rank alone otherwise."""
        return self.grid[self.row] if self.strategy in MODEL_PARALLEL else [self.rank]

    @property
    def batch_groups(self) -> int:
        """How many batches one optimizer step's global batch is split into (the
        gradient-averaging factor)."""
        return sum(len(row) for row in self.grid) // len(self.batch_group)

    @property
    def reporter(self) -> int:
        """The rank that reports progress: the one counting the first batch group's loss
        (a pipeline's last stage)."""
        return self.grid[0][-1] if self.strategy == "pipeline" else self.grid[0][0]

    def device_mesh(self, device_type: str):
        """A ``torch.distributed`` DeviceMesh over the grid (every rank must call it)."""
        import torch
        from torch.distributed.device_mesh import DeviceMesh

        names = dimension_names(self.strategy, _fresh_mesh_suffix())
        return DeviceMesh(device_type, torch.tensor(self.grid), mesh_dim_names=names)


def _fresh_mesh_suffix() -> str:
    """A mesh name no earlier process group in this process used.

    Spark reuses Python workers, so one process can be rank 1 in one fit and rank 0
    in the next. torch's DTensor caches (sharding propagation, redistribution) key on
    the DeviceMesh, whose equality ignores which rank holds it: an equal mesh from an
    earlier fit comes back with that fit's coordinate, and the parameters' shard
    offsets (what torch.distributed.checkpoint writes and reads) name the other
    rank's half. A name of its own per process group keeps those caches apart.
    """
    import uuid

    import torch.distributed as dist

    name = [uuid.uuid4().hex[:SUFFIX_DIGITS]]  # short: see DIMENSION_NAMES
    dist.broadcast_object_list(name, src=0)
    return name[0]
