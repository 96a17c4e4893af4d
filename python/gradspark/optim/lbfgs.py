"""Full-batch L-BFGS on the driver, via scipy's L-BFGS-B, stopped by MLlib's rule.

``tol`` means what it means in MLlib, whose L-BFGS is Breeze's with
``defaultConvergenceCheck(maxIter, tol)`` (:class:`BreezeConvergence`): stop when the
objective has improved by at most ``tol * |f(theta0)|`` over the last 20 iterations, or
when the (pseudo-/projected) gradient's norm is at most ``max(tol * f, 1e-8)``. scipy's
own tests (``ftol``, ``pgtol``) are switched off, so the same ``tol`` stops every sync
path (JVM job-per-step, resident workers, Connect frames) at the same point.

L1 terms are handled exactly, without subgradients, by the standard split
``theta_j = u_j - v_j`` with ``u_j, v_j >= 0``: the penalty becomes linear,
``l1_j * (u_j + v_j)``, and the problem smooth with bound constraints, which
L-BFGS-B solves (the same optimum as MLlib's OWL-QN). Only coordinates with
an L1 weight are split.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Tuple

import numpy as np
from scipy.optimize import minimize

SmoothFn = Callable[[np.ndarray], Tuple[float, np.ndarray]]


class BreezeConvergence:
    """Breeze's ``FirstOrderMinimizer.defaultConvergenceCheck`` (relative, fvalMemory 20),
    which MLlib's LogisticRegression, LinearRegression and LinearSVC use."""

    MEMORY = 20

    def __init__(self, tol: float, initial_value: float) -> None:
        self.tol = tol
        self.initial = abs(initial_value)
        # Breeze starts the window with +inf, so no stop before MEMORY values are in it
        self.window: List[float] = [float("inf")]

    def __call__(self, value: float, gradient_norm: Optional[float]) -> bool:
        self.window = (self.window + [value])[-self.MEMORY:]
        values_converged = abs(value - max(self.window)) <= self.tol * self.initial
        gradient_converged = (gradient_norm is not None
                              and gradient_norm <= max(self.tol * value, 1e-8))
        return values_converged or gradient_converged


def stationarity_gradient(theta: np.ndarray, grad: np.ndarray, l1: np.ndarray,
                          lower: np.ndarray, upper: Optional[np.ndarray]) -> np.ndarray:
    """The gradient Breeze measures: OWL-QN's pseudo-gradient with L1 (the smallest
    subgradient), and with bounds the projected gradient (zero where a bound blocks)."""
    g = grad + l1 * np.sign(theta)
    at_zero = (theta == 0) & (l1 > 0)
    g[at_zero] = np.where(grad[at_zero] + l1[at_zero] < 0, grad[at_zero] + l1[at_zero],
                          np.where(grad[at_zero] - l1[at_zero] > 0,
                                   grad[at_zero] - l1[at_zero], 0.0))
    g[(theta <= lower) & (g > 0)] = 0.0
    if upper is not None:
        g[(theta >= upper) & (g < 0)] = 0.0
    return g


class LBFGSResult(NamedTuple):
    theta: np.ndarray
    history: List[float]  # objective (with L1) at the start and after each iteration
    iterations: int
    converged: bool
    message: str


def minimize_lbfgs(
    smooth: SmoothFn,
    theta0: np.ndarray,
    l1: np.ndarray,
    lower: np.ndarray,
    max_iter: int,
    tol: float,
    on_iteration: Callable[[int, float, np.ndarray], None] = lambda i, f, theta: None,
    memory: int = 10,
    upper: Optional[np.ndarray] = None,
) -> LBFGSResult:
    """Minimize ``smooth(theta) + l1 @ |theta|`` within ``lower <= theta <= upper``.

    L1 weights and finite bounds on the same coordinate are not supported (the split
    coordinates carry their own bounds); callers refuse that combination."""
    n = len(theta0)
    split = np.flatnonzero(l1 > 0)
    weights = l1[split]

    def unpack(z):
        theta = z[:n].copy()
        theta[split] -= z[n:]
        return theta

    last: dict = {}

    def fun(z):
        # scipy re-evaluates the starting point; one distributed pass is enough.
        if "z" in last and np.array_equal(last["z"], z):
            return last["value"], last["grad"].copy()
        value, grad = smooth(unpack(z))
        last["smooth_grad"] = np.asarray(grad, dtype=np.float64).copy()
        value += float(weights @ (z[split] + z[n:]))
        if len(split):
            g = np.empty_like(z)
            g[:n] = grad
            g[split] += weights
            g[n:] = -grad[split] + weights
        else:
            g = np.asarray(grad, dtype=np.float64)
        last.update(z=z.copy(), value=value, grad=g.copy())
        return value, g

    z0 = np.concatenate([theta0, np.zeros(len(split))])
    z0[split] = np.maximum(theta0[split], 0.0)
    z0[n:] = np.maximum(-theta0[split], 0.0)
    lower_z = np.concatenate([lower, np.zeros(len(split))])
    lower_z[split] = 0.0
    upper_z = np.full(len(z0), np.inf)
    if upper is not None:
        upper_z[:n] = upper
    # scipy turns bounds into per-coordinate Python tuples and back (about 4 s per
    # million coordinates): give it none when none is finite, the common L2-only case.
    bounded = np.flatnonzero(np.isfinite(lower_z) | np.isfinite(upper_z))
    bounds = None
    if len(bounded):
        z0 = np.clip(z0, lower_z, upper_z)
        bounds = [(None, None)] * len(z0)
        for j, lo, hi in zip(bounded.tolist(), lower_z[bounded].tolist(),
                             upper_z[bounded].tolist()):
            bounds[j] = (lo if np.isfinite(lo) else None, hi if np.isfinite(hi) else None)

    history: List[float] = []
    stopped: List[bool] = []
    # Without L1 or bounds the stationarity gradient is the gradient: skip its five
    # d-sized passes per iteration (0.3-0.4 s of a 20-iteration fit at 2^20 features).
    plain = upper is None and len(split) == 0 and not np.isfinite(lower).any()

    def callback(intermediate_result):
        history.append(float(intermediate_result.fun))
        theta = unpack(intermediate_result.x)
        on_iteration(len(history) - 1, history[-1], theta)
        gradient_norm = None
        if np.array_equal(last.get("z"), intermediate_result.x):  # the accepted point's
            gradient_norm = float(np.linalg.norm(
                last["smooth_grad"] if plain
                else stationarity_gradient(theta, last["smooth_grad"], l1, lower, upper)))
        if converged_by(history[-1], gradient_norm):
            stopped.append(True)
            raise StopIteration

    first, _ = fun(z0)
    history.append(first)
    converged_by = BreezeConvergence(tol, first)
    on_iteration(0, first, unpack(z0))
    if max_iter == 0:
        return LBFGSResult(unpack(z0), history, 0, False, "maxIter=0")
    result = minimize(
        fun, z0, jac=True, method="L-BFGS-B", bounds=bounds, callback=callback,
        options={"maxiter": max_iter, "maxfun": max(4 * max_iter, 50), "ftol": 0.0,
                 "gtol": 0.0, "maxcor": memory},
    )
    iterations = len(history) - 1
    converged = bool(stopped) or (bool(result.success) and iterations < max_iter)
    message = "MLlib's convergence test (tol)" if stopped else str(result.message)
    return LBFGSResult(unpack(result.x), history, iterations, converged, message)
