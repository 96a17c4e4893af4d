"""The per-step result every gradient engine returns."""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


class GradientSums(NamedTuple):
    """Sums over the rows of one pass, in the space of raw (unscaled) features.

    With margins ``m = X @ B + c`` and ``g = d loss / d m`` (weighted):
    ``xtg = X.T @ g``, ``gsum = g.sum(0)``. The driver maps these onto the
    parameters it optimizes (see :class:`gradspark.trainer.objective.LinearObjective`).
    """

    xtg: np.ndarray  # (d, k)
    gsum: np.ndarray  # (k,)
    d_aux: np.ndarray  # (num_aux,)
    loss_sum: float
    weight_sum: float
    count: int

    def __add__(self, other: "GradientSums") -> "GradientSums":  # type: ignore[override]
        return GradientSums(
            self.xtg + other.xtg,
            self.gsum + other.gsum,
            self.d_aux + other.d_aux,
            self.loss_sum + other.loss_sum,
            self.weight_sum + other.weight_sum,
            self.count + other.count,
        )

    def scaled(self, factor: float) -> "GradientSums":
        """Every sum times ``factor`` (an inclusion weight), the row count as it was."""
        return GradientSums(self.xtg * factor, self.gsum * factor, self.d_aux * factor,
                            self.loss_sum * factor, self.weight_sum * factor, self.count)

    def vector(self) -> np.ndarray:
        """The array part, flattened for the wire: ``xtg`` (row-major), ``gsum``, ``d_aux``."""
        return np.concatenate([self.xtg.ravel(), self.gsum, self.d_aux])

    @classmethod
    def from_vector(
        cls, vector: np.ndarray, num_features: int, num_outputs: int,
        loss_sum: float, weight_sum: float, count: int,
    ) -> "GradientSums":
        return cls(*split_map(vector, num_features, num_outputs), loss_sum, weight_sum, count)

    @classmethod
    def zeros(cls, num_features: int, num_outputs: int, num_aux: int) -> "GradientSums":
        return cls(np.zeros((num_features, num_outputs)), np.zeros(num_outputs),
                   np.zeros(num_aux), 0.0, 0.0, 0)


def split_map(vector: np.ndarray, num_features: int, num_outputs: int):
    """A flat ``(d x k row-major, k, aux)`` vector -- the wire form of both the linear map
    ``(coef, offset, aux)`` and of the sums ``(xtg, gsum, d_aux)`` -- as its three parts."""
    d, k = num_features, num_outputs
    return vector[: d * k].reshape(d, k), vector[d * k: d * k + k], vector[d * k + k:]


def add_sums(a: Optional[GradientSums], b: Optional[GradientSums]) -> Optional[GradientSums]:
    """treeAggregate combiner; ``None`` is the empty partition."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b
