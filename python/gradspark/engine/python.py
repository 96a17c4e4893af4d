"""Pure-Python (numpy) gradient engine over cached blocks.

One call = one Spark job: broadcast the current linear map ``(B, c, aux)``,
compute per-partition :class:`GradientSums` (one matrix product per block,
sparse blocks stay CSR), combine them with ``treeAggregate``.

A partition's sums leave its task encoded (:mod:`gradspark.comm.compression`):
exact, as index/value pairs when that is smaller (a sparse mini-batch), or
float16 with ``compression="fp16"``. A task keeps nothing from one step to
the next, so there is no error feedback here: fp16's rounding (about 3
digits of each partition's largest value) is simply lost, and top-k, which
stalls without feedback, needs resident workers instead.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
from pyspark import RDD

from gradspark.comm.compression import Compression
from gradspark.comm.traffic import JobTraffic
from gradspark.data.blocks import Block, sample_block
from gradspark.engine.sums import GradientSums, add_sums
from gradspark.losses import Loss


def partition_sums(
    blocks, loss: Loss, coef: np.ndarray, offset: np.ndarray, aux: np.ndarray,
    fraction: float, rng: Optional[np.random.Generator],
) -> Optional[GradientSums]:
    """Gradient sums of one partition's blocks (None if it has no rows)."""
    total: Optional[GradientSums] = None
    for block in blocks:
        if rng is not None:
            block = sample_block(block, fraction, rng)
        x = block.features
        if x.shape[0] == 0:
            continue
        margins = np.asarray(x @ coef) + offset
        value = loss.evaluate(margins, block.labels, block.weights, aux)
        sums = GradientSums(
            xtg=np.asarray(x.T @ value.d_margins),
            gsum=value.d_margins.sum(axis=0),
            d_aux=value.d_aux,
            loss_sum=value.loss_sum,
            weight_sum=float(block.weights.sum()),
            count=x.shape[0],
        )
        total = add_sums(total, sums)
    return total


def grouped_sums(
    groups: Dict[int, List[Block]], loss: Loss, coef: np.ndarray, offset: np.ndarray,
    aux: np.ndarray, fraction: float, seed: int, step: int,
) -> Optional[GradientSums]:
    """Sums over blocks grouped by input partition (a resident worker's memory).

    Each partition samples from ``(seed, step, partition)``, as it would in
    its own job-per-step task, so a mini-batch does not depend on which
    worker holds the partition.
    """
    total: Optional[GradientSums] = None
    for partition, blocks in groups.items():
        rng = np.random.default_rng([seed, step, partition]) if fraction < 1.0 else None
        total = add_sums(total, partition_sums(blocks, loss, coef, offset, aux, fraction, rng))
    return total


SCALARS_BYTES = 24  # loss sum, weight sum, row count


def partition_result(blocks, loss: Loss, state, fraction: float, seed: int, step: int,
                     partition: int, encode, faults=None):
    """What one partition's job-per-step task returns: its sums encoded as they leave the
    task, ``(Encoded, loss_sum, weight_sum, count)``, or None when it has no rows.

    ``state`` is the step's ``(coef, offset, aux)``; a mini-batch is sampled from
    ``(seed, step, partition)``.
    """
    if faults is not None:
        from pyspark import TaskContext

        faults.before_batch(partition, step, TaskContext.get().attemptNumber())
    coef, offset, aux = state
    rng = (np.random.default_rng([seed & 0xFFFFFFFF, step, partition]) if fraction < 1.0
           else None)
    sums = partition_sums(blocks, loss, coef, offset, aux, fraction, rng)
    if sums is None:
        return None
    return encode(sums.vector()), sums.loss_sum, sums.weight_sum, sums.count


def result_size(result) -> int:
    """Bytes a :func:`partition_result` moves (its message and three scalars)."""
    return result[0].nbytes + SCALARS_BYTES


def decoded(sums, num_features: int, num_outputs: int) -> Optional[GradientSums]:
    """A partition's result -- ``(Encoded, loss_sum, weight_sum, count)`` as its task
    returns it, or sums already decoded and added -- as :class:`GradientSums`."""
    if sums is None or isinstance(sums, GradientSums):
        return sums
    message, loss_sum, weight_sum, count = sums
    return GradientSums.from_vector(message.decode(), num_features, num_outputs, loss_sum,
                                    weight_sum, count)


class PythonGradientEngine:
    """Distributed gradient sums with numpy kernels on the executors.

    ``compression``: ``none`` or ``fp16`` for the partitions' sums (see the
    module docs). ``metrics`` counts the arrays each step moves
    (:class:`~gradspark.comm.traffic.JobTraffic`).
    """

    def __init__(self, blocks: RDD, loss: Loss, aggregation_depth: int = 2,
                 compression: Compression = Compression(), faults=None) -> None:
        if compression.name == "topk":
            raise ValueError("compression='topk' needs resident workers (its error feedback "
                             "lives in a worker from one step to the next)")
        self.blocks = blocks
        self.loss = loss
        self.aggregation_depth = aggregation_depth
        self.compression = Compression(compression.name, error_feedback=False)
        self.traffic = JobTraffic()
        self.faults = faults  # test-only fault injection (gradspark.testing.faults)

    @property
    def metrics(self) -> Dict[str, object]:
        return {"compression": self.compression.name, **self.traffic.totals}

    def gradient_sums(
        self,
        coef: np.ndarray,
        offset: np.ndarray,
        aux: np.ndarray,
        fraction: float = 1.0,
        seed: int = 0,
        step: int = 0,
    ) -> Optional[GradientSums]:
        """Sums over all rows, or over a Bernoulli(fraction) sample seeded by (seed, step)."""
        sc = self.blocks.context
        state = sc.broadcast((coef, offset, aux))
        loss = self.loss
        faults = self.faults
        encode = self.compression.new()
        d, k = np.asarray(coef).shape[0], np.asarray(offset).shape[0]
        result_bytes = sc.accumulator(0)
        results = sc.accumulator(0)

        def compute(partition, iterator):
            result = partition_result(iterator, loss, state.value, fraction, seed, step,
                                      partition, encode, faults)
            if result is not None:
                result_bytes.add(result_size(result))
                results.add(1)
            yield result

        def merge(a, b):
            return add_sums(decoded(a, d, k), decoded(b, d, k))

        def keep_encoded(partial, sums):
            # Runs in the task, on its one result: what leaves the task stays encoded.
            return sums if partial is None else merge(partial, sums)

        try:
            total = self.blocks.mapPartitionsWithIndex(compute).treeAggregate(
                None, keep_encoded, merge, depth=self.aggregation_depth
            )
            weights_bytes = sum(np.asarray(a).nbytes for a in (coef, offset, aux))
            self.traffic.step(weights_bytes, result_bytes.value, results.value)
            return decoded(total, d, k)
        finally:
            state.destroy(blocking=False)
