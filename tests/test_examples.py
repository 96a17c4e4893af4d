"""Every example runs (small data, its own SparkSession) and says what its docstring promises.

The examples run one after another in one driver process (examples_job.py), each as
``python examples/NAME`` would run it; the spark-submit one goes through spark-submit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from job_support import job_result, run_job

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def run_example(name: str, *args: str, launcher=None) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = (launcher or [sys.executable]) + [os.path.join(EXAMPLES, name), *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    return job_result(proc)


# name -> the arguments each example runs with here (small data)
ARGUMENTS = {
    "pipeline_cross_validation.py": "--rows 3000 --folds 2",
    "sql_pipeline.py": "--rows 4000",
    "async_training.py": "--rows 4000",
    "checkpoint_resume.py": "--rows 4000",
    "torch_mlp.py": "--rows 3000 --epochs 4",
    # 2^16 buckets: MLlib's L-BFGS moves dense 2^20 arrays for 90 steps (50 s here)
    "hashed_features.py": "--rows 6000 --bits 16",
}


@pytest.fixture(scope="module")
def examples():
    names = [name for name in ARGUMENTS if name != "torch_mlp.py" or has_torch()]
    results = run_job("examples_job.py", *[f"{name} {ARGUMENTS[name]}" for name in names],
                      timeout=1200)

    def result(name: str) -> dict:
        assert "error" not in results[name], f"{name} failed:\n{results[name]['error']}"
        return results[name]

    return result


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_pipeline_cross_validation(examples):
    result = examples("pipeline_cross_validation.py")
    # The same search picks comparable models: test AUCs within 0.01 of MLlib's.
    assert abs(result["gradspark"]["test_auc"] - result["mllib"]["test_auc"]) < 0.01
    assert result["gradspark"]["test_auc"] > 0.85


def test_sql_pipeline(examples):
    result = examples("sql_pipeline.py")
    np.testing.assert_allclose(result["gradspark_coefficients"], result["mllib_coefficients"],
                               rtol=1e-3, atol=1e-3)
    assert result["gradspark_rmse"] == pytest.approx(result["mllib_rmse"], rel=1e-3)


def test_spark_submit_job(tmp_path):
    spark_submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    result = run_example("spark_submit_job.py", "--rows", "5000", "--output",
                         str(tmp_path / "model"),
                         launcher=[spark_submit, "--master", "local[2]"])
    assert result["master"] == "local[2]" and result["test_auc"] > 0.85
    assert os.path.isdir(tmp_path / "model" / "stages")


def test_async_training(examples):
    result = examples("async_training.py")
    bsp, stale = result["staleness_0"], result["staleness_2"]
    assert bsp["max_staleness_seen"] == 0 and stale["max_staleness_seen"] <= 2
    assert stale["final_loss"] <= 1.02 * bsp["final_loss"]


def test_checkpoint_resume(examples):
    result = examples("checkpoint_resume.py")
    assert result["resumed_from"] == 20 and result["identical_to_uninterrupted"] is True


def test_torch_mlp(examples):
    pytest.importorskip("torch")
    result = examples("torch_mlp.py")
    history = result["loss_history"]
    assert result["ranks"] == 2 and len(history) == 4 and history[-1] < history[0]
    assert result["test_accuracy"] > 0.6  # three classes: chance is ~0.33


def test_hashed_features(examples):
    result = examples("hashed_features.py")
    ours, mllib = result["gradspark"], result["mllib"]
    assert ours["num_features"] == mllib["num_features"] == 1 << 16
    assert 0 < ours["trained_features"] < 20000  # the buckets that occur, not 2^16
    assert result["gradspark_zero_where_mllib_zero"]
    assert result["max_coefficient_gap"] < 1e-3
    assert abs(ours["test_auc"] - mllib["test_auc"]) < 0.005
