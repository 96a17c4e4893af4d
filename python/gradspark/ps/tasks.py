"""Long-running Spark tasks that talk to a server in the driver (async and resident workers).

Both strategies that keep blocks resident in executor memory need every
worker running at once: the server waits for all of them each step (sync)
or within the staleness bound (async), so a worker left without a task slot
would hold the others back. Their blocks are therefore coalesced to the
number of task slots, and each worker remembers which input partition a
block came from, so per-partition randomness (mini-batch samples) does not
depend on how partitions were grouped into workers.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Iterable, Iterator, List, Tuple

from pyspark import RDD

from gradspark.data.blocks import Block
from gradspark.ps.client import ParameterClient

logger = logging.getLogger(__name__)


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


def worker_partitions(blocks: RDD, purpose: str, barrier: bool = False) -> RDD:
    """``(partition, block)`` pairs in at most one partition per task slot.

    A barrier stage may not narrow partitions (no ``coalesce``), so for one
    the blocks are shuffled to worker ``partition % slots`` instead (once per
    fit; each input partition stays whole and in order).
    """
    sc = blocks.context
    tagged = blocks.mapPartitionsWithIndex(
        lambda partition, iterator: ((partition, block) for block in iterator)
    )
    slots = max(int(sc.defaultParallelism), 1)
    if blocks.getNumPartitions() > slots:
        logger.info("%s: %d partitions run as %d workers, one per task slot", purpose,
                    blocks.getNumPartitions(), slots)
        if barrier:
            return tagged.partitionBy(slots, lambda partition: partition)
        return tagged.coalesce(slots)
    return tagged


def by_partition(tagged: Iterable[Tuple[int, Block]]) -> Dict[int, List[Block]]:
    """A worker's blocks grouped by input partition (in partition order), kept in memory."""
    groups: Dict[int, List[Block]] = {}
    for partition, block in tagged:
        groups.setdefault(partition, []).append(block)
    return dict(sorted(groups.items()))


def resident_task(address, secret: bytes,
                  loop: Callable[[ParameterClient, Dict[int, List[Block]], int], int]):
    """A ``mapPartitionsWithIndex`` function: load the blocks once, connect, run ``loop``.

    ``loop(client, blocks_by_partition, attempt)`` returns the number of pushes;
    the task yields ``(worker, attempt, pushes)``.
    """

    def run(worker: int, tagged: Iterator[Tuple[int, Block]]):
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        blocks = by_partition(tagged)  # resident for the whole fit
        with ParameterClient(address, secret, worker, attempt) as client:
            pushes = loop(client, blocks, attempt)
        yield worker, attempt, pushes

    return run
