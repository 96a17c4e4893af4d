"""What the subprocess test jobs share: a quiet session and a small logistic dataset,
and, for the tests that run them, reading a job's result.

The jobs run in their own driver processes (one SparkContext per process), so
they cannot use conftest's fixtures. A job prints its result as one line,
``RESULT <json>``, on stdout.
"""

import json
import os
import subprocess
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402


def quiet_session(master: str, **conf: str) -> SparkSession:
    builder = (SparkSession.builder.master(master)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def logistic_frame(spark: SparkSession, seed: int, rows: int, partitions: int):
    """(cached DataFrame, X, y): 4 features on different scales, logistic labels."""
    g = np.random.default_rng(seed)
    X = g.normal(size=(rows, 4)) * [1, 2, 0.5, 4]
    y = (X @ [1.0, -0.5, 2.0, 0.2] + g.logistic(size=rows) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(partitions).cache()
    return df, X, y


def run_job(script: str, *args: str, timeout: float = 600) -> dict:
    """Run ``tests/<script>`` in its own driver process; its RESULT as a dict.

    A job still running after ``timeout`` seconds gets SIGABRT: ``-X faulthandler``
    then prints every thread's Python stack to stderr, so the failure shows where
    the driver waited instead of only that it did.
    """
    import signal

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), script)
    process = subprocess.Popen([sys.executable, "-X", "faulthandler", path, *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        stuck = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        start = stderr.find("Fatal Python error: Aborted")  # faulthandler's dump
        raise AssertionError(f"{script} still ran after {timeout:.0f} s; its threads:\n"
                             f"{stderr[start:start + 8000] if start >= 0 else ''}\n"
                             f"{failure_report(stuck)}")
    return job_result(subprocess.CompletedProcess(process.args, process.returncode,
                                                  stdout, stderr))


def job_result(proc: subprocess.CompletedProcess) -> dict:
    """The JSON of a finished job's last RESULT line; fails the test with the job's error."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, failure_report(proc)
    return json.loads(lines[-1][len("RESULT "):])


def failure_report(proc: subprocess.CompletedProcess, tail: int = 2000) -> str:
    """Why a job failed: its Python traceback, its stdout, and the end of its stderr.

    A driver that dies without stopping its local cluster leaves the workers
    relaunching executors while the JVM shuts down; their stack traces fill
    the end of stderr, and the traceback that says why comes before them.
    """
    parts = [f"exit status {proc.returncode}"]
    start = proc.stderr.rfind("Traceback (most recent call last)")
    if start >= 0:
        parts.append(proc.stderr[start:start + 4000])
    parts += ["stdout: " + proc.stdout[-tail:], "stderr ends: " + proc.stderr[-tail:]]
    return "\n".join(parts)
