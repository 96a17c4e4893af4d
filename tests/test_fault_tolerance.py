"""Checkpoints: format, atomic store, exact resume, and a real driver crash (SIGKILL)."""

import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.checkpoints import (ArrowCheckpointStore, CheckpointStore,
                                   CorruptCheckpointError, TrainingState)
from gradspark.data.blocks import BINARY
from gradspark.data.dataset import NumpyTrainingData

HERE = os.path.dirname(__file__)


def _state(step):
    return TrainingState(step=step, theta=np.arange(4.0) * step,
                         optimizer_state={"m": np.ones(4), "t": np.array([step])},
                         history=np.linspace(1, 0, step), meta={"estimator": "X"})


def test_state_round_trips_and_detects_corruption():
    data = _state(7).to_bytes()
    back = TrainingState.from_bytes(data)
    np.testing.assert_array_equal(back.theta, _state(7).theta)
    np.testing.assert_array_equal(back.optimizer_state["t"], [7])
    assert back.step == 7 and back.meta == {"estimator": "X"}
    with pytest.raises(CorruptCheckpointError, match="checksum"):
        TrainingState.from_bytes(data[:-10])  # truncated
    flipped = bytearray(data)
    flipped[-20] ^= 0xFF
    with pytest.raises(CorruptCheckpointError, match="checksum"):
        TrainingState.from_bytes(bytes(flipped))


@pytest.mark.parametrize("kind", ["hadoop", "pyarrow"])
def test_store_keeps_the_newest_and_skips_a_corrupt_latest(spark, tmp_path, caplog, kind):
    # pyarrow.fs is the store a Spark Connect client writes with (no JVM at hand)
    store = (CheckpointStore(spark.sparkContext, f"file://{tmp_path}", keep=2)
             if kind == "hadoop" else ArrowCheckpointStore(str(tmp_path), keep=2))
    for step in (3, 6, 9):
        store.write(_state(step))
    assert store.steps() == [6, 9]
    names = sorted(n for n in os.listdir(tmp_path) if not n.endswith(".crc"))
    assert names == ["step-0000000006.ckpt", "step-0000000009.ckpt"]  # no temporaries left
    latest = tmp_path / "step-0000000009.ckpt"
    latest.write_bytes(latest.read_bytes()[:100])  # a torn write on a file system without rename
    with caplog.at_level(logging.WARNING):
        step, state = store.latest()
    assert step == 6 and state.step == 6
    assert "step 9" in caplog.text and "corrupt" in caplog.text


def _logistic(**kw):
    return SGDLogisticRegression(optimizer="adam", stepSize=0.05, miniBatchFraction=0.5,
                                 tol=0.0, regParam=0.01, seed=3, **kw)


def test_resumed_first_order_fit_is_bit_identical(classification_data, tmp_path):
    df = classification_data[0]
    straight = _logistic(maxIter=24).fit(df)
    d = str(tmp_path / "ck")
    first = _logistic(maxIter=10, checkpointDir=d, checkpointInterval=4).fit(df)
    assert first.summary.totalIterations == 10
    resumed = _logistic(maxIter=24, checkpointDir=d, checkpointInterval=4).fit(df)
    assert resumed.summary.extra["resumedFromStep"] == 10
    np.testing.assert_array_equal(resumed.coefficients.toArray(), straight.coefficients.toArray())
    assert resumed.intercept == straight.intercept
    assert resumed.summary.objectiveHistory == straight.summary.objectiveHistory


def test_other_data_params_or_estimator_never_resume_anothers_checkpoint(
        spark, classification_data, tmp_path):
    """Each fit identity (estimator, data fingerprint, path-changing Params) checkpoints
    into its own subdirectory of checkpointDir: a fit with other data, Params or
    estimator starts fresh beside the first one's checkpoints, never from them."""
    df = classification_data[0]
    d = str(tmp_path / "ck")
    _logistic(maxIter=4, checkpointDir=d).fit(df)
    other_data = _logistic(maxIter=8, checkpointDir=d).fit(df.limit(300))
    assert other_data.summary.extra["resumedFromStep"] is None
    other_params = SGDLogisticRegression(optimizer="adam", stepSize=0.05, miniBatchFraction=0.5,
                                         tol=0.0, regParam=0.5, seed=3, maxIter=8,
                                         checkpointDir=d).fit(df)
    assert other_params.summary.extra["resumedFromStep"] is None
    np.testing.assert_array_equal(
        other_params.coefficients.toArray(),
        SGDLogisticRegression(optimizer="adam", stepSize=0.05, miniBatchFraction=0.5, tol=0.0,
                              regParam=0.5, seed=3, maxIter=8).fit(df).coefficients.toArray())
    assert len(os.listdir(d)) == 3
    resumed = _logistic(maxIter=8, checkpointDir=d).fit(df)  # the first fit's own
    assert resumed.summary.extra["resumedFromStep"] == 4
    fresh = _logistic(maxIter=8, checkpointDir=d, resume=False).fit(df)
    assert fresh.summary.extra["resumedFromStep"] is None
    np.testing.assert_array_equal(fresh.coefficients.toArray(),
                                  _logistic(maxIter=8).fit(df).coefficients.toArray())


def test_resumed_lbfgs_is_bit_identical(regression_data, tmp_path):
    df = regression_data[0]
    params = dict(regParam=0.1, elasticNetParam=0.5, tol=1e-12,  # L1: the u-v split path
                  solver="l-bfgs")
    straight = SGDLinearRegression(maxIter=200, **params).fit(df)
    d = str(tmp_path / "ck")
    SGDLinearRegression(maxIter=3, checkpointDir=d, checkpointInterval=1, **params).fit(df)
    resumed = SGDLinearRegression(maxIter=200, checkpointDir=d, checkpointInterval=1,
                                  **params).fit(df)
    assert resumed.summary.extra["resumedFromStep"] == 3
    np.testing.assert_array_equal(resumed.coefficients.toArray(), straight.coefficients.toArray())
    assert resumed.intercept == straight.intercept
    assert resumed.summary.objectiveHistory == straight.summary.objectiveHistory
    # The replay costs no distributed pass: only the steps after 3 evaluate anything.
    assert (resumed.summary.extra["gradientEvaluations"]
            < straight.summary.extra["gradientEvaluations"])


def _run_job(checkpoint_dir, output, **popen):
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "checkpoint_fit_job.py"), checkpoint_dir, output],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen,
    )


def test_driver_killed_mid_fit_resumes_to_the_same_model(spark, tmp_path):
    from checkpoint_fit_job import fit

    crashed_dir = tmp_path / "crashed"
    victim = _run_job(str(crashed_dir), str(tmp_path / "victim.json"), start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        steps = sorted(p.name for p in crashed_dir.glob("*/step-*.ckpt")) if crashed_dir.exists() else []
        if steps and steps[-1] >= "step-0000000009.ckpt":
            break
        assert victim.poll() is None, "the fit finished before it could be killed"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)  # the driver and its JVM, no clean-up
    victim.wait(timeout=60)
    assert not (tmp_path / "victim.json").exists()
    assert not list(crashed_dir.glob("*/step-0000000080.ckpt"))

    again = _run_job(str(crashed_dir), str(tmp_path / "resumed.json"))
    assert again.wait(timeout=600) == 0, again.stderr.read().decode()[-3000:]
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    # The uninterrupted reference: the same fit on this suite's session (local[2] as well).
    reference = fit(spark, str(tmp_path / "clean"))
    assert resumed["resumed_from"] >= 9
    assert resumed["coefficients"] == reference["coefficients"]  # bit-identical
    assert resumed["intercept"] == reference["intercept"]
    assert resumed["history"] == reference["history"]


@pytest.mark.local_cluster("executor_loss")
def test_executor_killed_mid_fit_gives_the_same_model(local_cluster):
    result = local_cluster("executor_loss")
    assert result["executors_before_kill"] == 2
    # The kill really took an executor away: the driver dropped it.
    assert set(result["executor_ids_before"]) - set(result["executor_ids_after"])
    assert result["steps_total"] == 40
    assert result["equal"], result


def test_data_checkpoint_is_written_and_removed(spark, classification_data, tmp_path):
    df = classification_data[0]
    with pytest.raises(ValueError, match="checkpointData=True needs a checkpointDir"):
        SGDLogisticRegression(checkpointData=True).fit(df)
    data = NumpyTrainingData(df, "features", "label", None, BINARY, 64, 2,
                        checkpoint_dir=str(tmp_path / "rdd"))
    assert data.blocks.isCheckpointed()  # written by the statistics pass itself
    written = list((tmp_path / "rdd").rglob("part-*"))
    assert len(written) == df.rdd.getNumPartitions()
    assert data.blocks.map(lambda b: len(b.labels)).sum() == data.statistics.count
    data.release()
    assert not any(p.exists() for p in written)
    # a fit with checkpointData gives the same model as one without
    model = SGDLogisticRegression(maxIter=5, checkpointData=True,
                                  checkpointDir=str(tmp_path / "ck")).fit(df)
    reference = SGDLogisticRegression(maxIter=5).fit(df)
    np.testing.assert_array_equal(model.coefficients.toArray(), reference.coefficients.toArray())
