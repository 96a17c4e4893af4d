"""Key ranges of a sharded parameter server: which shard owns which weights.

A linear model's parameters are ``beta`` (d x k, row-major), then the
intercepts and the loss's auxiliary parameters (the tail); the linear map
the workers pull has the same shape with offsets for intercepts. Shard ``s``
owns the coefficient rows of the features ``bounds[s] <= j < bounds[s + 1]``,
and the last shard also the tail, so every shard's slice is one contiguous
range of both vectors. Features are split evenly by count; hashed features
spread their non-zeros evenly too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np


@dataclass(frozen=True)
class ShardLayout:
    num_features: int
    num_outputs: int
    theta_size: int  # d * k + intercepts + aux
    map_size: int  # d * k + k offsets + aux
    bounds: Tuple[int, ...]  # feature boundaries, num_shards + 1 of them

    @classmethod
    def even(cls, num_features: int, num_outputs: int, theta_size: int, map_size: int,
             num_shards: int) -> "ShardLayout":
        if num_shards < 1:
            raise ValueError(f"parameterServers must be >= 1 for a sharded layout, "
                             f"got {num_shards}")
        bounds = np.linspace(0, num_features, num_shards + 1).round().astype(int)
        return cls(num_features, num_outputs, theta_size, map_size, tuple(int(b) for b in bounds))

    @property
    def num_shards(self) -> int:
        return len(self.bounds) - 1

    def is_last(self, shard: int) -> bool:
        return shard == self.num_shards - 1

    def features(self, shard: int) -> Tuple[int, int]:
        return self.bounds[shard], self.bounds[shard + 1]

    def theta_range(self, shard: int) -> Tuple[int, int]:
        first, end = self.features(shard)
        k = self.num_outputs
        return first * k, self.theta_size if self.is_last(shard) else end * k

    def map_range(self, shard: int) -> Tuple[int, int]:
        first, end = self.features(shard)
        k = self.num_outputs
        return first * k, self.map_size if self.is_last(shard) else end * k

    def map_starts(self) -> np.ndarray:
        return np.array([self.map_range(s)[0] for s in range(self.num_shards)])

    def split_keys(self, keys: np.ndarray) -> List[Tuple[slice, np.ndarray]]:
        """Sorted map keys by shard: ``(slice of keys, keys local to the shard)`` each."""
        starts = self.map_starts()
        cuts = np.searchsorted(keys, starts[1:])
        edges = [0, *cuts.tolist(), keys.size]
        return [(slice(edges[s], edges[s + 1]),
                 (keys[edges[s]: edges[s + 1]] - starts[s]).astype(keys.dtype))
                for s in range(self.num_shards)]

    def hosts(self, num_workers: int) -> Dict[int, List[int]]:
        """Shards by the worker task that hosts them (round robin)."""
        hosted: Dict[int, List[int]] = {w: [] for w in range(num_workers)}
        for shard in range(self.num_shards):
            hosted[shard % num_workers].append(shard)
        return hosted


def pack_state(theta: np.ndarray, state: Dict[str, np.ndarray]) -> np.ndarray:
    """Parameters and optimizer state as one float64 vector, names in sorted order (the
    REPORT frames that carry a shard's state)."""
    return np.concatenate([theta, *(np.asarray(state[name], dtype=np.float64).ravel()
                                    for name in sorted(state))])


def unpack_state(vector: np.ndarray, template: Dict[str, np.ndarray], size: int):
    """The inverse of :func:`pack_state`: ``(theta, state)`` with ``template``'s sizes (the
    optimizer's ``init`` of ``size`` parameters)."""
    theta, offset, state = vector[:size].copy(), size, {}
    for name in sorted(template):
        length = np.size(template[name])
        state[name] = vector[offset: offset + length].reshape(np.shape(template[name]))
        offset += length
    if offset != vector.size:
        raise ValueError(f"a packed state of {vector.size} values, expected {offset}")
    return theta, state


def slice_state(state: Dict[str, np.ndarray], size: int, first: int, end: int):
    """A shard's part of the whole optimizer state: per-parameter arrays (``size`` long)
    sliced, the rest (step counters) shared."""
    return {name: (value[first:end].copy() if np.size(value) == size else np.copy(value))
            for name, value in state.items()}


def join_states(parts: List[Dict[str, np.ndarray]], template: Dict[str, np.ndarray],
                size: int) -> Dict[str, np.ndarray]:
    """The whole state from the shards' parts in shard order (the inverse of
    :func:`slice_state`); ``template``: the optimizer's ``init`` of all ``size`` parameters."""
    return {name: np.concatenate([p[name] for p in parts]) if np.size(value) == size
            else np.copy(parts[0][name]) for name, value in template.items()}
