"""Two synthetic click-through data generators for the wide sparse benchmarks.

Both hash categorical fields into ``2^w`` buckets and draw labels from a
logistic model whose weight per bucket is itself a hash, so the data is the
same at any row count, partition by partition, without storing anything.

* ``"ctr"`` (the one ``wide_sparse.py`` was written on): 30 fields, binary
  features, exactly 30 non-zeros per row (fewer when two fields share a
  bucket); field ``f`` has ``10 * 4^(f mod 12)`` values drawn as ``u^3`` of the
  vocabulary: a few thousand hot buckets and a long tail.
* ``"tail"`` (a second mix, not tuned on): 100 fields of which a row fills
  10-100 (uniform), vocabularies from 10 to 10^6 with Zipf-distributed ids
  (exponent 1.2: a heavier head and a longer tail), and count-valued features
  (``1 + Poisson(1)``) in every third field. Weights per bucket are drawn on
  another scale, the margin is normalized by the row's field count, and about
  a quarter of the labels are positive.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

GENERATORS = ("ctr", "tail")
_GOLDEN = np.uint64(11400714819323198485)


def _bucket_weight(buckets: np.ndarray, scale: float, salt: int) -> np.ndarray:
    mixed = ((buckets.astype(np.uint64) + np.uint64(salt)) * _GOLDEN) >> np.uint64(40)
    return ((mixed % np.uint64(2001)).astype(np.float64) - 1000) / 1000.0 * scale


def _ctr(rng, rows: int, width: int):
    fields = 30
    vocabulary = np.minimum(10 * 4.0 ** (np.arange(fields) % 12), 1e7)
    values = np.floor(vocabulary * rng.random((rows, fields)) ** 3).astype(np.int64)
    buckets = (values * 2654435761 + np.arange(fields) * 40503 + 7919) % width
    buckets.sort(axis=1)
    repeated = np.zeros_like(buckets, dtype=bool)
    repeated[:, 1:] = buckets[:, 1:] == buckets[:, :-1]  # two fields in one bucket
    weight = _bucket_weight(buckets, 0.6, 0)
    margin = np.where(repeated, 0.0, weight).sum(axis=1) - 0.3
    labels = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(float)
    keep = ~repeated
    counts = keep.sum(axis=1)
    return buckets[keep], np.ones(int(counts.sum())), counts, labels


def _tail(rng, rows: int, width: int):
    fields = 100
    vocabulary = np.floor(10 ** (1 + 5 * np.arange(fields) / (fields - 1))).astype(np.int64)
    filled = rng.integers(10, fields + 1, size=rows)
    # each row fills its first `filled` fields of a random permutation
    order = np.argsort(rng.random((rows, fields)), axis=1)
    active = np.arange(fields)[None, :] < filled[:, None]
    field = np.where(active, order, -1)
    ids = (rng.zipf(1.2, size=(rows, fields)) - 1) % vocabulary[np.maximum(field, 0)]
    buckets = (ids * 2654435761 + np.maximum(field, 0) * 7919 + 104729) % width
    buckets = np.where(active, buckets, width)  # inactive cells sort last
    counted = (field % 3 == 0) & active
    values = np.where(counted, 1.0 + rng.poisson(1.0, size=(rows, fields)), 1.0)
    order = np.argsort(buckets, axis=1, kind="stable")
    buckets = np.take_along_axis(buckets, order, axis=1)
    values = np.take_along_axis(values, order, axis=1)
    repeated = np.zeros_like(buckets, dtype=bool)
    repeated[:, 1:] = buckets[:, 1:] == buckets[:, :-1]
    keep = (buckets < width) & ~repeated
    weight = _bucket_weight(buckets, 1.2, 17) * np.log1p(values)
    margin = np.where(keep, weight, 0.0).sum(axis=1) / np.sqrt(filled / 10.0) - 1.2
    labels = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(float)
    counts = keep.sum(axis=1)
    return buckets[keep], values[keep], counts, labels


def ctr_arrays(generator: str, rows: int, width: int, seed: int,
               partition: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One partition's rows as CSR parts: ``(indices, values, indptr, labels)`` (indices
    sorted within each row)."""
    if generator not in GENERATORS:
        raise ValueError(f"unknown generator {generator!r}; one of {GENERATORS}")
    # ("ctr" keeps the seeding of benchmarks/wide_sparse.py's generator: the same rows)
    rng = np.random.default_rng([seed, partition] + ([1] if generator == "tail" else []))
    indices, values, counts, labels = (_ctr if generator == "ctr" else _tail)(rng, rows, width)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return indices.astype(np.int64), values, indptr, labels


def sparse_rows(generator: str, partition: int, rows: int, width: int, seed: int) -> list:
    """One partition's ``(label, SparseVector)`` rows, for ``spark.createDataFrame``."""
    from pyspark.ml.linalg import SparseVector

    indices, values, indptr, labels = ctr_arrays(generator, rows, width, seed, partition)
    return [(float(labels[i]),
             SparseVector(width, indices[indptr[i]:indptr[i + 1]].tolist(),
                          values[indptr[i]:indptr[i + 1]].tolist()))
            for i in range(rows)]


def ctr_frame(spark, rows: int, width: int, partitions: int, seed: int,
              generator: str = "ctr"):
    """A cached DataFrame of ``(features, label)``: ``rows`` rows of ``generator`` generated
    on the executors, ``rows // partitions`` per partition (the benchmarks' data)."""
    per = rows // partitions
    rdd = spark.sparkContext.parallelize(range(partitions), partitions).flatMap(
        lambda p: sparse_rows(generator, p, per, width, seed))
    df = rdd.toDF(["label", "features"]).select("features", "label").cache()
    df.count()
    return df
