"""Pure-Python (numpy) gradient engine over cached blocks.

One call = one Spark job: broadcast the current linear map ``(B, c, aux)``,
compute per-partition :class:`GradientSums` (one matrix product per block,
sparse blocks stay CSR), combine them with ``treeAggregate``.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
from pyspark import RDD

from gradspark.data.blocks import Block, sample_block
from gradspark.engine.sums import GradientSums, add_sums
from gradspark.faults import fault_plan
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


class PythonGradientEngine:
    """Distributed gradient sums with numpy kernels on the executors."""

    def __init__(self, blocks: RDD, loss: Loss, aggregation_depth: int = 2) -> None:
        self.blocks = blocks
        self.loss = loss
        self.aggregation_depth = aggregation_depth

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
        sampled = fraction < 1.0
        faults = fault_plan()

        def compute(partition, iterator):
            if faults is not None:
                from pyspark import TaskContext

                faults.before_batch(partition, step, TaskContext.get().attemptNumber())
            b, c, a = state.value
            rng = np.random.default_rng([seed & 0xFFFFFFFF, step, partition]) if sampled else None
            yield partition_sums(iterator, loss, b, c, a, fraction, rng)

        try:
            return self.blocks.mapPartitionsWithIndex(compute).treeAggregate(
                None, add_sums, add_sums, depth=self.aggregation_depth
            )
        finally:
            state.destroy(blocking=False)
