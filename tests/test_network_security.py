"""Our channels on Spark's security settings, through real fits.

A fit reads Spark's settings when it starts its servers, so setting
``spark.network.crypto.enabled`` on the running context's conf turns
encryption on for the next fit (Spark's own transport, started long before,
is unchanged: only our channels are under test). The netns test bed
(tests/test_netns_bed.py) then sniffs a real multi-host cluster.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from gradspark import SGDLogisticRegression


@contextmanager
def spark_setting(spark, key: str, value: str):
    conf = spark.sparkContext._jsc.sc().conf()  # the live SparkConf, which getConf() copies
    conf.set(key, value)
    try:
        yield
    finally:
        conf.remove(key)


@pytest.mark.parametrize("extra", [
    dict(parameterServerHost="127.0.0.1", executionStrategy="resident"),
    dict(executionStrategy="resident", aggregationTopology="tree", aggregationDepth=2),
    dict(mode="async", maxStaleness=0),
    dict(parameterServers=2),
], ids=["resident", "resident-tree", "async", "sharded"])
def test_fits_encrypt_when_spark_does_and_train_identically(hashed_rare, spark, extra):
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.1, maxIter=6,
                  regParam=1e-3, seed=7, **extra)
    clear = SGDLogisticRegression(**params).fit(hashed_rare)
    with spark_setting(spark, "spark.network.crypto.enabled", "true"):
        sealed = SGDLogisticRegression(**params).fit(hashed_rare)
    assert clear.summary.extra["channelsEncrypted"] is False
    assert sealed.summary.extra["channelsEncrypted"] is True
    # The frames grew by the GCM tag, nothing else changed: the same model.
    np.testing.assert_allclose(sealed.coefficients.toArray(), clear.coefficients.toArray(),
                               rtol=0, atol=1e-12)
    assert sealed.intercept == pytest.approx(clear.intercept, abs=1e-12)
