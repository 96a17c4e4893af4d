"""Bit identity across a refactor: the same fits on two source trees, compared exactly.

    PYTHONPATH=<old tree>/python .venv/bin/python benchmarks/bit_identity.py fit old.npz
    PYTHONPATH=<new tree>/python .venv/bin/python benchmarks/bit_identity.py fit new.npz
    .venv/bin/python benchmarks/bit_identity.py compare old.npz new.npz

``fit`` trains 19 configurations (every strategy, trainer and encoding a linear fit can
take: L-BFGS on each data path, resident Adam dense and sparse, a tree, fp16 and top-k
compression, local SGD, throughput batch sizing, bulk-synchronous async, sharded
servers, warm start, checkpointed runs) on 600 dense and 600 sparse rows on local[2],
and saves coefficients, intercepts and loss histories; ``compare`` prints, per
configuration, whether the two files are equal bit for bit. Throughput batch sizing
sizes batches by measured time, so it differs between two runs of the same tree too.
(Executors import the tree PYTHONPATH names: local mode passes it on.)
"""
import os
import sys

import numpy as np


def compare(old_path: str, new_path: str) -> int:
    old, new = np.load(old_path), np.load(new_path)
    differ = 0
    for key in old.files:
        a, b = old[key], new[key]
        same = a.shape == b.shape and np.array_equal(a, b)
        differ += not same
        gap = "" if same or a.shape != b.shape else f" (max gap {np.max(np.abs(a - b)):.3g})"
        print(f"{key:22s} {'identical' if same else 'DIFFERENT'}{gap}")
    return differ


def fit(out_path: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.ml.linalg import Vectors
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from gradspark import SGDLogisticRegression, SGDLinearRegression
    g = np.random.default_rng(0)
    n, d = 600, 12
    X = g.normal(size=(n, d)); X[:, 3] = 0.0
    w = g.normal(size=d)
    y = (X @ w + 0.3 * g.normal(size=n) > 0).astype(float)
    rows = [(Vectors.dense(x), float(t), float(t * 2 + x[0])) for x, t in zip(X, y)]
    # sparse set
    S = []
    for i in range(n):
        idx = np.sort(g.choice(200, 6, replace=False)); S.append((Vectors.sparse(200, idx, g.normal(size=6)), float(g.integers(2))))
    df = spark.createDataFrame(rows, ["features", "label", "reg"]).repartition(4).cache()
    sp = spark.createDataFrame(S, ["features", "label"]).repartition(4).cache()
    L = dict(parameterServerHost="127.0.0.1")
    cases = {
     "lbfgs_auto": (SGDLogisticRegression(maxIter=15, regParam=0.01), df),
     "lbfgs_jvm": (SGDLogisticRegression(maxIter=15, regParam=0.01, engine="jvm"), df),
     "lbfgs_numpy_jobs": (SGDLogisticRegression(maxIter=15, regParam=0.01, engine="python", executionStrategy="jobPerStep"), df),
     "adam_resident_mb": (SGDLogisticRegression(optimizer="adam", maxIter=20, miniBatchFraction=0.3, stepSize=0.05, executionStrategy="resident", **L), df),
     "adam_resident_sparse": (SGDLogisticRegression(optimizer="adam", maxIter=20, miniBatchFraction=0.3, stepSize=0.05, executionStrategy="resident", **L), sp),
     "sgd_tree": (SGDLogisticRegression(optimizer="sgd", maxIter=10, executionStrategy="resident", aggregationTopology="tree", **L), df),
     "fp16": (SGDLogisticRegression(optimizer="sgd", maxIter=10, compression="fp16", **L), df),
     "topk": (SGDLogisticRegression(optimizer="sgd", maxIter=10, compression="topk", compressionRatio=0.3, **L), sp),
     "local_sgd": (SGDLogisticRegression(optimizer="sgd", maxIter=12, localSteps=3, miniBatchFraction=0.5, **L), df),
     "throughput": (SGDLogisticRegression(optimizer="sgd", maxIter=10, miniBatchFraction=0.5, batchSizing="throughput", **L), df),
     "async_bsp": (SGDLogisticRegression(optimizer="adam", maxIter=15, mode="async", maxStaleness=0, stepSize=0.05, **L), df),
     "async_bsp_sparse": (SGDLogisticRegression(optimizer="adam", maxIter=15, mode="async", maxStaleness=0, stepSize=0.05, miniBatchFraction=0.5, **L), sp),
     "async_fp16": (SGDLogisticRegression(optimizer="sgd", maxIter=10, mode="async", maxStaleness=0, compression="fp16", **L), df),
     "sharded": (SGDLogisticRegression(optimizer="adam", maxIter=15, parameterServers=2, stepSize=0.05, **L), sp),
     "sharded_dense": (SGDLogisticRegression(optimizer="sgd", maxIter=10, parameterServers=2, parameterSpace="raw", **L), df),
     "linreg": (SGDLinearRegression(labelCol="reg", maxIter=20, regParam=0.1, elasticNetParam=0.5, solver="l-bfgs"), df),
    }
    out = {}
    for name, (est, data) in cases.items():
        m = est.fit(data)
        out[name] = np.concatenate([m.coefficients.toArray(), [m.intercept], m.summary.objectiveHistory])
        print(name, m.summary.extra.get("executionStrategy"), m.summary.extra.get("engine"), flush=True)
    import tempfile
    first = SGDLogisticRegression(optimizer="adam", maxIter=5, stepSize=0.05, engine="jvm").fit(df)
    warm = SGDLogisticRegression(optimizer="adam", maxIter=5, stepSize=0.05, engine="jvm", initialModel=first).fit(df)
    out["warm_start"] = np.concatenate([warm.coefficients.toArray(), warm.summary.objectiveHistory])
    ck = tempfile.mkdtemp()
    m = SGDLogisticRegression(optimizer="sgd", maxIter=8, checkpointDir=ck, checkpointInterval=3, engine="jvm").fit(df)
    m2 = SGDLogisticRegression(optimizer="sgd", maxIter=12, checkpointDir=ck, checkpointInterval=3, engine="jvm").fit(df)
    out["ckpt"] = np.concatenate([m.coefficients.toArray(), m2.coefficients.toArray(), m2.summary.objectiveHistory])
    m3 = SGDLogisticRegression(optimizer="sgd", maxIter=9, localSteps=3, checkpointDir=tempfile.mkdtemp(), checkpointInterval=3, **L).fit(df)
    out["local_ckpt"] = np.concatenate([m3.coefficients.toArray(), m3.summary.objectiveHistory])
    np.savez(out_path, **out)
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["compare"]:
        compare(*sys.argv[2:4])
    else:
        fit(sys.argv[2])
