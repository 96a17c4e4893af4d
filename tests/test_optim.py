"""Optimizers on problems with closed-form solutions (no Spark)."""

import numpy as np
import pytest

from gradspark.optim import SGD, Adagrad, Adam, learning_rate, minimize_lbfgs, soft_threshold

g = np.random.default_rng(3)
# Orthonormal design: the lasso solution is soft_threshold(Q^T y, lam) exactly.
Q, _ = np.linalg.qr(g.normal(size=(50, 6)))
Y = Q @ np.array([3.0, -2.0, 0.05, 0.0, 1.0, -0.02]) + 0.01 * g.normal(size=50)
LAM = 0.1


def lasso_smooth(theta):
    r = Q @ theta - Y
    return 0.5 * r @ r, Q.T @ r


LASSO_SOLUTION = soft_threshold(Q.T @ Y, LAM)


def test_lbfgs_with_l1_matches_soft_threshold_solution():
    result = minimize_lbfgs(lasso_smooth, np.zeros(6), np.full(6, LAM), np.full(6, -np.inf),
                            max_iter=200, tol=1e-14)
    np.testing.assert_allclose(result.theta, LASSO_SOLUTION, atol=1e-7)
    assert (result.theta == 0).sum() >= 2  # the split gives exact zeros
    assert result.history[0] > result.history[-1]


def test_lbfgs_respects_lower_bounds():
    # minimize (x - (-3))^2 subject to x >= 1  ->  x = 1
    result = minimize_lbfgs(lambda x: ((x[0] + 3) ** 2, np.array([2 * (x[0] + 3)])),
                            np.array([5.0]), np.zeros(1), np.array([1.0]), 50, 1e-12)
    assert np.isclose(result.theta[0], 1.0)


@pytest.mark.parametrize("optimizer,lr,steps,atol", [
    (SGD(), 1.0, 200, 1e-9),
    (SGD(momentum=0.5), 0.5, 300, 1e-8),
    (SGD(momentum=0.5, nesterov=True), 0.5, 300, 1e-8),
    (Adagrad(), 1.0, 3000, 1e-4),
    (Adam(), 0.05, 3000, 2e-3),
])
def test_proximal_first_order_optimizers_solve_the_lasso(optimizer, lr, steps, atol):
    theta = np.zeros(6)
    state = optimizer.init(theta)
    for _ in range(steps):
        _, grad = lasso_smooth(theta)
        theta, state = optimizer.update(theta, grad, state, lr, np.full(6, LAM))
    np.testing.assert_allclose(theta, LASSO_SOLUTION, atol=atol)


def test_optimizer_state_is_not_mutated():
    opt = Adam()
    state = opt.init(np.zeros(3))
    before = {k: v.copy() for k, v in state.items()}
    opt.update(np.zeros(3), np.ones(3), state, 0.1, np.zeros(3))
    for k in before:
        np.testing.assert_array_equal(state[k], before[k])


def test_schedules():
    assert learning_rate("constant", 0.5, 10, 100) == 0.5
    assert learning_rate("inverse_time", 1.0, 3, 100) == 0.25
    assert learning_rate("inverse_sqrt", 1.0, 3, 100) == 0.5
    assert learning_rate("cosine", 1.0, 0, 100) == 1.0
    assert abs(learning_rate("cosine", 1.0, 100, 100)) < 1e-12
    assert np.isclose(learning_rate("cosine", 1.0, 50, 100), 0.5)
    with pytest.raises(ValueError):
        learning_rate("exponential", 1.0, 0, 10)
