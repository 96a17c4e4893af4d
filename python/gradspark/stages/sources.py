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
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from pyspark import RDD

from gradspark.rpc.client import ParameterClient
from gradspark.stages.slots import task_slots

if TYPE_CHECKING:  # blocks are data's; a stage only carries them
    from gradspark.data.blocks import Block

logger = logging.getLogger(__name__)


class RddBlocks:
    """Blocks from a Python RDD of :class:`Block` (the Python blockify path)."""

    def __init__(self, blocks: RDD) -> None:
        self.blocks = blocks
        self.context = blocks.context

    def run(self, task, purpose: str, barrier: bool = False) -> List[tuple]:
        """Run ``task(worker, tagged)`` once per worker (see :func:`worker_partitions`)."""
        workers = worker_partitions(self.blocks, purpose, barrier)
        if barrier:
            # A barrier *map* stage (it feeds a shuffle) is retried as a whole by Spark;
            # a failed barrier result stage would not be.
            return workers.barrier().mapPartitionsWithIndex(task).coalesce(1, True).collect()
        return workers.mapPartitionsWithIndex(task).collect()

    def num_workers(self) -> int:
        return min(self.blocks.getNumPartitions(), task_slots(self.context))


class FrameBlocks:
    """Blocks encoded in a DataFrame of ``(partition int, block binary)`` rows.

    The JVM blockify path: workers read the blocks as Arrow batches
    (``mapInArrow``), several times faster than pickled rows, and decode them
    with ``decode``.
    """

    REPORT = "worker long, attempt long, answered long"

    def __init__(self, frame, decode: Callable[[bytes], "Block"], context=None,
                 partitions: Optional[int] = None) -> None:
        self.frame = frame
        self.decode = decode
        # A Connect session has no SparkContext and no frame.rdd: its callers pass the
        # context (gradspark.connect.context_of) and the partition count they know.
        self.context = context if context is not None else frame.sparkSession.sparkContext
        self.partitions = partitions

    def _partitions(self) -> int:
        if self.partitions is None:
            self.partitions = self.frame.rdd.getNumPartitions()
        return self.partitions

    def num_workers(self) -> int:
        return min(self._partitions(), task_slots(self.context))

    def run(self, task, purpose: str, barrier: bool = False) -> List[tuple]:
        frame, slots = self.frame, task_slots(self.context)
        if self._partitions() > slots:
            logger.info("%s: %d partitions run as %d workers, one per task slot", purpose,
                        self._partitions(), slots)
            # A barrier stage may not narrow partitions: shuffle whole input partitions.
            frame = frame.repartition(slots, "partition") if barrier else frame.coalesce(slots)
        decode = self.decode

        def over_batches(batches):
            import pyarrow as pa
            from pyspark import TaskContext

            worker = TaskContext.get().partitionId()
            tagged = ((partition, decode(block.as_py()))
                      for batch in batches
                      for partition, block in zip(batch.column(0).to_pylist(), batch.column(1)))
            for report in task(worker, tagged):
                yield pa.RecordBatch.from_pylist(
                    [dict(zip(("worker", "attempt", "answered"), report))])

        stage = frame.mapInArrow(over_batches, self.REPORT, barrier=barrier)
        if barrier:
            stage = stage.repartition(1)  # a map stage, retried as a whole (see RddBlocks)
        return [tuple(row) for row in stage.collect()]


class TaggedByteBlocks:
    """Blocks from a JVM RDD of byte arrays: each is its input partition (one int64)
    followed by the block's encoding, already in one partition per worker
    (``JvmBlocks.taggedBinaryRdd``).

    Plain stages read them through pyspark's ``NoOpSerializer``: no SQL plan and no
    Arrow, and each block reaches its worker as soon as the JVM has encoded it,
    where :class:`FrameBlocks` waits for an Arrow batch of a whole partition's
    blocks. A barrier stage may not narrow partitions, so it reads
    ``barrier_source()`` (a :class:`FrameBlocks` of the same blocks, planned only
    then) instead.
    """

    def __init__(self, tagged_bytes: Callable[[int], object], decode: Callable[..., "Block"],
                 context, partitions: int, barrier_source: Callable[[], FrameBlocks]) -> None:
        self.tagged_bytes = tagged_bytes  # workers -> the JavaRDD of tagged encodings
        self.decode = decode  # decode(data, start) -> Block
        self.context = context
        self.partitions = partitions
        self.barrier_source = barrier_source

    def num_workers(self) -> int:
        return min(self.partitions, task_slots(self.context))

    def run(self, task, purpose: str, barrier: bool = False) -> List[tuple]:
        if barrier:
            return self.barrier_source().run(task, purpose, barrier=True)
        from pyspark.serializers import NoOpSerializer

        workers = self.num_workers()
        if self.partitions > workers:
            logger.info("%s: %d partitions run as %d workers, one per task slot", purpose,
                        self.partitions, workers)
        decode = self.decode

        def over_blocks(worker, items):
            tagged = ((int.from_bytes(item[:8], "little"), decode(item, 8)) for item in items)
            return task(worker, tagged)

        encoded = RDD(self.tagged_bytes(workers), self.context, NoOpSerializer())
        return [tuple(report) for report in encoded.mapPartitionsWithIndex(over_blocks).collect()]


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
    slots = task_slots(sc)
    if blocks.getNumPartitions() > slots:
        logger.info("%s: %d partitions run as %d workers, one per task slot", purpose,
                    blocks.getNumPartitions(), slots)
        if barrier:
            return tagged.partitionBy(slots, lambda partition: partition)
        return tagged.coalesce(slots)
    return tagged


def by_partition(tagged: Iterable[Tuple[int, "Block"]]) -> Dict[int, List["Block"]]:
    """A worker's blocks grouped by input partition (in partition order), kept in memory."""
    groups: Dict[int, List["Block"]] = {}
    for partition, block in tagged:
        groups.setdefault(partition, []).append(block)
    return dict(sorted(groups.items()))


def resident_task(address, secret: bytes,
                  loop: Callable[[ParameterClient, Dict[int, List["Block"]], int], int]):
    """A ``mapPartitionsWithIndex`` function: load the blocks once, connect, run ``loop``.

    ``loop(client, blocks_by_partition, attempt)`` returns the number of pushes;
    the task yields ``(worker, attempt, pushes)``.
    """

    def run(worker: int, tagged: Iterator[Tuple[int, "Block"]]):
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        blocks = by_partition(tagged)  # resident for the whole fit
        with ParameterClient(address, secret, worker, attempt) as client:
            pushes = loop(client, blocks, attempt)
        yield worker, attempt, pushes

    return run
