"""Training on the features that occur: compaction of wide, mostly-empty feature spaces.

A feature whose weighted variance is zero gets a zero coefficient (MLlib's
rule: ``coefficient = beta_s / std`` when ``std > 0``, else 0), and its
coordinate of the objective never moves. Hashed categorical data (2^20 to
2^24 buckets, a few hundred thousand to millions of them ever filled) is
mostly such features, and every per-step array (the weights sent out, each
partition's gradient, the driver's optimizer state and L-BFGS history) would
otherwise have the size of the hashing space. Compacting the blocks once,
right after the statistics pass, makes every step cost what the occurring
features cost; the model is scattered back to the input's size at the end.

The fit is the same optimization restricted to coordinates that are constant
anyway: the results agree with an uncompacted fit up to the order of
floating-point additions (tested to 1e-9).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from gradspark.data.statistics import DataStatistics

# Compact when at least this share of the features, and this many, never vary: below
# that, the pass over the cached blocks costs more than the smaller steps save.
MIN_DEAD_SHARE = 0.1
MIN_DEAD_FEATURES = 4096


def active_features(stats: DataStatistics) -> Optional[np.ndarray]:
    """Ascending indices of the features with non-zero variance, or None when compaction
    would not pay (see :data:`MIN_DEAD_SHARE`, :data:`MIN_DEAD_FEATURES`)."""
    active = np.flatnonzero(stats.features_std > 0)
    dead = stats.num_features - len(active)
    if (dead < MIN_DEAD_FEATURES or dead < MIN_DEAD_SHARE * stats.num_features
            or len(active) == 0):
        return None
    return active


def expand_rows(matrix: np.ndarray, active: Optional[np.ndarray], num_features: int) -> np.ndarray:
    """A (len(active) x k) coefficient matrix back to (num_features x k), zeros elsewhere."""
    if active is None:
        return matrix
    full = np.zeros((num_features,) + matrix.shape[1:], dtype=matrix.dtype)
    full[active] = matrix
    return full
