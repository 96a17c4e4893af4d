"""One worker step, shared by every long-running worker (resident, async, sharded, local SGD).

A step on a worker is always the same five things, whatever loop drives it:

1. **sample**: the rows of the step (each input partition draws its
   Bernoulli(fraction) sample from ``(seed, step, partition)``, exactly as the
   job-per-step engines do), over the features they touch when the worker
   pulls sparse (:mod:`gradspark.engine.touched`);
2. **fault seam**: test-only fault injection before and after the compute
   (:mod:`gradspark.testing.faults`; ``None`` in every production fit);
3. **compute**: the gradient sums of those rows at the pulled weights;
4. **weight**: throughput batch sizing scales a worker's sums by its inverse
   inclusion probability relative to the configured fraction;
5. **encode**: the sums over the touched keys (exact, sparse) or as a whole
   vector, in the optimizer's space when lossy compression needs it.

The loops differ only in how they get weights and where the answer goes
(a round of the driver's server, an SSP push, pushes to shards, local steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from gradspark.comm.compression import Encoded
from gradspark.data.blocks import Block, merge_blocks
from gradspark.engine.python import grouped_sums
from gradspark.engine.sums import GradientSums, split_map
from gradspark.engine.touched import TouchedBatch, TouchedFeatures
from gradspark.losses import Loss


@dataclass(frozen=True)
class WorkerStep:
    """The step arithmetic of one worker; picklable (it travels in the stage's closure)."""

    loss: Loss
    num_features: int
    num_outputs: int
    fraction: float  # the configured miniBatchFraction
    seed: int  # already masked to 32 bits
    faults: object = None  # test-only fault injection (gradspark.testing.faults)
    # Lossy compression: answers in the optimizer's space (LinearObjective.sums_to_theta_space)
    objective: object = None

    @property
    def answer_size(self) -> int:
        return self.num_features * self.num_outputs + self.num_outputs + self.loss.num_aux

    def hold(self, groups: Dict[int, List[Block]]) -> Dict[int, List[Block]]:
        """How a long-running worker keeps its ``groups`` for the whole fit.

        A full-batch fit reads every row every step, so each input partition's
        blocks are merged into one, partition by partition, taking them out of
        ``groups`` as it goes (so at most one partition's rows are held twice):
        one product and one feature-sized sum per partition and step instead of
        per block (at 2^20 features, 4096-row blocks, 37 ms a step instead of
        89 ms on 100,000 rows). A mini-batch fit keeps the blocks: each draws
        its rows block by block.
        """
        if self.fraction < 1.0:
            return groups
        held: Dict[int, List[Block]] = {}
        for partition in list(groups):
            merged = merge_blocks(groups.pop(partition))
            held[partition] = [] if merged is None else [merged]
        return held

    def touched(self, groups) -> TouchedFeatures:
        """A worker's source of sparse-pull batches over its ``groups``."""
        return TouchedFeatures(groups, self.num_features, self.num_outputs, self.loss.num_aux)

    def sample(self, touched: Optional[TouchedFeatures], step: int,
               fraction: Optional[float] = None) -> Optional[TouchedBatch]:
        """The rows of ``step`` over the features they touch (None: a dense pull)."""
        if touched is None:
            return None
        return touched.batch(self.fraction if fraction is None else fraction, self.seed, step)

    def before(self, fault_ids: Iterable[int], step: int, attempt: int) -> None:
        """The fault seam before the compute (per partition, or per worker)."""
        if self.faults is not None:
            for unit in fault_ids:
                self.faults.before_batch(unit, step, attempt)

    def after(self, fault_ids: Iterable[int], step: int,
              sums: Optional[GradientSums]) -> None:
        """The fault seam after it: emulated per-row compute (benchmarks)."""
        if self.faults is not None and sums is not None:
            self.faults.after_batch(set(fault_ids), step, sums.count)

    def partial_sums(self, groups, coef, offset, aux, step: int,
                     fraction: float) -> Optional[GradientSums]:
        """The sums of the worker's sampled rows at a linear map (None: no rows)."""
        return grouped_sums(groups, self.loss, coef, offset, aux, fraction, self.seed, step)

    def sums(self, groups, values: np.ndarray, step: int,
             batch: Optional[TouchedBatch] = None, fraction: Optional[float] = None,
             weight: float = 1.0) -> Optional[GradientSums]:
        """The (weighted) sums of the step's rows: over ``batch``'s keys, whose values
        ``values`` holds (None when the batch has no rows), or at the whole linear map
        ``values`` (zeros when no row was sampled)."""
        if batch is not None:
            sums = batch.sums(self.loss, values, self.num_outputs)
        else:
            d, k = self.num_features, self.num_outputs
            coef, offset, aux = split_map(values, d, k)
            fraction = self.fraction if fraction is None else fraction
            sums = self.partial_sums(groups, coef, offset, aux, step, fraction) \
                or GradientSums.zeros(d, k, self.loss.num_aux)
        if sums is not None and weight != 1.0:
            sums = sums.scaled(weight)
        return sums

    def encode(self, sums: Optional[GradientSums],
               batch: Optional[TouchedBatch] = None) -> Union[Encoded, np.ndarray]:
        """The answer's vector: exact sums over ``batch``'s keys, or the whole vector; in the
        optimizer's space (a dense vector, for lossy compression) when ``objective`` is set."""
        if batch is not None:
            message = batch.encode(sums)
            return message if self.objective is None else \
                self.objective.sums_to_theta_space(message.decode())
        vector = sums.vector()
        return vector if self.objective is None else self.objective.sums_to_theta_space(vector)


def scalars_of(sums: Optional[GradientSums]) -> Tuple[float, float, int]:
    """``(loss sum, weight sum, rows)`` of a step's sums (zeros when it had no rows)."""
    return (0.0, 0.0, 0) if sums is None else (sums.loss_sum, sums.weight_sum, sums.count)
