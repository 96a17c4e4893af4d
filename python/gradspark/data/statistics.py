"""Weighted column statistics of the training blocks, in one tree-aggregated pass.

Means and variances are merged with Chan et al.'s parallel update, so no
sum-of-squares cancellation builds up across partitions. Variances are
unbiased in the same (reliability-weight) sense as MLlib's ``Summarizer``:
``M2 / (W - sum(w**2) / W)``, which is what MLlib's standardization uses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse as sp

from gradspark.data.blocks import Block


@dataclass
class Moments:
    """Weighted mean and M2 of a set of columns."""

    weight_sum: float
    mean: np.ndarray
    m2: np.ndarray

    def merge(self, other: "Moments") -> "Moments":
        total = self.weight_sum + other.weight_sum
        if other.weight_sum == 0:
            return self
        if self.weight_sum == 0:
            return other
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.weight_sum / total)
        m2 = self.m2 + other.m2 + delta**2 * (self.weight_sum * other.weight_sum / total)
        return Moments(total, mean, m2)


@dataclass
class DataStatistics:
    """What one pass over the blocks tells us about the training data."""

    count: int
    weight_sum: float
    weight_sq_sum: float
    features: Moments
    label: Moments
    label_max: float
    class_weights: np.ndarray  # weight per integer label value (classification)
    stored_entries: float = 0.0  # CSR non-zeros, plus n x d for every dense block

    @property
    def num_features(self) -> int:
        return len(self.features.mean)

    @property
    def density(self) -> float:
        """Stored entries per row and feature: below 0.5 the blocks are CSR."""
        return self.stored_entries / max(self.count * self.num_features, 1)

    def select(self, features: np.ndarray) -> "DataStatistics":
        """The same statistics restricted to the given feature indices."""
        f = self.features
        return dataclasses.replace(
            self, features=Moments(f.weight_sum, f.mean[features], f.m2[features]))

    def _unbiased(self, m2: np.ndarray) -> np.ndarray:
        denom = self.weight_sum - self.weight_sq_sum / self.weight_sum
        if denom <= 0:
            return np.zeros_like(m2)
        return np.maximum(m2 / denom, 0.0)

    @property
    def features_std(self) -> np.ndarray:
        return np.sqrt(self._unbiased(self.features.m2))

    @property
    def label_mean(self) -> float:
        return float(self.label.mean[0])

    @property
    def label_std(self) -> float:
        return float(np.sqrt(self._unbiased(self.label.m2))[0])


def require_finite_statistics(stats: DataStatistics, features_col: str, label_col: str,
                              weight_col: Optional[str]) -> None:
    """Refuse, by column, data whose statistics overflow double precision (values near
    1e154 and beyond: their squares do not fit). Trained on, such a column gives NaN
    coefficients, or a standard deviation of inf that silently drops the feature."""
    from gradspark.data.validation import InvalidDataError

    def refuse(what: str) -> None:
        raise InvalidDataError(f"{what} has values too large for double-precision "
                               "statistics (its weighted sums or variance overflow); "
                               "rescale it (e.g. divide by a power of 10) and train again")

    if not np.isfinite(stats.weight_sum) or not np.isfinite(stats.weight_sq_sum):
        refuse(f"weight column {weight_col!r}")
    if not (np.isfinite(stats.label.mean).all() and np.isfinite(stats.label.m2).all()):
        refuse(f"label column {label_col!r}")
    bad = ~(np.isfinite(stats.features.mean) & np.isfinite(stats.features.m2))
    if bad.any():
        refuse(f"features column {features_col!r} (feature {int(np.argmax(bad))})")


def block_statistics(block: Block, track_classes: bool) -> Optional[DataStatistics]:
    x, y, w = block.features, block.labels, block.weights
    total = float(w.sum())
    if total > 0:
        if sp.issparse(x):
            mean = np.asarray(x.T @ w).ravel() / total
            m2 = np.asarray(x.multiply(x).T @ w).ravel() - total * mean**2
        else:
            mean = w @ x / total
            m2 = w @ (x - mean) ** 2
        y_mean = np.array([w @ y / total])
        y_m2 = np.array([w @ (y - y_mean[0]) ** 2])
    else:
        mean = m2 = np.zeros(x.shape[1])
        y_mean = y_m2 = np.zeros(1)
    classes = (
        np.bincount(y.astype(np.int64), weights=w) if track_classes and len(y) else np.zeros(0)
    )
    return DataStatistics(
        count=len(y),
        weight_sum=total,
        weight_sq_sum=float(w @ w),
        features=Moments(total, mean, np.maximum(m2, 0.0)),
        label=Moments(total, y_mean, y_m2),
        label_max=float(y.max()) if len(y) else -np.inf,
        class_weights=classes,
        stored_entries=float(x.nnz if sp.issparse(x) else x.size),
    )


def merge_statistics(
    a: Optional[DataStatistics], b: Optional[DataStatistics]
) -> Optional[DataStatistics]:
    if a is None:
        return b
    if b is None:
        return a
    k = max(len(a.class_weights), len(b.class_weights))
    classes = np.zeros(k)
    classes[: len(a.class_weights)] += a.class_weights
    classes[: len(b.class_weights)] += b.class_weights
    return DataStatistics(
        count=a.count + b.count,
        weight_sum=a.weight_sum + b.weight_sum,
        weight_sq_sum=a.weight_sq_sum + b.weight_sq_sum,
        features=a.features.merge(b.features),
        label=a.label.merge(b.label),
        label_max=max(a.label_max, b.label_max),
        class_weights=classes,
        stored_entries=a.stored_entries + b.stored_entries,
    )
