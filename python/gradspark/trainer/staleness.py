"""What an asynchronous server does with a stale gradient (``staleGradientPolicy``).

A gradient pushed ``tau`` updates after its worker pulled the weights was
computed at ``w_pulled``, not at the server's ``w_now``:

* ``none``: applied as it is (plain ASGD / SSP).
* ``scale``: its learning rate is divided by ``1 + tau`` (DynSGD, Jiang et al.
  2017): stale gradients move the weights less.
* ``compensate``: delay-compensated ASGD (Zheng et al., ICML 2017): the data
  gradient is moved to ``w_now`` by a first-order Taylor step with the
  diagonal of the outer product ``g g^T`` standing in for the Hessian,
  ``g + lambda * g * g * (w_now - w_pulled)``. With ``adaptive`` (DC-ASGD-a)
  ``lambda`` is ``lambda_0 / sqrt(MeanSquare)`` per coordinate, a moving mean
  square of the gradients the server received (decay 0.95).

Only the data term is stale: the L2 term is taken at ``w_now`` by the caller.
A fresh gradient (``tau = 0``) is returned unchanged, so every policy is
bit-identical to ``none`` without staleness. Cost: the server keeps the
weights each worker pulled (references to immutable snapshots: at most one
weight vector per worker, when every worker pulled a different version; no
extra bytes on the wire), and ``adaptive`` one mean square per coordinate.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Optional, Tuple

import numpy as np

_DECAY = 0.95  # DC-ASGD-a's moving mean square
_EPS = 1e-12


class StaleGradients:
    """Applies ``policy`` to each asynchronous update and keeps its statistics."""

    def __init__(self, policy: str = "none", lam: float = 0.04, adaptive: bool = False) -> None:
        if policy not in ("none", "scale", "compensate"):
            raise ValueError(f"unknown staleGradientPolicy {policy!r}")
        self.policy, self.lam, self.adaptive = policy, lam, adaptive
        self.mean_square: Optional[np.ndarray] = None
        self.delays: Counter = Counter()  # tau -> updates
        self.scales: list = []  # learning-rate factors applied (scale)
        self.corrections = 0  # compensated updates
        self.correction_ratio = 0.0  # sum of |correction| / |g| over them
        self.unknown_pulls = 0  # pushes whose pulled weights the server no longer had

    def apply(self, grad: np.ndarray, lr: float, tau: int, now: np.ndarray,
              pulled: Optional[np.ndarray]) -> Tuple[np.ndarray, float]:
        """``(data gradient, learning rate)`` for a gradient ``tau`` updates old."""
        self.delays[tau] += 1
        if self.policy == "compensate" and self.adaptive:
            square = grad * grad
            self.mean_square = (1 - _DECAY) * square if self.mean_square is None \
                else _DECAY * self.mean_square + (1 - _DECAY) * square
        if tau <= 0 or self.policy == "none":
            return grad, lr
        if self.policy == "scale":
            factor = 1.0 / (1.0 + tau)
            self.scales.append(factor)
            return grad, lr * factor
        if pulled is None:
            self.unknown_pulls += 1
            return grad, lr
        lam = self.lam / np.sqrt(self.mean_square + _EPS) if self.adaptive else self.lam
        correction = lam * grad * grad * (now - pulled)
        size = float(np.linalg.norm(grad))
        self.corrections += 1
        self.correction_ratio += float(np.linalg.norm(correction)) / size if size > 0 else 0.0
        return grad + correction, lr

    def metrics(self) -> Dict[str, object]:
        figures: Dict[str, object] = {
            "staleGradientPolicy": self.policy,
            "updateDelayHistogram": {str(tau): n for tau, n in sorted(self.delays.items())},
        }
        if self.policy == "scale":
            figures["meanLearningRateScale"] = \
                float(np.mean(self.scales)) if self.scales else 1.0
        if self.policy == "compensate":
            figures.update(
                delayCompensation=self.lam, adaptiveCompensation=self.adaptive,
                compensatedUpdates=self.corrections,
                meanCompensationRatio=self.correction_ratio / max(self.corrections, 1),
                pullsNotKept=self.unknown_pulls)
        return figures
