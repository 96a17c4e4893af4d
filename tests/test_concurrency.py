"""Parallel tuning and parallel fits on one SparkSession give the sequential results.

No shared mutable state, no broadcast or port collisions, no cross-talk between
parameter servers: each concurrent fit must equal the same fit run alone.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

from conftest import gradspark_cached_rdds
from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.rpc.server import running_servers

LOOPBACK = dict(parameterServerHost="127.0.0.1")
MODES = {
    # Sync: under parallel fits one resident stage runs at a time and the others
    # fall back to one job per step: equal up to the order of additions.
    "sync": (dict(regParam=0.0, maxIter=60, workerTimeout=60), 1e-9),
    # Async with bounded staleness 0: bulk-synchronous, so bit-for-bit deterministic;
    # four parameter servers at once, each on its own port and secret.
    "async": (dict(mode="async", maxStaleness=0, optimizer="adam", stepSize=0.05,
                   maxIter=40, **LOOPBACK), 0.0),
}


def cross_validate(df, parallelism: int, params: dict):
    estimator = SGDLogisticRegression(weightCol="weight", **params)
    grid = ParamGridBuilder().addGrid(estimator.regParam, [0.001, 0.01, 0.1, 0.5]).build()
    cv = CrossValidator(estimator=estimator, estimatorParamMaps=grid, numFolds=2, seed=3,
                        evaluator=BinaryClassificationEvaluator(), parallelism=parallelism)
    return cv.fit(df)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_cross_validator_in_parallel_equals_sequential(spark, classification_data, mode):
    df = classification_data[0]
    params, rtol = MODES[mode]
    sequential = cross_validate(df, 1, params)
    parallel = cross_validate(df, 4, params)
    # The evaluator's own Spark sums may round differently: metrics to 1e-12.
    np.testing.assert_allclose(parallel.avgMetrics, sequential.avgMetrics, rtol=1e-12, atol=0)
    assert parallel.bestModel.getRegParam() == sequential.bestModel.getRegParam()
    np.testing.assert_allclose(parallel.bestModel.coefficients.toArray(),
                               sequential.bestModel.coefficients.toArray(), rtol=rtol, atol=0)
    assert running_servers() == [] and gradspark_cached_rdds(spark) == []


def test_fits_from_two_driver_threads_do_not_cross_talk(spark, classification_data,
                                                        regression_data):
    # Different estimators, data and modes at once: a gradient or a weight vector
    # that reached the wrong fit would change its result.
    jobs = {
        "logistic-async": (SGDLogisticRegression(mode="async", maxStaleness=0, maxIter=30,
                                                 optimizer="adam", stepSize=0.05, **LOOPBACK),
                           classification_data[0]),
        "linear-async": (SGDLinearRegression(mode="async", maxStaleness=0, maxIter=30,
                                             optimizer="adam", stepSize=0.05, **LOOPBACK),
                         regression_data[0]),
        "logistic-sync": (SGDLogisticRegression(regParam=0.01, weightCol="weight",
                                                workerTimeout=60), classification_data[0]),
        "linear-sync": (SGDLinearRegression(regParam=0.01, workerTimeout=60),
                        regression_data[0]),
    }
    alone = {name: est.fit(df) for name, (est, df) in jobs.items()}
    together, errors = {}, []

    def fit(name):
        try:
            estimator, df = jobs[name]
            together[name] = estimator.copy().fit(df)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append((name, error))

    threads = [threading.Thread(target=fit, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == [] and sorted(together) == sorted(jobs)
    for name in jobs:
        exact = name.endswith("async")
        np.testing.assert_allclose(together[name].coefficients.toArray(),
                                   alone[name].coefficients.toArray(),
                                   rtol=0 if exact else 1e-9, atol=0)
    assert running_servers() == [] and gradspark_cached_rdds(spark) == []
