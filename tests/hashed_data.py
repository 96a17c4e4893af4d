"""Hashed categorical rows for the wide-sparse tests: a few occurring buckets in a wide
hashing space, binary features, labels from a logistic model."""

from __future__ import annotations

import numpy as np
from pyspark.ml.linalg import Vectors

WIDE = 1 << 15  # hashing space: most of it never occurs
ACTIVE = 60


def hashed_rows(n: int, seed: int, rare: bool = False):
    """Rows with 6 binary features each, drawn from ACTIVE buckets scattered over WIDE
    (hot ones more often; ``rare`` adds a tail of buckets seen once or twice)."""
    g = np.random.default_rng(seed)
    buckets = np.sort(g.choice(WIDE, size=ACTIVE, replace=False))
    popularity = 1.0 / np.arange(1, ACTIVE + 1)
    popularity /= popularity.sum()
    picks = [np.unique(g.choice(ACTIVE, size=6, p=popularity)) for _ in range(n)]
    columns = [buckets[p] for p in picks]
    if rare:  # one bucket of its own in most rows: seen once in the data
        tail = g.choice(np.setdiff1d(np.arange(WIDE), buckets), size=n, replace=False)
        columns = [np.sort(np.append(c, t)) if i % 4 else c
                   for i, (c, t) in enumerate(zip(columns, tail))]
    truth = g.normal(scale=1.0, size=WIDE)
    margin = np.array([truth[c].sum() for c in columns]) - 0.5
    labels = (g.random(n) < 1 / (1 + np.exp(-margin))).astype(float)
    return columns, labels


def frames(spark, columns, labels, narrow_to=None, partitions=2):
    """The rows as WIDE sparse vectors, or on the buckets ``narrow_to`` only (renumbered)."""
    rows = []
    for c, y in zip(columns, labels):
        if narrow_to is None:
            vector = Vectors.sparse(WIDE, c.tolist(), [1.0] * len(c))
        else:
            vector = Vectors.sparse(len(narrow_to), np.searchsorted(narrow_to, c).tolist(),
                                    [1.0] * len(c))
        rows.append((vector, float(y)))
    return spark.createDataFrame(rows, ["features", "label"]).repartition(partitions).cache()
