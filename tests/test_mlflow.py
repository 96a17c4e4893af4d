"""MLflow (issue 31, item 2): the checks in tests/mlflow_checks.py, in a driver of their own.

``mlflow.pyspark.ml.autolog()`` patches pyspark.ml's classes for the rest of the
process, ``autolog(disable=True)`` notwithstanding: after it, later tests on the
shared session (test_svc's) saw ``transform`` return rows in another order. So
the MLflow checks run in a pytest process of their own, with its own session.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("mlflow", reason="MLflow is an optional extra")

HERE = os.path.dirname(os.path.abspath(__file__))


def test_mlflow_checks_pass_in_their_own_driver():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           os.path.join(HERE, "mlflow_checks.py")], cwd=HERE,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout, proc.stdout[-2000:]
