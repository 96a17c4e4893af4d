"""The proximal step every first-order optimizer ends with: a gradient step, then the prox of
the L1 penalty (soft thresholding)."""

from __future__ import annotations

import numpy as np


def soft_threshold(x: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Proximal operator of ``threshold * |x|`` (elementwise)."""
    return np.sign(x) * np.maximum(np.abs(x) - threshold, 0.0)


def proximal_step(theta, direction, step_sizes, l1, prox_scale=1.0):
    """theta - step * direction, then the prox of the L1 term with steps * prox_scale."""
    moved = theta - step_sizes * direction
    return soft_threshold(moved, step_sizes * prox_scale * l1) if np.any(l1) else moved
