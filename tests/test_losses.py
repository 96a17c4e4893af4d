"""Each loss's derivatives against central finite differences of its own value."""

import numpy as np
import pytest

from gradspark.losses import (
    BinaryLogisticLoss, HingeLoss, HuberLoss, MultinomialLogisticLoss, SquaredLoss,
)

g = np.random.default_rng(0)
N = 40


def _numeric_grad(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        grad[i] = (f(x + e) - f(x - e)) / (2 * h)
    return grad


CASES = [
    (BinaryLogisticLoss(), 1, (g.random(N) < 0.5).astype(float)),
    (MultinomialLogisticLoss(), 4, g.integers(0, 4, N).astype(float)),
    (SquaredLoss(label_shift=1.5, label_scale=2.0), 1, g.normal(size=N)),
    (HuberLoss(epsilon=1.35), 1, g.normal(scale=3.0, size=N)),
    # keep margins away from the hinge's kink so the derivative exists
    (HingeLoss(), 1, (g.random(N) < 0.5).astype(float)),
]


@pytest.mark.parametrize("loss,k,labels", CASES, ids=lambda c: getattr(c, "name", ""))
def test_margin_gradient_matches_finite_differences(loss, k, labels):
    margins = g.normal(scale=2.0, size=(N, k))
    if isinstance(loss, HingeLoss):
        s = 2 * labels - 1
        margins[np.abs(1 - s * margins[:, 0]) < 0.05, 0] += 0.2
    weights = g.uniform(0.1, 2.0, size=N)
    aux = loss.initial_aux() * 1.3
    value = loss.evaluate(margins, labels, weights, aux)
    numeric = _numeric_grad(lambda m: loss.evaluate(m, labels, weights, aux).loss_sum, margins)
    np.testing.assert_allclose(value.d_margins, numeric, rtol=1e-5, atol=1e-7)
    if loss.num_aux:
        numeric_aux = _numeric_grad(lambda a: loss.evaluate(margins, labels, weights, a).loss_sum, aux)
        np.testing.assert_allclose(value.d_aux, numeric_aux, rtol=1e-5, atol=1e-7)


def test_logistic_loss_is_stable_for_huge_margins():
    loss = BinaryLogisticLoss()
    margins = np.array([[800.0], [-800.0]])
    value = loss.evaluate(margins, np.array([0.0, 1.0]), np.ones(2), np.zeros(0))
    assert np.isclose(value.loss_sum, 1600.0)
    np.testing.assert_allclose(value.d_margins[:, 0], [1.0, -1.0])


def test_logistic_loss_and_sigmoid_match_scipy_over_the_whole_margin_range():
    """Against scipy.special's log_expit and expit (independent implementations), to a
    few ulps, from margins where exp overflows to where the sigmoid underflows."""
    from scipy.special import expit, log_expit

    m = np.concatenate([np.linspace(-745.0, 745.0, 2001), [0.0, -0.0, 1e-300, -1e-300]])
    y = (np.arange(m.size) % 2).astype(float)
    w = np.linspace(0.5, 2.0, m.size)
    value = BinaryLogisticLoss().evaluate(m[:, None], y, w, np.zeros(0))
    per_row = -log_expit(-m) - y * m  # log(1 + exp(m)) - y m
    np.testing.assert_allclose(value.loss_sum, w @ per_row, rtol=1e-14)
    np.testing.assert_allclose(value.d_margins[:, 0], w * (expit(m) - y), rtol=1e-14,
                               atol=1e-300)


def test_multinomial_loss_equals_cross_entropy():
    loss = MultinomialLogisticLoss()
    margins = g.normal(size=(5, 3))
    labels = np.array([0, 1, 2, 1, 0], dtype=float)
    p = np.exp(margins) / np.exp(margins).sum(1, keepdims=True)
    expected = -np.log(p[np.arange(5), labels.astype(int)]).sum()
    assert np.isclose(loss.evaluate(margins, labels, np.ones(5), np.zeros(0)).loss_sum, expected)
