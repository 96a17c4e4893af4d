"""Weighted least squares from the Gram matrix: MLlib's ``WeightedLeastSquares``.

MLlib's ``LinearRegression`` with ``solver="normal"`` (and ``"auto"`` below 4,096
features) solves the normal equations on the driver from one aggregation of the
weighted Gram matrix, and this module does the same arithmetic:

- features scaled by their weighted *population* std, the label by its population std
  (not the sample std the L-BFGS path uses, so the two solvers differ slightly when
  regularized, in MLlib and here);
- ``regParam / std(label)`` split into L1 and L2 by ``elasticNetParam``; the L2 part on
  the scaled Gram's diagonal (divided by ``std**2`` with ``standardization=False``);
- with an intercept, the system is augmented by the features' means and a 1;
- no L1: a Cholesky solve, whose inverse's diagonal gives ``diagInvAtWA`` for the
  coefficients' standard errors; a singular system falls back to the minimum-norm
  least-squares solution, without standard errors (MLlib: its quasi-Newton solver);
- L1: cyclic coordinate descent on the same quadratic, to convergence (MLlib runs
  OWL-QN to ``tol``; both reach the same optimum), without standard errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import scipy.linalg

from gradspark.data.gram import GramSums

MAX_NUM_FEATURES = 4096  # WeightedLeastSquares.MAX_NUM_FEATURES
_SWEEPS = 100_000  # coordinate descent: a cap far beyond what convergence needs
_SWEEP_TOL = 1e-13  # largest coordinate change, relative to the largest coordinate


@dataclass(frozen=True)
class NormalSolution:
    coefficients: np.ndarray  # in the input's units
    intercept: float
    # diag((A^T W A)^-1) of the coefficients, then the intercept; None with L1 or when
    # the system was singular (MLlib's Array(0.0))
    diag_inv_atwa: Optional[np.ndarray]
    objective_history: List[float]
    solver: str  # "cholesky", "least-squares" or "coordinate-descent"


def solve_normal_equations(sums: GramSums, fit_intercept: bool, reg_param: float,
                           elastic_net: float, standardization: bool) -> NormalSolution:
    """MLlib's ``WeightedLeastSquares.fit`` (standardized label) on ``sums``."""
    d, w = sums.num_features, sums.weight_sum
    b_bar, bb_bar = sums.b / w, sums.bb / w
    raw_b_std = sums.label_population_std()
    if raw_b_std == 0.0:
        if fit_intercept or b_bar == 0.0:  # a constant label: the intercept says it all
            return NormalSolution(np.zeros(d), b_bar, None, [0.0], "cholesky")
        if reg_param > 0.0:
            raise ValueError("The standard deviation of the label is zero. Model cannot be "
                             "regularized when labels are standardized.")
    b_std = abs(b_bar) if raw_b_std == 0.0 else raw_b_std
    a_std = sums.population_std()
    scale = np.divide(1.0, a_std, out=np.zeros(d), where=a_std > 0)
    a_bar = sums.a / w * scale
    ab_bar = sums.ab / w * scale / b_std
    aa_bar = sums.aa / w * np.outer(scale, scale)

    effective = reg_param / b_std
    l1, l2 = elastic_net * effective, (1.0 - elastic_net) * effective
    if standardization:
        aa_bar[np.diag_indices(d)] += l2
    else:
        aa_bar[np.diag_indices(d)] += np.divide(l2, a_std ** 2, out=np.zeros(d),
                                                where=a_std > 0)
    if fit_intercept:
        aa = np.block([[aa_bar, a_bar[:, None]], [a_bar[None, :], np.ones((1, 1))]])
        ab = np.append(ab_bar, b_bar / b_std)
    else:
        aa, ab = aa_bar, ab_bar
    bb = bb_bar / b_std ** 2

    diagonal = None
    if l1 > 0.0:
        l1_each = np.full(d, l1) if standardization else np.divide(
            l1, a_std, out=np.zeros(d), where=a_std > 0)
        if fit_intercept:
            l1_each = np.append(l1_each, 0.0)
        x, history = _coordinate_descent(aa, ab, bb, l1_each)
        solver = "coordinate-descent"
    else:
        try:
            factor = scipy.linalg.cho_factor(aa, lower=False, check_finite=True)
            x = scipy.linalg.cho_solve(factor, ab)
            inverse_diagonal = np.diag(scipy.linalg.cho_solve(factor, np.eye(len(ab))))
            multiplier = np.append(a_std ** 2, 1.0) if fit_intercept else a_std ** 2
            diagonal = inverse_diagonal / (w * multiplier)
            solver = "cholesky"
        except np.linalg.LinAlgError:
            x = np.linalg.lstsq(aa, ab, rcond=None)[0]
            solver = "least-squares"
        history = [0.0]
    coefficients = x[:d] * b_std * scale
    intercept = float(x[d] * b_std) if fit_intercept else 0.0
    return NormalSolution(coefficients, intercept, diagonal, history, solver)


def _objective(aa: np.ndarray, ab: np.ndarray, bb: float, l1: np.ndarray,
               x: np.ndarray) -> float:
    return float(0.5 * (bb - 2.0 * ab @ x + x @ aa @ x) + l1 @ np.abs(x))


def _coordinate_descent(aa: np.ndarray, ab: np.ndarray, bb: float, l1: np.ndarray):
    """argmin 1/2 x'Ax - b'x + sum l1_i |x_i| by cyclic coordinate descent (convex, so
    it converges to the optimum); the objective after each sweep."""
    x = np.zeros(len(ab))
    gradient = -ab.copy()  # A x - b, kept up to date
    history = [_objective(aa, ab, bb, l1, x)]
    for _ in range(_SWEEPS):
        largest_change = 0.0
        for i in range(len(x)):
            if aa[i, i] <= 0.0:
                continue
            rest = gradient[i] - aa[i, i] * x[i]  # (A x - b)_i without x_i's own term
            new = -np.sign(rest) * max(abs(rest) - l1[i], 0.0) / aa[i, i]
            if new != x[i]:
                gradient += aa[:, i] * (new - x[i])
                largest_change = max(largest_change, abs(new - x[i]))
                x[i] = new
        history.append(_objective(aa, ab, bb, l1, x))
        if largest_change <= _SWEEP_TOL * max(1.0, np.abs(x).max()):
            break
    return x, history
