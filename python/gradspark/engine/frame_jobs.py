"""Job-per-step numpy engine over a block frame: the one a Spark Connect session runs.

Each call is one ``mapInArrow`` job over the cached ``(partition, block)``
frame (:mod:`gradspark.data.frames`): the step's ``(B, c, aux)`` travel in
the stage's closure (Connect has no broadcasts), each partition's task
decodes its blocks and returns its sums encoded exactly as the RDD engine's
tasks do, and this process adds them in partition order. There is no
``treeAggregate`` on a DataFrame, so ``aggregationDepth`` does not apply: every
partition's result comes here, which costs ``partitions x model size`` per
step for full-batch gradients (mini-batch sums on sparse data are sent as
index/value pairs).
"""

from __future__ import annotations

import pickle
from typing import Optional

import numpy as np
import pyarrow as pa

from gradspark.engine.python import PythonGradientEngine, decoded, partition_result, result_size
from gradspark.engine.sums import GradientSums, add_sums

RESULT_SCHEMA = "partition int, result binary, bytes long"
_ARROW_SCHEMA = pa.schema([("partition", pa.int32()), ("result", pa.binary()),
                          ("bytes", pa.int64())])


class FrameGradientEngine(PythonGradientEngine):
    """:class:`~gradspark.engine.python.PythonGradientEngine`'s arithmetic, one
    ``mapInArrow`` job per step over a :class:`~gradspark.stages.sources.FrameBlocks` source."""

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
        state = (np.asarray(coef), np.asarray(offset), np.asarray(aux))
        loss, decode = self.loss, self.blocks.decode
        faults = self.faults
        encode = self.compression.new()
        d, k = state[0].shape[0], state[1].shape[0]

        def compute(batches):
            from pyspark import TaskContext

            partition = TaskContext.get().partitionId()
            blocks = (decode(data) for batch in batches for data in batch.column(1).to_pylist())
            result = partition_result(blocks, loss, state, fraction, seed, step, partition,
                                      encode, faults)
            size = 0 if result is None else result_size(result)
            yield pa.RecordBatch.from_pylist(
                [{"partition": partition, "result": pickle.dumps(result), "bytes": size}],
                _ARROW_SCHEMA)

        rows = self.blocks.frame.mapInArrow(compute, RESULT_SCHEMA).collect()
        total: Optional[GradientSums] = None
        result_bytes = results = 0
        for row in sorted(rows, key=lambda row: row[0]):
            result = pickle.loads(row[1])
            if result is not None:
                total = add_sums(total, decoded(result, d, k))
                result_bytes += row[2]
                results += 1
        weights_bytes = sum(a.nbytes for a in state)
        self.traffic.step(weights_bytes, result_bytes, results)
        return total
