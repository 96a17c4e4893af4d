"""Per-example losses of linear models, vectorized over a block of margins.

A loss sees only margins ``m = X @ B + c`` of shape ``(n, k)``, the labels
and the weights; it returns the weighted loss sum and its derivative with
respect to the margins (plus any extra parameters it owns, e.g. Huber's
scale). The gradient engine turns that into the coefficient gradient with
one matrix product per block. Each loss is a small picklable object, so
executors get the exact same code the driver validated.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
from scipy.special import log_softmax, softmax

from gradspark.data.blocks import BINARY, CLASS_INDEX, REAL


class LossValue(NamedTuple):
    loss_sum: float  # sum_i w_i * loss_i
    d_margins: np.ndarray  # (n, k): w_i * d loss_i / d m_i
    d_aux: np.ndarray  # gradient wrt the loss's own parameters


class Loss:
    name: str = ""
    label_domain: str = REAL
    num_aux: int = 0  # extra parameters the loss owns (appended to the parameter vector)
    # The most a row's second derivative in a margin can be (a per-coordinate curvature
    # bound, for optimizer='svrg'); None where there is none (hinge) or the loss has
    # parameters of its own (Huber's scale).
    curvature: Optional[float] = None

    def evaluate(
        self, margins: np.ndarray, labels: np.ndarray, weights: np.ndarray, aux: np.ndarray
    ) -> LossValue:
        raise NotImplementedError

    def initial_aux(self) -> np.ndarray:
        return np.zeros(self.num_aux)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


_NO_AUX = np.zeros(0)


class BinaryLogisticLoss(Loss):
    """log(1 + exp(m)) - y m, labels in {0, 1}; one margin per row."""

    name = "logistic"
    label_domain = BINARY
    curvature = 0.25  # p (1 - p)

    def evaluate(self, margins, labels, weights, aux):
        # One exp and one log1p per row (np.logaddexp twice and an exp took 2.5x as long,
        # a fifth of a resident worker's round): e = exp(-|m|) never overflows.
        m = margins[:, 0]
        e = np.exp(-np.abs(m))
        loss = np.maximum(m, 0.0)
        loss += np.log1p(e)  # log(1 + exp(m)), the terms np.logaddexp(0, m) adds
        loss -= labels * m
        prob = 1.0 / (1.0 + e)  # sigmoid(m) for m >= 0 ...
        np.multiply(prob, e, out=e)  # ... and exp(m) / (1 + exp(m)) for m < 0
        prob = np.where(m >= 0.0, prob, e)
        return LossValue(float(weights @ loss), (weights * (prob - labels))[:, None], _NO_AUX)


class MultinomialLogisticLoss(Loss):
    """Softmax cross-entropy; labels are class indices, one margin per class."""

    name = "multinomial"
    label_domain = CLASS_INDEX
    curvature = 0.25  # the softmax Hessian's diagonal, p_k (1 - p_k)

    def evaluate(self, margins, labels, weights, aux):
        idx = labels.astype(np.int64)
        log_prob = log_softmax(margins, axis=1)
        loss = -log_prob[np.arange(len(idx)), idx]
        d = softmax(margins, axis=1)
        d[np.arange(len(idx)), idx] -= 1.0
        return LossValue(float(weights @ loss), d * weights[:, None], _NO_AUX)


class SquaredLoss(Loss):
    """(m - (y - shift) / scale)^2 / 2.

    MLlib fits least squares on the standardized label (shift = mean when
    fitting an intercept, scale = std); doing the same keeps its
    regularization semantics, so coefficients agree with MLlib.
    """

    name = "squaredError"
    curvature = 1.0

    def __init__(self, label_shift: float = 0.0, label_scale: float = 1.0) -> None:
        self.label_shift = label_shift
        self.label_scale = label_scale

    def evaluate(self, margins, labels, weights, aux):
        r = margins[:, 0] - (labels - self.label_shift) / self.label_scale
        return LossValue(float(0.5 * weights @ r**2), (weights * r)[:, None], _NO_AUX)


class HuberLoss(Loss):
    """Huber loss with a jointly estimated scale sigma (Owen 2007), as in MLlib.

    Per row: (sigma + r^2 / sigma) / 2 when |r| <= epsilon * sigma, else
    (sigma + 2 epsilon |r| - epsilon^2 sigma) / 2, with r = y - m. The scale
    sigma is the loss's one auxiliary parameter (kept > 0 by the optimizer).
    """

    name = "huber"
    num_aux = 1

    def __init__(self, epsilon: float = 1.35) -> None:
        if epsilon <= 1.0:
            raise ValueError(f"Huber epsilon must be > 1.0, got {epsilon}")
        self.epsilon = epsilon

    def initial_aux(self) -> np.ndarray:
        return np.ones(1)

    def evaluate(self, margins, labels, weights, aux):
        sigma, eps = float(aux[0]), self.epsilon
        r = labels - margins[:, 0]
        inner = np.abs(r) <= eps * sigma
        loss = np.where(
            inner, sigma + r**2 / sigma, sigma + 2.0 * eps * np.abs(r) - eps**2 * sigma
        )
        d_margin = np.where(inner, -r / sigma, -eps * np.sign(r))
        d_sigma = np.where(inner, 1.0 - (r / sigma) ** 2, 1.0 - eps**2)
        return LossValue(
            float(0.5 * weights @ loss),
            (weights * d_margin)[:, None],
            np.array([0.5 * weights @ d_sigma]),
        )


class HingeLoss(Loss):
    """max(0, 1 - s m) with s = 2 y - 1, labels in {0, 1} (MLlib LinearSVC)."""

    name = "hinge"
    label_domain = BINARY

    def evaluate(self, margins, labels, weights, aux):
        s = 2.0 * labels - 1.0
        slack = 1.0 - s * margins[:, 0]
        active = slack > 0
        loss = np.where(active, slack, 0.0)
        return LossValue(float(weights @ loss), (-weights * s * active)[:, None], _NO_AUX)
