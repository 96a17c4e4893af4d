"""Execution strategies on the shared local[2] session: resident workers vs one job per step."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from conftest import gradspark_cached_rdds
from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.fit import plan
from gradspark.fit.plan import (LBFGS_RESIDENT_BYTES_PER_WORKER,
                                LBFGS_SPARSE_RESIDENT_BYTES_PER_WORKER,
                                RESIDENT_BYTES_PER_WORKER, DataPlan, choose)
from gradspark.engine.resident_workers import Tree
from gradspark.engine.rounds import WorkersFailed
from gradspark.testing.faults import ENVIRONMENT_VARIABLE
from gradspark.rpc import running_servers

LOOPBACK = dict(parameterServerHost="127.0.0.1")


def coefficients(model):
    return np.r_[model._coefficient_matrix.ravel(), model._intercepts]


def fit_both(estimator_cls, df, **params):
    job = estimator_cls(executionStrategy="jobPerStep", engine="python", **params).fit(df)
    resident = estimator_cls(executionStrategy="resident", **LOOPBACK, **params).fit(df)
    return job, resident


def no_resident_leftovers(spark):
    threads = [t.name for t in threading.enumerate() if t.name.startswith("gradspark-")]
    assert threads == [] and running_servers() == [] and gradspark_cached_rdds(spark) == []


@pytest.mark.parametrize("family, label", [("binomial", "label"), ("multinomial", "multi")])
def test_resident_lbfgs_equals_job_per_step(spark, classification_data, family, label):
    df, *_ = classification_data
    job, resident = fit_both(SGDLogisticRegression, df, family=family, labelCol=label,
                             weightCol="weight", regParam=0.01, elasticNetParam=0.3)
    # Two partitions, two workers: the same sums in the same order.
    np.testing.assert_allclose(coefficients(resident), coefficients(job), rtol=1e-12, atol=1e-14)
    assert resident.summary.objectiveHistory == pytest.approx(job.summary.objectiveHistory,
                                                              rel=1e-12)
    extra = resident.summary.extra
    assert extra["executionStrategy"] == "resident" and extra["engine"] == "python"
    # One round per gradient evaluation, nothing else.
    assert extra["rounds"] == extra["gradientEvaluations"] == job.summary.extra[
        "gradientEvaluations"]
    no_resident_leftovers(spark)


def test_resident_mini_batches_match_with_more_partitions_than_workers(spark, classification_data):
    df, *_ = classification_data
    four = df.repartition(4)  # two workers hold two input partitions each
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.3, maxIter=25, tol=0.0,
                  weightCol="weight")
    job, resident = fit_both(SGDLogisticRegression, four, **params)
    assert resident.summary.extra["residentWorkers"] == 2
    # Each input partition samples from (seed, step, partition) wherever it lives.
    np.testing.assert_allclose(coefficients(resident), coefficients(job), rtol=1e-10)
    np.testing.assert_allclose(resident.summary.objectiveHistory,
                               job.summary.objectiveHistory, rtol=1e-10)


def test_resident_huber_scale_and_squared_error(regression_data):
    df, X, y, w = regression_data
    huber_job, huber_res = fit_both(SGDLinearRegression, df, loss="huber", labelCol="noisy",
                                    regParam=0.05)
    np.testing.assert_allclose(coefficients(huber_res), coefficients(huber_job), rtol=1e-10)
    assert huber_res.scale == pytest.approx(huber_job.scale, rel=1e-10)
    # Weighted least squares against the closed form.
    ols = SGDLinearRegression(executionStrategy="resident", weightCol="weight", tol=1e-12,
                              maxIter=200, **LOOPBACK).fit(df)
    A = np.c_[X, np.ones(len(X))]
    expected = np.linalg.solve(A.T @ (w[:, None] * A), A.T @ (w * y))
    np.testing.assert_allclose(np.r_[ols.coefficients.toArray(), ols.intercept], expected,
                               rtol=1e-6)


def test_a_stage_that_fails_for_good_fails_the_fit_cleanly(spark, classification_data,
                                                          monkeypatch):
    df, *_ = classification_data
    # local[2] gives a task one attempt (spark.task.maxFailures is 1 in local mode).
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, json.dumps({"fail_partition": 0, "fail_step": 0}))
    estimator = SGDLogisticRegression(executionStrategy="resident", optimizer="sgd", maxIter=5,
                                      **LOOPBACK)
    with pytest.raises(WorkersFailed, match="injected failure"):
        estimator.fit(df)
    no_resident_leftovers(spark)


def test_auto_keeps_small_data_resident_and_large_data_in_jobs():
    def choice(jvm_data, bytes_per_worker, resident_busy=False, sparse=False, **params):
        kernels, strategy, _ = choose(SGDLogisticRegression(**params),
                                      DataPlan("jvm" if jvm_data else "python"),
                                      bytes_per_worker, resident_busy, sparse)
        return kernels, strategy

    assert choice(False, 1e6) == ("python", "resident")
    assert choice(True, 2.0 * RESIDENT_BYTES_PER_WORKER, optimizer="adam") == ("jvm",
                                                                               "jobPerStep")
    assert choice(False, 2.0 * RESIDENT_BYTES_PER_WORKER) == ("python", "jobPerStep")
    # L-BFGS's few passes do not repay loading big blocks into resident workers.
    assert choice(True, 1e6)[1] == "resident"
    assert choice(True, 1e9)[0] == "jvm"
    # ... unless they are sparse: a JVM step also pays for every partition's result.
    assert choice(True, 1.5 * LBFGS_RESIDENT_BYTES_PER_WORKER)[1] == "jobPerStep"
    assert choice(True, 1.5 * LBFGS_RESIDENT_BYTES_PER_WORKER, sparse=True)[1] == "resident"
    assert choice(True, 1.5 * LBFGS_SPARSE_RESIDENT_BYTES_PER_WORKER,
                  sparse=True) == ("jvm", "jobPerStep")
    assert choice(True, 1e6, optimizer="adam")[1] == "resident"
    assert choice(False, 1e6)[1] == "resident"
    assert choice(True, 1e6, resident_busy=True, optimizer="adam")[1] == "jobPerStep"
    assert choice(True, 1.0, engine="jvm")[1] == "jobPerStep"
    assert choice(True, 1.0, mode="async", optimizer="adam")[1] == "async"
    # Params only resident workers implement keep them resident, whatever the size.
    assert choice(True, 1e12, optimizer="sgd", localSteps=4)[1] == "resident"


def test_auto_choices_on_the_test_data(classification_data):
    df, *_ = classification_data
    adam = SGDLogisticRegression(optimizer="adam", maxIter=5, **LOOPBACK).fit(df)
    assert adam.summary.extra["executionStrategy"] == "resident"
    lbfgs = SGDLogisticRegression(maxIter=5, **LOOPBACK).fit(df)
    assert lbfgs.summary.extra["executionStrategy"] == "resident"  # small blocks
    assert lbfgs.summary.extra["jvmData"] is True  # validated and blockified in the JVM


def test_auto_reads_the_density_of_the_cached_blocks(classification_data, sparse_data,
                                                     monkeypatch):
    # Past the dense L-BFGS limit (lowered to zero here) dense blocks run in jobs and
    # sparse ones stay resident: the plan takes the density from the data pass.
    monkeypatch.setattr(plan, "LBFGS_RESIDENT_BYTES_PER_WORKER", 0)
    dense, *_ = classification_data
    sparse, *_ = sparse_data
    assert dense.first()["features"].__class__.__name__ == "DenseVector"
    assert sparse.first()["features"].__class__.__name__ == "SparseVector"
    fits = {name: SGDLogisticRegression(maxIter=3, **LOOPBACK).fit(df).summary.extra
            for name, df in (("dense", dense), ("sparse", sparse))}
    assert fits["dense"]["executionStrategy"] == "jobPerStep"
    assert fits["dense"]["engine"] == "jvm"
    assert fits["sparse"]["executionStrategy"] == "resident"


def test_jvm_kernels_cannot_be_resident(classification_data):
    df, *_ = classification_data
    with pytest.raises(ValueError, match="resident"):
        SGDLogisticRegression(engine="jvm", executionStrategy="resident").fit(df)


def test_tree_topology_equals_star(spark, classification_data):
    df, *_ = classification_data
    params = dict(family="multinomial", labelCol="multi", regParam=0.01)
    star = SGDLogisticRegression(executionStrategy="resident", **LOOPBACK, **params).fit(df)
    tree = SGDLogisticRegression(executionStrategy="resident", aggregationTopology="tree",
                                 **LOOPBACK, **params).fit(df)
    # The same sums, added in the tree's order instead of the driver's.
    np.testing.assert_allclose(coefficients(tree), coefficients(star), rtol=1e-12, atol=1e-14)
    extra = tree.summary.extra
    assert extra["aggregationTopology"] == "tree" and extra["treeDepth"] == 2
    assert extra["rounds"] == extra["gradientEvaluations"]
    no_resident_leftovers(spark)


def test_tree_shape_follows_aggregation_depth():
    tree = Tree.for_depth(9, 2)  # fan-in 3, like treeAggregate's scale
    assert tree.fan_in == 3
    assert [tree.children(w) for w in range(4)] == [[1, 2, 3], [4, 5, 6], [7, 8], []]
    assert [tree.parent(w) for w in (1, 3, 4, 8)] == [0, 0, 1, 2]
    assert tree.depth() == 3
    # Every worker but the root has exactly one parent that lists it as a child.
    for n, depth in [(1, 2), (2, 2), (7, 3), (16, 2)]:
        t = Tree.for_depth(n, depth)
        assert sorted(c for w in range(n) for c in t.children(w)) == list(range(1, n))


def test_jvm_kernels_are_bit_reproducible_across_partitions(spark, classification_data):
    # treeAggregate merges in task-completion order; the JVM engine merges in
    # partition order, so repeated fits over many partitions agree to the bit.
    df, *_ = classification_data
    many = df.repartition(7).cache()
    params = dict(engine="jvm", weightCol="weight", optimizer="adam", stepSize=0.05,
                  maxIter=15, tol=0.0)
    first = SGDLogisticRegression(**params).fit(many)
    again = SGDLogisticRegression(**params).fit(many)
    np.testing.assert_array_equal(coefficients(again), coefficients(first))
    assert again.summary.objectiveHistory == first.summary.objectiveHistory
    assert first.summary.extra["engine"] == "jvm"
    many.unpersist()


def test_concurrent_fits_never_wait_on_each_others_slots(spark, classification_data):
    # Two resident stages that each got one of local[2]'s slots would wait for each
    # other forever; one resident stage runs at a time, auto falls back to jobs.
    df, *_ = classification_data
    params = dict(weightCol="weight", regParam=0.01, workerTimeout=60, **LOOPBACK)
    reference = SGDLogisticRegression(**params).fit(df)
    models, errors = {}, []

    def fit(name, **extra):
        try:
            models[name] = SGDLogisticRegression(**params, **extra).fit(df)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fit, args=(f"auto{i}",)) for i in range(2)]
    threads += [threading.Thread(target=fit, args=(f"resident{i}",),
                                 kwargs=dict(executionStrategy="resident")) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == [] and len(models) == 4
    for model in models.values():
        np.testing.assert_allclose(coefficients(model), coefficients(reference), rtol=1e-9)
    assert {models[f"resident{i}"].summary.extra["executionStrategy"] for i in range(2)} == \
        {"resident"}
    no_resident_leftovers(spark)


def test_a_resident_stage_that_fails_to_start_releases_its_lock(spark, classification_data):
    """A bad parameterServerHost fails the first fit inside the engine's start, after it
    took the context's resident-stage lock; the next resident fit must not wait for ever
    (before, it did: __exit__ never ran, so nothing released the lock)."""
    import threading

    df = classification_data[0]
    with pytest.raises(OSError):
        SGDLogisticRegression(executionStrategy="resident", maxIter=3,
                              parameterServerHost="256.256.256.256").fit(df)
    done: dict = {}
    fit = threading.Thread(target=lambda: done.setdefault("model", SGDLogisticRegression(
        executionStrategy="resident", maxIter=3).fit(df)), daemon=True)
    fit.start()
    fit.join(120)
    assert "model" in done, "the second resident fit waited on a lock nobody held"
