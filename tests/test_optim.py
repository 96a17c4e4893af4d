"""Optimizers on problems with closed-form solutions (no Spark)."""

import numpy as np
import pytest

from gradspark.optim import (
    FTRL, SGD, Adagrad, Adam, learning_rate, minimize_lbfgs, soft_threshold,
)

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
    (FTRL(), 1.0, 3000, 1e-4),
])
def test_proximal_first_order_optimizers_solve_the_lasso(optimizer, lr, steps, atol):
    theta = np.zeros(6)
    state = optimizer.init(theta)
    for _ in range(steps):
        _, grad = lasso_smooth(theta)
        theta, state = optimizer.update(theta, grad, state, lr, np.full(6, LAM))
    np.testing.assert_allclose(theta, LASSO_SOLUTION, atol=atol)


def ftrl_reference(grad_fn, theta0, lr, beta, lambda1, steps):
    """Algorithm 1 of McMahan et al. (2013), per coordinate, in plain Python loops, with
    lambda1 growing as t * l1 and z started at -(beta / lr) * theta0."""
    d = len(theta0)
    w = list(theta0)
    z = [-(beta / lr) * w[i] for i in range(d)]
    n = [0.0] * d
    for t in range(1, steps + 1):
        g = grad_fn(np.array(w))
        for i in range(d):
            sigma = ((n[i] + g[i] ** 2) ** 0.5 - n[i] ** 0.5) / lr
            z[i] += g[i] - sigma * w[i]
            n[i] += g[i] ** 2
        for i in range(d):
            threshold = t * lambda1[i]
            if abs(z[i]) <= threshold:
                w[i] = 0.0
            else:
                w[i] = -(z[i] - np.sign(z[i]) * threshold) / ((beta + n[i] ** 0.5) / lr)
    return np.array(w)


def test_ftrl_matches_the_papers_per_coordinate_algorithm_and_gives_true_zeros():
    theta0 = np.array([0.5, 0.0, -0.2, 0.0, 0.0, 0.3])
    lambda1 = np.array([LAM] * 5 + [0.0])  # the last one unpenalized, like an intercept
    opt = FTRL(beta=0.5)
    theta, state = theta0.copy(), opt.init(theta0)
    for _ in range(40):
        theta, state = opt.update(theta, lasso_smooth(theta)[1], state, 0.3, lambda1)
    expected = ftrl_reference(lambda x: lasso_smooth(x)[1], theta0, 0.3, 0.5, lambda1, 40)
    np.testing.assert_allclose(theta, expected, rtol=1e-12, atol=1e-15)
    assert np.sum(theta == 0.0) >= 2  # L1 in closed form: exact zeros


def test_ftrl_leaves_untouched_coordinates_alone():
    opt = FTRL()
    theta = np.array([0.7, -0.4, 0.0])
    state = opt.init(theta)
    for _ in range(5):
        new, state = opt.update(theta, np.array([0.3, 0.0, 0.0]), state, 0.1, np.zeros(3))
        assert new[1] == theta[1] and new[2] == 0.0 and new[0] != theta[0]
        theta = new


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
