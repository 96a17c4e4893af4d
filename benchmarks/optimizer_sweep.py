"""gradspark's first-order optimizers on CTR data in numpy, without Spark: the sweep behind
the default step sizes.

Draws one :mod:`gradspark.testing.ctr_data` set (and a held-out set of a quarter as
many rows, another seed), computes MLlib's objective (``standardization=False``) and
its optimum with scipy's L-BFGS-B, then drives the shipped optimizers
(:func:`gradspark.optim.make_first_order`, lazy, wrapped in
:class:`gradspark.optim.TailAverage` after the first pass, as a sync fit does with
``iterateAveraging="auto"``) with Bernoulli mini-batches of ``--fractions``. Per
optimizer and step size it prints the relative gap to the optimum after each pass,
for the last iterate and for the tail average, and the held-out log-loss and AUC
of the final model (the average where there is one).

``--variance-reduced`` adds two variance-reduced references (``docs/wide_sparse.md``,
"SVRG"): mini-batch SAGA, which gradspark does not ship, and SVRG as a fused
evaluation would run it, each with per-coordinate steps ``lr / (diag(H) bound)``,
the bound ``0.25 * sum_i x_ij^2 / n + l2_j`` of the logistic Hessian's diagonal.
SAGA keeps each row's last residual; its table (the memory) starts at the first
point, which costs one pass. SVRG takes a full gradient at a snapshot, then a pass
of corrected mini-batch steps, then a new snapshot and two passes. Both are charged
5 passes in all: an SVRG batch is charged one read (two margins from it), where
the shipped ``optimizer="svrg"`` evaluates it twice.

    .venv/bin/python benchmarks/optimizer_sweep.py --rows 100000 --bits 18 --reg 1e-3
    .venv/bin/python benchmarks/optimizer_sweep.py --generator tail --steps adam:0.003,0.01
    .venv/bin/python benchmarks/optimizer_sweep.py --rows 400000 --bits 20 --fractions 0.01 \
        --variance-reduced 0.01,0.02
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from gradspark.optim import DEFAULT_STEP_SIZES, TailAverage, averaged_weights, \
    make_first_order
from gradspark.testing.ctr_data import ctr_arrays


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--generator", default="ctr", choices=["ctr", "tail"])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--bits", type=int, default=18)
    parser.add_argument("--reg", type=float, default=1e-4, help="regParam (L2)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--steps", nargs="+",
                        default=[f"{k}:{v}" for k, v in DEFAULT_STEP_SIZES.items()
                                 if k != "sgd"],
                        help="optimizer:step[,step...] (default: the default step sizes)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--variance-reduced", default=None, metavar="STEP[,STEP...]",
                        help="also run numpy SAGA and SVRG (not shipped) at these steps")
    return parser.parse_args(argv)


def load(generator: str, rows: int, width: int, seed: int):
    indices, values, indptr, labels = ctr_arrays(generator, rows, width, seed)
    return sp.csr_matrix((values, indices, indptr), shape=(rows, width)), labels


def logistic_objective(X, y, l2: np.ndarray):
    """MLlib's objective on (coefficients, intercept) and its gradient, on all rows or a
    subset: mean log-loss plus ``l2 / 2 * theta^2`` (0 for the intercept)."""
    def value_and_grad(theta: np.ndarray, rows: Optional[np.ndarray] = None):
        Xb, yb = (X, y) if rows is None else (X[rows], y[rows])
        margin = Xb @ theta[:-1] + theta[-1]
        loss = np.mean(np.logaddexp(0, margin) - yb * margin)
        residual = (1 / (1 + np.exp(-margin)) - yb) / max(len(yb), 1)
        grad = np.concatenate([Xb.T @ residual, [residual.sum()]])
        return loss + 0.5 * l2 @ theta**2, grad + l2 * theta
    return value_and_grad


def held_out(X, y, theta: np.ndarray) -> Dict[str, float]:
    margin = X @ theta[:-1] + theta[-1]
    order = np.argsort(margin)
    ranks = np.empty(len(y))
    ranks[order] = np.arange(1, len(y) + 1)
    positives = y.sum()
    auc = (ranks[y == 1].sum() - positives * (positives + 1) / 2) / (
        positives * (len(y) - positives))
    return {"logLoss": float(np.mean(np.logaddexp(0, margin) - y * margin)),
            "auc": float(auc)}


def _sigmoid(margin: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-margin))


def _hessian_diagonal_bound(X, l2: np.ndarray) -> np.ndarray:
    """``0.25 * mean_i x_ij^2 + l2_j`` per coefficient, 0.25 (+ 0) for the intercept:
    the logistic loss's curvature is at most 1/4."""
    sums = np.asarray(X.multiply(X).sum(axis=0)).ravel()
    return 0.25 * np.concatenate([sums, [X.shape[0]]]) / X.shape[0] + l2


def saga(X, y, f, theta0, l2, lr, fraction, passes):
    """Mini-batch SAGA; the memory of every row's residual starts at ``theta0`` (one
    pass), then ``passes - 1`` passes of steps. Returns the gap-per-pass inputs."""
    n, steps_per_pass = X.shape[0], round(1 / fraction)
    step_sizes = lr / _hessian_diagonal_bound(X, l2)
    theta = theta0.copy()
    residual = _sigmoid(X @ theta[:-1] + theta[-1]) - y
    average = np.concatenate([X.T @ residual, [residual.sum()]]) / n
    rng, values = np.random.default_rng(1), [f(theta)[0]]
    for step in range((passes - 1) * steps_per_pass):
        rows = np.flatnonzero(rng.random(n) < fraction)
        Xb = X[rows]
        fresh = _sigmoid(Xb @ theta[:-1] + theta[-1]) - y[rows]
        change = np.concatenate([Xb.T @ (fresh - residual[rows]),
                                 [(fresh - residual[rows]).sum()]])
        grad = change / max(len(rows), 1) + average + l2 * theta
        average, residual[rows] = average + change / n, fresh
        theta = theta - step_sizes * grad
        if (step + 1) % steps_per_pass == 0:
            values.append(f(theta)[0])
    return theta, values


def svrg(X, y, f, theta0, l2, lr, fraction, inner_passes=(1, 2)):
    """Mini-batch SVRG: per outer round a full gradient at a snapshot (one pass), then
    ``inner_passes[k]`` passes of corrected steps."""
    n, steps_per_pass = X.shape[0], round(1 / fraction)
    step_sizes = lr / _hessian_diagonal_bound(X, l2)
    theta, rng, values = theta0.copy(), np.random.default_rng(1), []
    for passes in inner_passes:
        snapshot, full = theta.copy(), f(theta)[1]
        values.append(f(theta)[0])
        for step in range(passes * steps_per_pass):
            rows = np.flatnonzero(rng.random(n) < fraction)
            Xb = X[rows]
            change = (_sigmoid(Xb @ theta[:-1] + theta[-1])
                      - _sigmoid(Xb @ snapshot[:-1] + snapshot[-1]))
            grad = (np.concatenate([Xb.T @ change, [change.sum()]]) / max(len(rows), 1)
                    + full + l2 * (theta - snapshot))
            theta = theta - step_sizes * grad
            if (step + 1) % steps_per_pass == 0:
                values.append(f(theta)[0])
    return theta, values


def run_variance_reduced(args, X, y, f, theta0, l2, target, X_test, y_test):
    results = []
    for fraction in args.fractions:
        for lr in map(float, args.variance_reduced.split(",")):
            for name, method in (("saga", saga), ("svrg", svrg)):
                theta, values = (method(X, y, f, theta0, l2, lr, fraction, args.passes)
                                 if name == "saga" else
                                 method(X, y, f, theta0, l2, lr, fraction))
                gaps = [v / target - 1 for v in values]
                row = {"optimizer": name, "stepSize": lr, "fraction": fraction,
                       "gaps": gaps, **held_out(X_test, y_test, theta)}
                results.append(row)
                print(f"  {name:8s} step {lr:<6g} fraction {fraction:<5g} gap after passes "
                      + " ".join(f"{i + 1}:{g:+.4f}" for i, g in enumerate(gaps))
                      + f" | held-out log-loss {row['logLoss']:.4f} AUC {row['auc']:.4f}",
                      flush=True)
    return results


def run(args: argparse.Namespace) -> List[Dict[str, object]]:
    width = 1 << args.bits
    X, y = load(args.generator, args.rows, width, args.seed)
    X_test, y_test = load(args.generator, args.rows // 4, width, args.seed + 1000)
    l2 = np.concatenate([np.full(width, args.reg), [0.0]])
    f = logistic_objective(X, y, l2)
    theta0 = np.zeros(width + 1)
    theta0[-1] = math.log(y.mean() / (1 - y.mean()))  # the intercept's log-odds, as a fit
    optimum = minimize(f, theta0, jac=True, method="L-BFGS-B",
                       options=dict(maxiter=1000, gtol=1e-10, ftol=1e-14))
    target = optimum.fun
    print(f"{args.generator}: {args.rows:,} rows x 2^{args.bits}, regParam {args.reg}: "
          f"L-BFGS {target:.6f} ({optimum.nit} iterations); held-out log-loss "
          "{logLoss:.4f} AUC {auc:.4f}".format(**held_out(X_test, y_test, optimum.x)),
          flush=True)
    results = []
    if args.variance_reduced:
        results += run_variance_reduced(args, X, y, f, theta0, l2, target, X_test, y_test)
    for fraction in args.fractions:
        per_pass = round(1 / fraction)
        steps = args.passes * per_pass
        for spec in args.steps:
            name, _, sizes = spec.partition(":")
            for lr in map(float, sizes.split(",")):
                inner = make_first_order(name, l2=l2)
                optimizer = inner if name == "ftrl" else TailAverage(
                    inner, min(per_pass, steps // 2))
                theta, state = theta0.copy(), optimizer.init(theta0)
                rng = np.random.default_rng(1)
                last, averaged = [], []
                for step in range(steps):
                    rows = np.flatnonzero(rng.random(args.rows) < fraction)
                    _, grad = f(theta, rows)
                    theta, state = optimizer.update(theta, grad, state, lr, 0.0)
                    if (step + 1) % per_pass == 0:
                        last.append(f(theta)[0] / target - 1)
                        averaged.append(f(averaged_weights(theta, state))[0] / target - 1)
                model = averaged_weights(theta, state)
                row = {"optimizer": name, "stepSize": lr, "fraction": fraction,
                       "last": last, "averaged": averaged, **held_out(X_test, y_test, model)}
                results.append(row)
                print(f"  {name:8s} step {lr:<6g} fraction {fraction:<5g} gap per pass: last "
                      + " ".join(f"{g:+.4f}" for g in last) + " | averaged "
                      + " ".join(f"{g:+.4f}" for g in averaged)
                      + f" | held-out log-loss {row['logLoss']:.4f} AUC {row['auc']:.4f}",
                      flush=True)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
