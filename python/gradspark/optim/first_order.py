"""SGD (momentum, Nesterov), Adagrad and Adam with proximal L1 steps; FTRL-Proximal."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

State = Dict[str, np.ndarray]


def soft_threshold(x: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Proximal operator of ``threshold * |x|`` (elementwise)."""
    return np.sign(x) * np.maximum(np.abs(x) - threshold, 0.0)


def _proximal_step(theta, direction, step_sizes, l1, prox_scale=1.0):
    """theta - step * direction, then the prox of the L1 term with steps * prox_scale."""
    moved = theta - step_sizes * direction
    return soft_threshold(moved, step_sizes * prox_scale * l1) if np.any(l1) else moved


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


class Adagrad:
    """Per-coordinate steps lr / sqrt(sum of squared gradients)."""

    def __init__(self, eps: float = 1e-10) -> None:
        self.eps = eps

    def init(self, theta: np.ndarray) -> State:
        return {"sum_sq": np.zeros_like(theta)}

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        sum_sq = state["sum_sq"] + grad**2
        steps = lr / (np.sqrt(sum_sq) + self.eps)
        return _proximal_step(theta, grad, steps, l1), {"sum_sq": sum_sq}


class Adam:
    """Adam (Kingma & Ba) with bias correction; L1 prox uses Adam's per-coordinate steps."""

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def init(self, theta: np.ndarray) -> State:
        return {"m": np.zeros_like(theta), "v": np.zeros_like(theta), "t": np.zeros(1)}

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        t = state["t"] + 1
        m = self.beta1 * state["m"] + (1 - self.beta1) * grad
        v = self.beta2 * state["v"] + (1 - self.beta2) * grad**2
        m_hat = m / (1 - self.beta1 ** t[0])
        v_hat = v / (1 - self.beta2 ** t[0])
        steps = lr / (np.sqrt(v_hat) + self.eps)
        return _proximal_step(theta, m_hat, steps, l1), {"m": m, "v": v, "t": t}


class FTRL:
    """FTRL-Proximal (McMahan et al., "Ad click prediction: a view from the trenches", 2013).

    Per-coordinate rates ``lr / (beta + sqrt(n))`` with ``n`` the sum of squared
    gradients, and the weights in closed form from ``z`` (the gradients summed,
    less each step's proximal pull): L1 sets a coordinate to exactly zero while
    ``|z|`` stays below the threshold, the standard for sparse click-through
    models. A coordinate with a zero gradient keeps its weight and state, so on
    sparse data the update is lazy by construction.

    ``z`` sums one gradient of the (mean) objective per step, so the threshold
    is ``t * l1`` after ``t`` steps: its fixed point is the objective's lasso
    optimum (as for the proximal optimizers). L2 arrives in the gradient, like
    every optimizer here (the paper's lambda2 term in closed form would be the
    same fixed point). The first step starts ``z`` at ``-(beta / lr) theta``, so
    the initial weights (the intercepts' log-odds) are its starting point.
    """

    def __init__(self, beta: float = 1.0) -> None:
        self.beta = beta

    def init(self, theta: np.ndarray) -> State:
        return {"z": np.zeros_like(theta), "n": np.zeros_like(theta), "t": np.zeros(1)}

    def update(self, theta, grad, state: State, lr: float, l1) -> Tuple[np.ndarray, State]:
        t = state["t"] + 1
        z = state["z"] if state["t"][0] > 0 else -(self.beta / lr) * theta
        n = state["n"] + grad**2
        sigma = (np.sqrt(n) - np.sqrt(state["n"])) / lr
        z = z + grad - sigma * theta
        shrunk = soft_threshold(z, t[0] * np.asarray(l1)) if np.any(l1) else z
        return -shrunk * lr / (self.beta + np.sqrt(n)), {"z": z, "n": n, "t": t}


def make_first_order(name: str, momentum: float = 0.0, nesterov: bool = False):
    if name == "sgd":
        return SGD(momentum, nesterov)
    if name == "adagrad":
        return Adagrad()
    if name == "adam":
        return Adam()
    if name == "ftrl":
        return FTRL()
    raise ValueError(f"unknown first-order optimizer {name!r}")
