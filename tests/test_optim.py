"""Optimizers on problems with closed-form solutions (no Spark)."""

import numpy as np
import pytest

from gradspark.optim import (
    FTRL, SGD, SVRG, Adagrad, Adam, learning_rate, minimize_lbfgs, soft_threshold,
)
from gradspark.optim.variance_reduction import data_passes, snapshots_before, updates_within

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


def _ridge_logistic(seed: int = 4):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(400, 30)) * rng.uniform(0.1, 5.0, size=30)  # badly scaled
    b = (rng.random(400) < 1 / (1 + np.exp(-A @ rng.normal(size=30) * 0.3))).astype(float)
    calls = []

    def smooth(theta):
        calls.append(theta.copy())
        m = A @ theta
        value = np.mean(np.logaddexp(0.0, m) - b * m) + 0.005 * theta @ theta
        return float(value), A.T @ (1 / (1 + np.exp(-m)) - b) / len(b) + 0.01 * theta

    return smooth, calls


def test_unbounded_lbfgs_reaches_scipys_optimum_within_its_budget():
    """Without L1 or bounds the iterations are gradspark's own L-BFGS (two-loop
    recursion, strong-Wolfe line search): the optimum scipy's L-BFGS-B finds, MLlib's
    stopping rule, maxIter, and at most max(4 maxIter, 50) evaluations."""
    from scipy.optimize import minimize

    smooth, calls = _ridge_logistic()
    free = np.full(30, -np.inf)
    result = minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), free, 500, 1e-13)
    evaluations = len(calls)
    reference = minimize(smooth, np.zeros(30), jac=True, method="L-BFGS-B",
                         options={"maxiter": 5000, "ftol": 0.0, "gtol": 1e-12})
    assert result.converged and result.message == "MLlib's convergence test (tol)"
    assert np.linalg.norm(smooth(result.theta)[1]) < 1e-6  # stationary
    np.testing.assert_allclose(result.theta, reference.x, atol=2e-6)
    assert result.history[-1] <= reference.fun + 1e-12
    assert result.history == sorted(result.history, reverse=True)  # each iterate descends
    assert evaluations <= 1.1 * result.iterations + 2  # mostly one pass per iteration

    calls.clear()
    short = minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), free, 7, 0.0)
    assert short.iterations == 7 and len(short.history) == 8 and not short.converged
    own = len(calls)
    calls.clear()
    minimize(smooth, np.zeros(30), jac=True, method="L-BFGS-B",
             options={"maxiter": 7, "ftol": 0.0, "gtol": 0.0})
    assert own <= len(calls)  # no more passes than L-BFGS-B for the same iterations
    again = minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), free, 7, 0.0)
    assert again.theta.tobytes() == short.theta.tobytes()  # deterministic: resumes replay


def test_unbounded_lbfgs_evaluates_each_point_once_and_steps_to_an_evaluated_point():
    """The line search forms and evaluates each trial point once, and every iterate is
    one of the points it evaluated, bit for bit (no point formed or evaluated again)."""
    smooth, calls = _ridge_logistic(seed=11)
    iterates = []
    result = minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), np.full(30, -np.inf), 40,
                            0.0, on_iteration=lambda i, f, theta: iterates.append(theta.copy()))
    evaluated = [theta.tobytes() for theta in calls]
    assert len(set(evaluated)) == len(evaluated)  # never the same point twice
    assert result.iterations == 40 and len(iterates) == 41
    assert all(theta.tobytes() in evaluated for theta in iterates)
    assert result.theta.tobytes() == iterates[-1].tobytes()
    # the values in the history are those of the evaluations at the iterates
    for theta, value in zip(iterates, result.history):
        assert value == smooth(theta)[0]


def test_diagonal_scaling_is_lbfgs_on_the_rescaled_parameters():
    """``scaling=D`` is L-BFGS on ``u = theta / sqrt(D)``: the same iterates (mapped back)
    and values as the unscaled L-BFGS on ``u``, and on this badly scaled problem it
    reaches the optimum in fewer iterations, with ``D`` the inverse of the Hessian's
    diagonal bound."""
    from scipy.optimize import minimize

    smooth, calls = _ridge_logistic(seed=6)
    free = np.full(30, -np.inf)
    probe = np.eye(30)
    # the bound 0.25 mean(x_j^2) + 0.01, from the problem's Hessian at 0 (curvature 1/4)
    h = np.array([(smooth(1e-3 * e)[1] - smooth(-1e-3 * e)[1])[j] / 2e-3
                  for j, e in enumerate(probe)])
    scaling = h.min() / h
    root = np.sqrt(scaling)
    scaled_iterates, plain_iterates = [], []
    scaled = minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), free, 12, 0.0,
                            on_iteration=lambda i, f, t: scaled_iterates.append(t.copy()),
                            scaling=scaling)

    def in_u(u):
        value, grad = smooth(root * u)
        return value, root * grad

    plain = minimize_lbfgs(in_u, np.zeros(30), np.zeros(30), free, 12, 0.0,
                           on_iteration=lambda i, f, u: plain_iterates.append(root * u))
    np.testing.assert_allclose(scaled.history, plain.history, rtol=1e-12)
    np.testing.assert_allclose(scaled_iterates, plain_iterates, rtol=1e-8, atol=1e-12)

    optimum = minimize(smooth, np.zeros(30), jac=True, method="L-BFGS-B",
                       options={"maxiter": 5000, "ftol": 0.0, "gtol": 1e-12}).fun
    target = optimum + 1e-8 * abs(optimum)
    unscaled = minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), free, 200, 0.0)
    first = [next(i for i, v in enumerate(r.history) if v <= target)
             for r in (minimize_lbfgs(smooth, np.zeros(30), np.zeros(30), free, 200, 0.0,
                                      scaling=scaling), unscaled)]
    assert 2 * first[0] < first[1], first
    with pytest.raises(ValueError, match="without L1 terms or bounds"):
        minimize_lbfgs(smooth, np.zeros(30), np.full(30, 0.01), free, 3, 0.0, scaling=scaling)


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


def ftrl_reference(grad_fn, theta0, lr, beta, lambda1, steps, lambda2=None):
    """Algorithm 1 of McMahan et al. (2013), per coordinate, in plain Python loops, with
    the penalties growing as t * lambda (one mean gradient per step) and z started at
    -(beta / lr) * theta0; ``lambda2`` is the paper's closed-form L2 (none by default)."""
    d = len(theta0)
    lambda2 = [0.0] * d if lambda2 is None else lambda2
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
                w[i] = -(z[i] - np.sign(z[i]) * threshold) / (
                    (beta + n[i] ** 0.5) / lr + t * lambda2[i])
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


# -- lazy updates on sparse gradients ---------------------------------------------------

def sparse_data_gradients(steps, d, seed=0):
    """Per step, a data gradient touching a random third of the coordinates (the last one,
    an unpenalized 'intercept', every step)."""
    rng = np.random.default_rng(seed)
    grads = rng.normal(size=(steps, d)) * (rng.random((steps, d)) < 1 / 3)
    grads[:, -1] = rng.normal(size=steps)
    return grads


def lazy_reference(kind, data_grads, theta0, l2, l1, lr, beta1=0.9, beta2=0.999, eps=None):
    """The lazy rules of gradspark.optim.first_order, coordinate by coordinate in plain
    Python: a touched coordinate takes the textbook step with the full gradient; an
    untouched one decays by lr * l2 * s (and shrinks by lr * s * l1), s its last step
    size per unit lr, 0 before its first touch."""
    eps = (1e-8 if kind == "adam" else 1e-10) if eps is None else eps
    d = len(theta0)
    w = [float(x) for x in theta0]
    m, v, s = [0.0] * d, [0.0] * d, [0.0] * d
    for t, data in enumerate(data_grads, start=1):
        for j in range(d):
            if data[j] == 0.0:
                x = max(0.0, 1.0 - lr * l2[j] * s[j]) * w[j]
                w[j] = float(np.sign(x)) * max(abs(x) - lr * s[j] * l1[j], 0.0)
                continue
            g = data[j] + l2[j] * w[j]
            if kind == "adam":
                m[j] = beta1 * m[j] + (1 - beta1) * g
                v[j] = beta2 * v[j] + (1 - beta2) * g * g
                direction = m[j] / (1 - beta1 ** t)
                s[j] = 1.0 / ((v[j] / (1 - beta2 ** t)) ** 0.5 + eps)
            else:
                v[j] += g * g
                direction, s[j] = g, 1.0 / (v[j] ** 0.5 + eps)
            x = w[j] - lr * s[j] * direction
            w[j] = float(np.sign(x)) * max(abs(x) - lr * s[j] * l1[j], 0.0)
    return np.array(w)


@pytest.mark.parametrize("kind,make", [("adam", Adam), ("adagrad", Adagrad)])
@pytest.mark.parametrize("l1", [0.0, 0.01])
def test_lazy_optimizers_follow_the_per_coordinate_rules(kind, make, l1):
    d, steps, lr = 7, 60, 0.05
    l2 = np.array([0.3, 0.1, 0.5, 0.0, 0.2, 0.4, 0.0])
    l1s = np.full(d, l1)
    l1s[-1] = 0.0
    data = sparse_data_gradients(steps, d)
    theta0 = np.linspace(-0.5, 0.5, d)
    opt = make(l2=l2)
    theta, state = theta0.copy(), opt.init(theta0)
    for g in data:
        theta, state = opt.update(theta, g + l2 * theta, state, lr, l1s)
    expected = lazy_reference(kind, data, theta0, l2, l1s, lr)
    np.testing.assert_allclose(theta, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("make", [Adam, Adagrad])
def test_lazy_rules_are_the_dense_ones_on_dense_gradients(make):
    """Every coordinate touched every step: the lazy rule is the dense rule, bit for bit
    (FTRL's lazy L2 is the paper's closed form, another formula: its own test below)."""
    rng = np.random.default_rng(5)
    l2 = np.full(6, 0.2)
    dense, lazy = make(), make(l2=l2)
    a = b = np.zeros(6)
    sa, sb = dense.init(a), lazy.init(b)
    for _ in range(30):
        grad = Q.T @ (Q @ a - Y) + rng.normal(scale=0.1, size=6) + l2 * a
        a, sa = dense.update(a, grad, sa, 0.05, np.full(6, 0.01))
        b, sb = lazy.update(b, grad, sb, 0.05, np.full(6, 0.01))
        assert np.array_equal(a, b)


def test_lazy_adam_leaves_a_rare_feature_where_its_sighting_put_it():
    """Seen once: dense Adam's momentum keeps pushing the weight for many steps (the
    reason for lazy rules); lazy Adam moves it once and only the L2 decay follows."""
    l2 = np.array([1e-3, 0.0])
    grads = [np.array([1.0, 0.5])] + [np.array([0.0, 0.5])] * 40
    dense, lazy = Adam(), Adam(l2=l2)
    a = b = np.zeros(2)
    sa, sb = dense.init(a), lazy.init(b)
    lazy_path = []
    for g in grads:
        a, sa = dense.update(a, g + l2 * a, sa, 0.01, np.zeros(2))
        b, sb = lazy.update(b, g + l2 * b, sb, 0.01, np.zeros(2))
        lazy_path.append(b[0])
    assert lazy_path[0] == pytest.approx(-0.01)  # Adam's first step is lr in size
    assert all(abs(y) <= abs(x) for x, y in zip(lazy_path, lazy_path[1:]))  # decay only
    assert abs(lazy_path[-1]) > 0.9 * 0.01
    assert a[0] < -5 * 0.01  # dense: 40 more steps of the sighting's momentum


def test_lazy_ftrl_is_the_papers_lambda2_and_solves_the_elastic_net():
    l2 = np.array([0.5] * 5 + [0.0])
    l1 = np.array([LAM] * 5 + [0.0])
    theta0 = np.array([0.5, 0.0, -0.2, 0.0, 0.0, 0.3])
    opt = FTRL(beta=0.5, l2=l2)
    theta, state = theta0.copy(), opt.init(theta0)
    for _ in range(40):
        theta, state = opt.update(theta, lasso_smooth(theta)[1] + l2 * theta, state, 0.3, l1)
    expected = ftrl_reference(lambda x: lasso_smooth(x)[1], theta0, 0.3, 0.5, l1, 40, l2)
    np.testing.assert_allclose(theta, expected, rtol=1e-12, atol=1e-15)
    for _ in range(4000):
        theta, state = opt.update(theta, lasso_smooth(theta)[1] + l2 * theta, state, 0.3, l1)
    # orthonormal design: the elastic net's solution is soft_threshold(Q^T y, l1) / (1 + l2)
    np.testing.assert_allclose(theta, soft_threshold(Q.T @ Y, l1) / (1 + l2), atol=1e-4)


def test_svrg_takes_its_snapshots_at_0_p_3p_5p_and_counts_its_passes():
    svrg = SVRG(np.ones(2), updates_per_pass=4)
    state, due = svrg.init(np.zeros(2)), []
    for t in range(30):
        due.append(svrg.snapshot_due(state))
        _, state = svrg.update(np.zeros(2), np.zeros(2), state, 0.1, 0.0)
    assert [t for t, d in enumerate(due) if d] == [0, 4, 12, 20, 28]
    for updates in range(1, 30):
        assert snapshots_before(updates, 4) == sum(due[:updates])
        assert data_passes(updates, 4, 0.25) == pytest.approx(
            sum(1.0 if d else 0.5 for d in due[:updates]))
    assert updates_within(5, 0.25) == 8  # snapshot, 3 batches, snapshot, 3 batches: 5 passes


def test_svrg_converges_to_the_least_squares_solution_with_a_constant_step():
    """Mini-batch SVRG through the same step_gradient the sync trainer calls (a full
    gradient at each snapshot, the batch's gradient at theta and at the snapshot
    otherwise) reaches the ridge solution from numpy's solver; constant-step SGD on the
    same batches stalls at its noise floor."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)) * np.array([1.0, 3.0, 0.2, 1.0, 5.0, 0.5])
    y = X @ rng.normal(size=6) + rng.normal(size=400)
    l2 = 0.01
    solution = np.linalg.solve(X.T @ X / len(y) + l2 * np.eye(6), X.T @ y / len(y))

    def grad(w, rows):
        return X[rows].T @ (X[rows] @ w - y[rows]) / len(rows) + l2 * w

    def batch(step):
        return np.flatnonzero(np.random.default_rng(step).random(len(y)) < 0.1)

    def evaluate(w, step):  # as LinearObjective.smooth: every row when step is None
        return 0.0, grad(w, np.arange(len(y)) if step is None else batch(step))

    svrg = SVRG(np.mean(X**2, axis=0) + l2, updates_per_pass=10)
    w, state = np.zeros(6), svrg.init(np.zeros(6))
    sgd = np.zeros(6)
    for step in range(600):
        _, g, state = svrg.step_gradient(w, state, evaluate, step)
        w, state = svrg.update(w, g, state, 0.3, 0.0)
        sgd = sgd - 0.3 * svrg.inverse_curvature * grad(sgd, batch(step))
    np.testing.assert_allclose(w, solution, atol=1e-8)
    assert np.max(np.abs(sgd - solution)) > 1e-3
