"""A worker's rows of one step over only the features they touch (sparse pull and push).

On wide sparse data a mini-batch touches a small fraction of the features,
yet a dense exchange moves every weight to every worker and every gradient
back. A long-running worker (resident or async) instead takes its step's
rows first, collects the features they touch, and pulls only those
weights; its gradient sums come back over the same keys. Nothing is
approximated: the rows are sampled from ``(seed, step, partition)`` exactly
as :func:`gradspark.engine.python.grouped_sums` samples them, the touched
blocks' columns are renumbered in order (so every product adds the same
terms in the same order), and an untouched feature's gradient sum is an
exact zero either way. The sums are bit-identical to the dense exchange's.

The renumbering costs ``O(non-zeros)`` per step, and the whole-data set of
a full-batch step is computed once per fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import scipy.sparse as sp

from gradspark.comm.compression import INDEX, Encoded
from gradspark.data.blocks import Block, sample_block
from gradspark.engine.python import grouped_sums
from gradspark.engine.sums import GradientSums

# A keyed pull sends 4 bytes per key and gets 8 back; a dense one gets 8 per weight.
_KEYED_BYTES, _DENSE_BYTES = 12, 8


@dataclass
class TouchedBatch:
    """One step's rows, their columns renumbered to positions in ``features``."""

    step: int
    sampled: bool
    features: np.ndarray  # sorted raw feature indices the rows touch
    groups: Dict[int, List[Block]]  # the sampled blocks by input partition, renumbered
    keys: np.ndarray  # uint32 positions in the map vector: features x outputs, then the tail
    vector_size: int

    def sums(self, loss, values: np.ndarray, num_outputs: int) -> Optional[GradientSums]:
        """Gradient sums over the touched features from the pulled ``values`` (at ``keys``)."""
        k, touched = num_outputs, self.features.size
        coef = values[: touched * k].reshape(touched, k)
        offset, aux = values[touched * k: touched * k + k], values[touched * k + k:]
        return grouped_sums(self.groups, loss, coef, offset, aux, 1.0, 0, self.step)

    def encode(self, sums: Optional[GradientSums]) -> Encoded:
        """The sums as a sparse wire message over ``keys`` (zeros when there were no rows)."""
        if sums is None:
            return Encoded(self.vector_size, np.zeros(self.keys.size), self.keys)
        return Encoded(self.vector_size, sums.vector(), self.keys)


class TouchedFeatures:
    """Builds a worker's :class:`TouchedBatch` per step; None when a dense pull is cheaper.

    ``groups``: the worker's resident blocks by input partition. Dense
    blocks touch every feature, so a worker holding any pulls densely.
    """

    def __init__(self, groups: Dict[int, List[Block]], num_features: int, num_outputs: int,
                 num_aux: int) -> None:
        self.groups = groups
        self.num_features, self.num_outputs = num_features, num_outputs
        self.tail = num_outputs + num_aux  # offsets and the loss's aux parameters
        self.vector_size = num_features * num_outputs + self.tail
        self.enabled = all(sp.issparse(block.features)
                           for blocks in groups.values() for block in blocks)
        self._full: Optional[TouchedBatch] = None
        self._full_is_dense = False  # every row together touches too much to pull sparsely

    def batch(self, fraction: float, seed: int, step: int) -> Optional[TouchedBatch]:
        """The rows of ``step``: all of them when ``fraction >= 1``, else the sample of
        ``(seed, step, partition)``."""
        if not self.enabled:
            return None
        sampled = fraction < 1.0
        if not sampled and self._full is not None:
            return self._full  # every row, whatever the step
        if not sampled and self._full_is_dense:
            return None
        chosen: Dict[int, List[Block]] = {}
        for partition, blocks in self.groups.items():
            rng = np.random.default_rng([seed, step, partition]) if sampled else None
            chosen[partition] = [sample_block(block, fraction, rng) if sampled else block
                                 for block in blocks]
        columns = [block.features.indices for blocks in chosen.values() for block in blocks]
        features = _distinct(columns, self.num_features)
        k = self.num_outputs
        keys = np.concatenate([
            (features[:, None] * k + np.arange(k)).ravel(),
            self.num_features * k + np.arange(self.tail),
        ]).astype(INDEX)
        if _KEYED_BYTES * keys.size >= _DENSE_BYTES * self.vector_size:
            # Every row together touches too much: full batches pull densely from now on.
            # A mini-batch still pulls sparsely (SVRG mixes full-batch snapshots with
            # mini-batches; when this disabled sparse pulls for good, each of its batch
            # rounds took 9x as long).
            self._full_is_dense = self._full_is_dense or not sampled
            return None
        renumbered = {partition: [_renumber(block, features) for block in blocks]
                      for partition, blocks in chosen.items()}
        batch = TouchedBatch(step, sampled, features, renumbered, keys, self.vector_size)
        if not sampled:
            self._full = batch
        return batch


def _distinct(columns: List[np.ndarray], num_features: int) -> np.ndarray:
    """The sorted distinct column indices: by sorting when there are few of them, by
    marking a feature-sized mask when they are many (a full batch: 3 M indices at
    2^20 features took 1.2 s to sort before a worker's first answer, 15 ms to mark)."""
    entries = sum(c.size for c in columns)
    if entries == 0:
        return np.zeros(0, np.int64)
    if entries < num_features // 8:
        return np.unique(np.concatenate(columns)).astype(np.int64, copy=False)
    seen = np.zeros(num_features, dtype=bool)
    for c in columns:
        seen[c] = True
    return np.flatnonzero(seen)


def _renumber(block: Block, features: np.ndarray) -> Block:
    """The block with column ``features[i]`` as column ``i``, its entries kept in order.

    Unlike :func:`gradspark.data.blocks.compact_block` (column selection) this
    needs every stored column to be in ``features``, costs one ``searchsorted``
    over the entries, and leaves the entry order alone, so the products add the
    same terms in the same order as on the original block.
    """
    x = block.features.tocsr()
    columns = np.searchsorted(features, x.indices).astype(x.indices.dtype, copy=False)
    compact = sp.csr_matrix((x.data, columns, x.indptr), shape=(x.shape[0], features.size))
    return Block(compact, block.labels, block.weights, block.first_row)

