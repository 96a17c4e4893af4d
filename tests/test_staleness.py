"""Stale-gradient policies of async mode (staleGradientPolicy): scale (DynSGD) and delay
compensation (DC-ASGD), against numpy transcriptions of the papers' updates on a scripted
two-worker trace, and bit-identical to plain SSP when nothing is stale."""

from __future__ import annotations

import numpy as np
import pytest

from gradspark import SGDLogisticRegression
from gradspark.losses import SquaredLoss
from gradspark.trainer.asynchronous import AsyncConfig, AsyncTraining
from gradspark.trainer.objective import LinearObjective

D, LR, L2, LAM = 3, 0.1, 0.1, 0.5


def training(policy, adaptive=False):
    objective = LinearObjective(engine=None, loss=SquaredLoss(), num_features=D,
                                num_outputs=1, fit_intercept=False,
                                features_mean=np.zeros(D), features_std=np.ones(D),
                                l2=np.full(D, L2), l1=np.zeros(D), space="raw")
    config = AsyncConfig(optimizer="sgd", max_iter=10, tol=0.0, step_size=LR,
                         max_staleness=-1, stale_policy=policy, delay_compensation=LAM,
                         adaptive_compensation=adaptive)
    theta0 = np.array([0.5, -1.0, 2.0])
    return AsyncTraining(objective, theta0, config, 2), theta0


# Each push: (xtg over D features, gsum, weight sum); the map vector is xtg then gsum.
PUSHES = [(np.array([1.0, -2.0, 0.5]), 3.0, 4.0), (np.array([-0.5, 1.5, 2.0]), 1.0, 2.0)]


def push(t, worker, version):
    xtg, gsum, weight = PUSHES[worker]
    t.on_push(worker, 0, version, 1.0, weight, 5, np.r_[xtg, gsum])


def stale_trace(policy, adaptive=False):
    """Both workers pull version 0; worker 0's push is applied, then worker 1's, one
    update stale."""
    t, theta0 = training(policy, adaptive)
    t.on_pull(0)
    t.on_pull(1)
    push(t, 0, 0)
    push(t, 1, 0)
    return t, theta0


def reference(policy, adaptive=False):
    """The papers' updates, by hand."""
    (x0, _, w0), (x1, _, w1) = PUSHES
    theta0 = np.array([0.5, -1.0, 2.0])
    g0, g1 = x0 / w0, x1 / w1
    theta1 = theta0 - LR * (g0 + L2 * theta0)
    lr, g = LR, g1
    if policy == "scale":
        lr = LR / (1 + 1)
    elif policy == "compensate":
        lam = LAM
        if adaptive:
            mean_square = 0.95 * (0.05 * g0**2) + 0.05 * g1**2
            lam = LAM / np.sqrt(mean_square + 1e-12)
        g = g1 + lam * g1 * g1 * (theta1 - theta0)
    return theta1 - lr * (g + L2 * theta1)


@pytest.mark.parametrize("policy,adaptive", [("none", False), ("scale", False),
                                             ("compensate", False), ("compensate", True)])
def test_a_stale_push_gets_the_papers_update(policy, adaptive):
    t, _ = stale_trace(policy, adaptive)
    np.testing.assert_allclose(t.theta, reference(policy, adaptive), rtol=1e-14, atol=0)
    metrics = t.result(None).metrics
    assert metrics["updateDelayHistogram"] == {"0": 1, "1": 1}
    if policy == "compensate":
        assert metrics["compensatedUpdates"] == 1 and metrics["meanCompensationRatio"] > 0
    if policy == "scale":
        assert metrics["meanLearningRateScale"] == 0.5


def test_compensation_moves_the_update_unlike_plain_ssp():
    assert not np.allclose(reference("compensate"), reference("none"), rtol=1e-6)


@pytest.mark.parametrize("policy", ["scale", "compensate"])
def test_without_staleness_every_policy_is_plain_ssp_bit_for_bit(policy):
    """Worker 1 pulls after worker 0's update: nothing is stale."""
    runs = {}
    for name in ("none", policy):
        t, _ = training(name)
        t.on_pull(0)
        push(t, 0, 0)
        t.on_pull(1)
        push(t, 1, 1)
        runs[name] = t.theta
    assert np.array_equal(runs["none"], runs[policy])


def test_policies_on_a_spark_fit(spark, hashed_rare):
    """Async SSP with each policy trains (ends below its start) and reports what it did;
    with maxStaleness=0 (bulk-synchronous, nothing stale) compensation changes nothing."""
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.1, maxIter=15,
                  regParam=1e-3, seed=7, tol=0.0, mode="async")
    bsp = SGDLogisticRegression(**params, maxStaleness=0).fit(hashed_rare)
    bsp_compensated = SGDLogisticRegression(**params, maxStaleness=0,
                                            staleGradientPolicy="compensate").fit(hashed_rare)
    assert np.array_equal(bsp.coefficients.toArray(), bsp_compensated.coefficients.toArray())
    for policy in ("scale", "compensate"):
        extra = SGDLogisticRegression(**params, maxStaleness=2, staleGradientPolicy=policy
                                      ).fit(hashed_rare).summary.extra
        assert extra["finalObjective"] < extra["initialObjective"]
        assert extra["staleGradientPolicy"] == policy
        assert sum(extra["updateDelayHistogram"].values()) == extra["updatesApplied"]


def test_policies_outside_async_mode_are_refused(hashed_rare):
    with pytest.raises(ValueError, match="acts on the updates of async mode"):
        SGDLogisticRegression(optimizer="sgd", staleGradientPolicy="scale").fit(hashed_rare)
    with pytest.raises(ValueError, match="staleGradientPolicy"):
        SGDLogisticRegression(optimizer="sgd", mode="async", staleGradientPolicy="bogus")
    with pytest.raises(ValueError, match="delayCompensation must be >= 0"):
        SGDLogisticRegression(optimizer="sgd", mode="async", delayCompensation=-1.0
                              ).fit(hashed_rare)
