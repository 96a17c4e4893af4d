"""SGD (momentum, Nesterov), Adagrad and Adam with proximal L1 steps; FTRL-Proximal.

Every optimizer is ``init(theta) -> state`` and ``update(theta, grad, state, lr, l1)
-> (theta, state)``, pure (the state passed in is never changed), with ``grad``
the gradient of the smooth objective: the data term plus the L2 penalty.

**Lazy updates** (``l2`` given to Adagrad, Adam and FTRL). On sparse data a
mini-batch touches a few of the coordinates; the others get no data gradient,
only the L2 penalty's ``l2 * theta``. The dense textbook rules still feed that
into their moments and, through Adam's momentum, keep moving a rare feature for
many steps after one sighting. The lazy rules update the moments and take the
step of a coordinate only when the data gradient touches it (``grad != l2 *
theta``, exact: an untouched coordinate's gradient *is* that product). Every
untouched coordinate instead decays by its L2 penalty, every step, with the
step size of its last touch::

    theta_j <- soft_threshold(max(0, 1 - lr * l2_j * s_j) * theta_j, lr * s_j * l1_j)

``s_j`` is ``1 / (sqrt(sum_sq_j) + eps)`` (Adagrad) or ``1 / (sqrt(v_hat_j) +
eps)`` (Adam) at the last touch: the same preconditioner the coordinate's data
steps use, so the fixed point is the objective's optimum (in expectation the
data steps and the decay balance where ``grad_data + l2 * theta = 0``). A
coordinate no batch has touched yet has no step size and does not move. The
decay is applied to the weights every step rather than caught up at the next
touch, because the driver broadcasts the whole weight vector: a batch's margins
must see the decayed weights. It is elementwise O(d) with no moment arithmetic.
FTRL needs no decay: its L2 is the paper's ``lambda2`` in the closed form of
the weights, and only the data gradient enters ``z`` and ``n``.

On dense data every coordinate is touched every step, and the lazy rules are
the dense ones, bit for bit.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from gradspark.optim.proximal import proximal_step as _proximal_step
from gradspark.optim.proximal import soft_threshold
from gradspark.optim.variance_reduction import SVRG

State = Dict[str, np.ndarray]


class SGD:
    """Gradient descent with optional heavy-ball or Nesterov momentum."""

    def __init__(self, momentum: float = 0.0, nesterov: bool = False) -> None:
        self.momentum = momentum
        self.nesterov = nesterov

    def init(self, theta: np.ndarray) -> State:
        return {"velocity": np.zeros_like(theta)}

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        velocity = self.momentum * state["velocity"] + grad
        direction = grad + self.momentum * velocity if self.nesterov else velocity
        # At a fixed point the direction is grad / (1 - momentum); scaling the L1
        # threshold the same way makes that fixed point the true lasso optimum.
        prox_scale = 1.0 / (1.0 - self.momentum)
        return _proximal_step(theta, direction, lr, l1, prox_scale), {"velocity": velocity}


def _touched(theta: np.ndarray, grad: np.ndarray, l2: np.ndarray) -> np.ndarray:
    """Indices with a data gradient: ``grad`` is ``data + l2 * theta`` and ``0 + x == x``
    in floating point, so an untouched coordinate's gradient equals ``l2 * theta``."""
    return np.flatnonzero(grad != l2 * theta)


def _lazy_decay(theta: np.ndarray, scale: np.ndarray, lr: float, l2: np.ndarray,
                l1) -> np.ndarray:
    """One step of L2 decay (and the L1 prox) for coordinates without a data gradient, with
    each coordinate's step size ``lr * scale`` (0 before its first touch: no movement)."""
    moved = theta * np.maximum(1.0 - lr * l2 * scale, 0.0)
    return soft_threshold(moved, lr * scale * l1) if np.any(l1) else moved


def _at(values, idx: np.ndarray):
    """``values[idx]`` for a per-coordinate array, the scalar itself for a scalar."""
    return values[idx] if np.ndim(values) else values


class Adagrad:
    """Per-coordinate steps lr / sqrt(sum of squared gradients); lazy when given ``l2``
    (see the module docstring)."""

    def __init__(self, eps: float = 1e-10, l2: Optional[np.ndarray] = None) -> None:
        self.eps = eps
        self.l2 = l2

    def init(self, theta: np.ndarray) -> State:
        state = {"sum_sq": np.zeros_like(theta)}
        if self.l2 is not None:
            state["scale"] = np.zeros_like(theta)  # 1 / (sqrt(sum_sq) + eps) at the last touch
        return state

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        if self.l2 is not None:
            return self._lazy_update(theta, grad, state, lr, l1)
        sum_sq = state["sum_sq"] + grad**2
        steps = lr / (np.sqrt(sum_sq) + self.eps)
        return _proximal_step(theta, grad, steps, l1), {"sum_sq": sum_sq}

    def _lazy_update(self, theta, grad, state: State, lr: float, l1):
        idx = _touched(theta, grad, self.l2)
        sum_sq, scale = state["sum_sq"].copy(), state["scale"].copy()
        new_theta = _lazy_decay(theta, scale, lr, self.l2, l1)
        g = grad[idx]
        sum_sq[idx] += g**2
        denominator = np.sqrt(sum_sq[idx]) + self.eps
        scale[idx] = 1.0 / denominator
        new_theta[idx] = _proximal_step(theta[idx], g, lr / denominator, _at(l1, idx))
        return new_theta, {"sum_sq": sum_sq, "scale": scale}


class Adam:
    """Adam (Kingma & Ba) with bias correction; L1 prox uses Adam's per-coordinate steps.
    Lazy when given ``l2`` (see the module docstring): as TensorFlow's ``LazyAdam``, the
    moments of a touched coordinate advance one step per touch, bias-corrected with the
    global step count."""

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 l2: Optional[np.ndarray] = None) -> None:
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.l2 = l2

    def init(self, theta: np.ndarray) -> State:
        state = {"m": np.zeros_like(theta), "v": np.zeros_like(theta), "t": np.zeros(1)}
        if self.l2 is not None:
            state["scale"] = np.zeros_like(theta)  # 1 / (sqrt(v_hat) + eps) at the last touch
        return state

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        if self.l2 is not None:
            return self._lazy_update(theta, grad, state, lr, l1)
        t = state["t"] + 1
        m = self.beta1 * state["m"] + (1 - self.beta1) * grad
        v = self.beta2 * state["v"] + (1 - self.beta2) * grad**2
        m_hat = m / (1 - self.beta1 ** t[0])
        v_hat = v / (1 - self.beta2 ** t[0])
        steps = lr / (np.sqrt(v_hat) + self.eps)
        return _proximal_step(theta, m_hat, steps, l1), {"m": m, "v": v, "t": t}

    def _lazy_update(self, theta, grad, state: State, lr: float, l1):
        t = state["t"] + 1
        idx = _touched(theta, grad, self.l2)
        m, v, scale = state["m"].copy(), state["v"].copy(), state["scale"].copy()
        new_theta = _lazy_decay(theta, scale, lr, self.l2, l1)
        g = grad[idx]
        m[idx] = self.beta1 * m[idx] + (1 - self.beta1) * g
        v[idx] = self.beta2 * v[idx] + (1 - self.beta2) * g**2
        m_hat = m[idx] / (1 - self.beta1 ** t[0])
        v_hat = v[idx] / (1 - self.beta2 ** t[0])
        denominator = np.sqrt(v_hat) + self.eps
        scale[idx] = 1.0 / denominator
        new_theta[idx] = _proximal_step(theta[idx], m_hat, lr / denominator, _at(l1, idx))
        return new_theta, {"m": m, "v": v, "t": t, "scale": scale}


class FTRL:
    """FTRL-Proximal (McMahan et al., "Ad click prediction: a view from the trenches", 2013).

    Per-coordinate rates ``lr / (beta + sqrt(n))`` with ``n`` the sum of squared
    gradients, and the weights in closed form from ``z`` (the gradients summed,
    less each step's proximal pull): L1 sets a coordinate to exactly zero while
    ``|z|`` stays below the threshold, the standard for sparse click-through
    models.

    ``z`` sums one gradient of the (mean) objective per step, so after ``t``
    steps the penalties are ``t * l1`` and ``t * l2``: the fixed point is the
    objective's optimum (as for the proximal optimizers). Given ``l2`` (lazy,
    see the module docstring), L2 is the paper's ``lambda2`` in the closed form
    ``w = -soft_threshold(z, t l1) / ((beta + sqrt(n)) / lr + t l2)`` and only
    the data gradient enters ``z`` and ``n``: a coordinate no batch touches keeps
    its ``z`` and ``n``. Without ``l2``, L2 arrives in the gradient as for the
    other optimizers. The first step starts ``z`` at ``-(beta / lr) theta``,
    so the initial weights (the intercepts' log-odds) are its starting point.

    ``beta`` is in the gradient's units. The paper's ``beta = 1`` is for
    one-example gradients of size ~1; here a gradient is a batch mean, a rare
    feature's ~``1 / batch rows``, and ``beta = 1`` would swamp ``sqrt(n)`` and
    turn the per-coordinate rates into one global ``lr``. The default is small
    enough that ``sqrt(n)`` rules after a coordinate's first touch.
    """

    def __init__(self, beta: float = 1e-4, l2: Optional[np.ndarray] = None) -> None:
        self.beta = beta
        self.l2 = l2

    def init(self, theta: np.ndarray) -> State:
        return {"z": np.zeros_like(theta), "n": np.zeros_like(theta), "t": np.zeros(1)}

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        t = state["t"] + 1
        l2 = 0.0 if self.l2 is None else self.l2
        if self.l2 is not None:
            grad = np.where(grad != self.l2 * theta, grad - self.l2 * theta, 0.0)
        z = state["z"] if state["t"][0] > 0 else -(self.beta / lr) * theta
        n = state["n"] + grad**2
        sigma = (np.sqrt(n) - np.sqrt(state["n"])) / lr
        z = z + grad - sigma * theta
        shrunk = soft_threshold(z, t[0] * np.asarray(l1)) if np.any(l1) else z
        weights = -shrunk / ((self.beta + np.sqrt(n)) / lr + t[0] * l2)
        return weights, {"z": z, "n": n, "t": t}


# stepSize when it is not set. Adam's steps are ~lr per touch whatever the gradient's
# scale, Adagrad's and FTRL's ~lr on a coordinate's first touch then shrinking: chosen on
# the wide sparse benchmark's generator and checked on its second one
# (docs/wide_sparse.md, "Stochastic optimizers").
# SVRG's is a fraction of the inverse curvature bound, so it is unitless too.
DEFAULT_STEP_SIZES = {"sgd": 0.1, "adagrad": 0.1, "adam": 0.01, "ftrl": 0.1, "svrg": 0.03}


def make_first_order(name: str, momentum: float = 0.0, nesterov: bool = False,
                     l2: Optional[np.ndarray] = None, curvature: Optional[np.ndarray] = None,
                     updates_per_pass: int = 1):
    """The optimizer called ``name``; Adagrad, Adam and FTRL are lazy when given the
    per-parameter ``l2`` (SGD's update is the same either way). SVRG needs the
    per-parameter ``curvature`` bound and the updates of one pass (its snapshots)."""
    if name == "svrg":
        if curvature is None:
            raise ValueError("optimizer 'svrg' needs the objective's curvature bounds")
        return SVRG(curvature, updates_per_pass)
    if name == "sgd":
        return SGD(momentum, nesterov)
    if name == "adagrad":
        return Adagrad(l2=l2)
    if name == "adam":
        return Adam(l2=l2)
    if name == "ftrl":
        return FTRL(l2=l2)
    raise ValueError(f"unknown first-order optimizer {name!r}")
