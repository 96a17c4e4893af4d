"""Sharded parameter servers (parameterServers=N): key ranges, the per-shard update rule,
and whole fits against the single driver-hosted server.

The reference is the single server's async mode with ``maxStaleness=0`` (which
test_async.py checks against sync mode and MLlib): with bulk-synchronous
shards every coordinate sees the same arithmetic, so the weights must agree to
1e-9 -- also after a killed shard was restored from a checkpoint.
"""

from __future__ import annotations

import numpy as np
import pytest

from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.losses import BinaryLogisticLoss, HuberLoss, MultinomialLogisticLoss
from gradspark.optim import make_first_order
from gradspark.trainer.shards import ShardLayout, join_states, slice_state
from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.shard_server import ShardRule


def objective(loss, d, k, fit_intercept, space="raw", seed=0):
    g = np.random.default_rng(seed)
    std = np.abs(g.normal(size=d)) + 0.1
    std[3] = 0.0  # a constant feature: zero coefficient in every space
    obj = LinearObjective(engine=None, loss=loss, num_features=d, num_outputs=k,
                          fit_intercept=fit_intercept, features_mean=g.normal(size=d),
                          features_std=std, l2=np.zeros(0), l1=np.zeros(0), space=space)
    obj.l2 = np.r_[g.uniform(0, 0.1, d * k), np.zeros(obj.size - d * k)]
    obj.l1 = np.r_[g.uniform(0, 0.01, d * k), np.zeros(obj.size - d * k)]
    return obj


@pytest.mark.parametrize("loss,k,fit_intercept", [
    (BinaryLogisticLoss(), 1, True), (MultinomialLogisticLoss(), 3, True),
    (HuberLoss(), 1, True), (HuberLoss(), 1, False), (BinaryLogisticLoss(), 1, False),
])
@pytest.mark.parametrize("shards", [1, 3])
def test_shard_rules_are_the_objective_cut_into_key_ranges(loss, k, fit_intercept, shards):
    d = 10
    obj = objective(loss, d, k, fit_intercept)
    layout = ShardLayout.even(d, k, obj.size, obj.map_size, shards)
    rules = [ShardRule.of(obj, layout, s) for s in range(shards)]
    g = np.random.default_rng(1)
    theta = g.normal(size=obj.size)
    sums = g.normal(size=obj.map_size)
    weight = 37.5
    whole = obj.smooth_from_sums(theta, _sums(sums, d, k, weight))[1]
    thetas = [theta[slice(*layout.theta_range(s))] for s in range(shards)]
    pieces = [sums[slice(*layout.map_range(s))] for s in range(shards)]
    assert [r.map_size for r in rules] == [p.size for p in pieces]
    assert np.array_equal(np.concatenate([r.map_slice(t) for r, t in zip(rules, thetas)]),
                          obj.map_vector(theta))
    assert np.array_equal(np.concatenate([r.gradient(t, p, weight)
                                          for r, t, p in zip(rules, thetas, pieces)]), whole)
    penalty = 0.5 * obj.l2 @ theta**2 + obj.l1_penalty(theta)
    assert np.isclose(sum(r.penalty(t) for r, t in zip(rules, thetas)), penalty, rtol=1e-14)


def _sums(vector, d, k, weight):
    from gradspark.engine.sums import GradientSums

    return GradientSums.from_vector(vector, d, k, 1.0, weight, 10)


def test_centered_parameters_are_refused_with_the_remedy():
    obj = objective(BinaryLogisticLoss(), 10, 1, True, space="standardized")
    layout = ShardLayout.even(10, 1, obj.size, obj.map_size, 2)
    with pytest.raises(ValueError, match="parameterSpace='raw'"):
        ShardRule.of(obj, layout, 0)


def test_keys_split_into_local_ranges_and_states_join_back():
    layout = ShardLayout.even(10, 2, 10 * 2 + 2, 10 * 2 + 2, 3)  # bounds 0, 3, 7, 10
    assert layout.bounds == (0, 3, 7, 10)
    keys = np.array([0, 5, 6, 13, 14, 21], dtype=np.uint32)
    pieces = layout.split_keys(keys)
    assert [p[1].tolist() for p in pieces] == [[0, 5], [0, 7], [0, 7]]
    assert np.array_equal(np.concatenate([keys[p[0]] for p in pieces]), keys)
    assert layout.hosts(2) == {0: [0, 2], 1: [1]}
    adam = make_first_order("adam")
    state = {"m": np.arange(22.0), "v": np.arange(22.0) * 2, "t": np.array([4.0])}
    parts = [slice_state(state, 22, *layout.theta_range(s)) for s in range(3)]
    joined = join_states(parts, adam.init(np.zeros(22)), 22)
    assert all(np.array_equal(joined[n], state[n]) for n in state)


@pytest.mark.parametrize("extra", [dict(parameterServers=2),
                                   dict(mode="async", maxStaleness=0, parameterServers=1)],
                         ids=["sync-2-shards", "bsp-1-shard"])
def test_sharded_fit_equals_the_single_server(hashed_rare, extra):
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.1, maxIter=10,
                  regParam=1e-3, seed=7)
    single = SGDLogisticRegression(**params, mode="async", maxStaleness=0).fit(hashed_rare)
    sharded = SGDLogisticRegression(**params, **extra).fit(hashed_rare)
    np.testing.assert_allclose(sharded.coefficients.toArray(), single.coefficients.toArray(),
                               rtol=0, atol=1e-9)
    assert abs(sharded.intercept - single.intercept) < 1e-9
    np.testing.assert_allclose(sharded.summary.objectiveHistory,
                               single.summary.objectiveHistory, rtol=1e-9)
    extra_ = sharded.summary.extra
    assert extra_["executionStrategy"] == "sharded"
    assert len(extra_["shardBytesReceived"]) == extra.get("parameterServers")
    assert all(b > 0 for b in extra_["shardBytesReceived"])
    # the driver moves clock messages only: far less than the shards' weights and gradients
    assert extra_["driverStepBytesReceivedPerStep"] < 0.5 * extra_["shardBytesReceivedPerStep"]
    # reported as the driver's server reports them: the coordinator's and every shard's
    assert [extra_[k] for k in ("framesRejected", "gradientsRejected",
                                "connectionsRefused")] == [0, 0, 0]


def test_a_sharded_checkpoint_resumes_on_any_number_of_servers(hashed_rare, tmp_path):
    """Shards hand their state to the driver, which writes the single server's checkpoint
    format: 6 steps on 2 shards, then 4 more on 1 shard and without shards (plain sync
    mode), equal the 10 steps of one uninterrupted fit."""
    # (the last iterate: sharded servers do not average, sync mode would by default)
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.1, regParam=1e-3,
                  seed=7, tol=0.0, iterateAveraging="none")
    whole = SGDLogisticRegression(**params, maxIter=10, parameterServers=2).fit(hashed_rare)
    for i, servers in enumerate((1, 0)):
        directory = str(tmp_path / f"run{i}")
        SGDLogisticRegression(**params, maxIter=6, parameterServers=2,
                              checkpointDir=directory).fit(hashed_rare)
        resumed = SGDLogisticRegression(**params, maxIter=10, parameterServers=servers,
                                        checkpointDir=directory).fit(hashed_rare)
        assert resumed.summary.extra["resumedFromStep"] == 6
        np.testing.assert_allclose(resumed.coefficients.toArray(),
                                   whole.coefficients.toArray(), rtol=0, atol=1e-9)
        np.testing.assert_allclose(resumed.summary.objectiveHistory,
                                   whole.summary.objectiveHistory, rtol=1e-9)
    # A sync resume that averages (the default) counts the shards' 6 steps as done and
    # averages the iterates after step min(1 / 0.1, 10 // 2) = 5 that it takes: 7..10.
    directory, auto = str(tmp_path / "averaged"), dict(params, iterateAveraging="auto")
    SGDLogisticRegression(**auto, maxIter=6, parameterServers=2,
                          checkpointDir=directory).fit(hashed_rare)
    averaged = SGDLogisticRegression(**auto, maxIter=10,
                                     checkpointDir=directory).fit(hashed_rare)
    assert averaged.summary.extra["resumedFromStep"] == 6
    assert averaged.summary.extra["averagedSteps"] == 4


def test_sharded_regression_with_dense_features_and_huber(spark):
    """Dense blocks pull whole slices; Huber's scale lives on the last shard."""
    g = np.random.default_rng(4)
    X = g.normal(size=(400, 5))
    y = X @ [1.0, -2.0, 0.5, 0.0, 3.0] + 1.0 + 0.1 * g.standard_t(3, size=400)
    from pyspark.ml.linalg import Vectors

    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(2).cache()
    params = dict(optimizer="sgd", stepSize=0.1, maxIter=15, loss="huber", seed=3,
                  parameterSpace="raw")
    single = SGDLinearRegression(**params, mode="async", maxStaleness=0).fit(df)
    sharded = SGDLinearRegression(**params, parameterServers=2).fit(df)
    np.testing.assert_allclose(sharded.coefficients.toArray(), single.coefficients.toArray(),
                               rtol=0, atol=1e-9)
    assert abs(sharded.scale - single.scale) < 1e-9


def test_bad_shard_params_fail_before_training(hashed_rare):
    with pytest.raises(ValueError, match="first-order"):
        SGDLogisticRegression(parameterServers=2).fit(hashed_rare)
    with pytest.raises(ValueError, match="parameterServers must be >= 0"):
        SGDLogisticRegression(optimizer="sgd", parameterServers=-1).fit(hashed_rare)
    with pytest.raises(ValueError, match="parameterSpace='raw'"):
        SGDLogisticRegression(optimizer="sgd", parameterServers=2,
                              parameterSpace="standardized").fit(hashed_rare)


@pytest.mark.local_cluster("sharded")
def test_killed_shard_is_restored_from_its_checkpoint_on_local_cluster(local_cluster):
    result = local_cluster("sharded")
    assert result["strategy"] == "sharded"
    np.testing.assert_allclose(result["sharded"], result["single"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(result["sharded_history"], result["single_history"], rtol=1e-9)
    # Spark retried the barrier stage once; the shards resumed from step 5's checkpoint
    # and the fit ended where the uninterrupted one did.
    assert result["restarts"] >= 1
    np.testing.assert_allclose(result["killed"], result["sharded"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(result["killed_history"], result["sharded_history"], rtol=1e-9)
    assert all(b > 0 for b in result["shard_bytes"])
    # SSP over shards: trains, within its bound.
    assert result["stale_final"] < result["stale_initial"]
    assert result["stale_max_staleness"] <= 2
