"""``spark-submit`` to a real standalone cluster (master + 2 workers on loopback).

The batch path users run: ``gradspark train`` submitted as a file to
``spark://...``, executors in the workers' processes, the model saved and checked.
Also ``make cluster-test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from pyspark.ml import PipelineModel

from job_support import failure_report
from standalone_cluster import SPARK_SUBMIT, StandaloneCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "python", "gradspark", "cli.py")


@pytest.fixture
def training_parquet(spark, tmp_path):
    g = np.random.default_rng(21)
    X = g.normal(size=(2000, 3))
    y = (X @ [1.0, -2.0, 0.5] + g.logistic(size=2000) > 0).astype(float)
    path = str(tmp_path / "train.parquet")
    spark.createDataFrame([(*map(float, x), float(t)) for x, t in zip(X, y)],
                          ["a", "b", "c", "label"]).repartition(4).write.parquet(path)
    return path


def test_spark_submit_to_a_standalone_cluster(spark, training_parquet, tmp_path):
    output = str(tmp_path / "model")
    with StandaloneCluster(workers=2, work_dir=str(tmp_path / "cluster")) as cluster:
        proc = subprocess.run(
            [SPARK_SUBMIT, "--master", cluster.url,
             "--conf", "spark.pyspark.python=" + sys.executable,
             "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=768m",
             "--conf", "spark.driver.host=127.0.0.1",
             CLI, "train", "--model", "logistic", "--input", training_parquet,
             "--param", "regParam=0.01", "--output", output],
            capture_output=True, text=True, timeout=600,
            env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
        executors = cluster.executor_dirs()
    assert proc.returncode == 0, failure_report(proc)
    # The executors ran in the two workers (one application directory each).
    assert len(executors) == 2
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])["metrics"]
    model = PipelineModel.load(output)
    assert model.stages[-1].numFeatures == 3 and metrics["areaUnderROC"] > 0.8
    with open(os.path.join(output, "metrics.json")) as handle:
        assert json.load(handle)["metrics"] == metrics
