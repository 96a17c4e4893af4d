"""Kill one executor JVM of a local-cluster in the middle of a fit; print JSON.

The fit must finish (lost tasks retried, lost cached blocks recomputed from
lineage) with the same model as an undisturbed fit. Run by test_fault_tolerance.py.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from gradspark import SGDLogisticRegression  # noqa: E402


class StepCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.reached = threading.Event()

    def emit(self, record) -> None:
        if " step " in record.getMessage():
            self.steps += 1
            if self.steps == 8:
                self.reached.set()


def executor_pids(spark) -> list:
    """Executor JVMs are child processes of this driver's JVM in local-cluster mode."""
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(jvm_pid)],
                         capture_output=True, text=True).stdout
    pids = []
    for pid in map(int, out.split()):
        with open(f"/proc/{pid}/cmdline", "rb") as f:  # ps would truncate to $COLUMNS
            if b"CoarseGrainedExecutorBackend" in f.read():
                pids.append(pid)
    return pids


def main() -> None:
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.task.maxFailures", "8").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    g = np.random.default_rng(9)
    X = g.normal(size=(2000, 6))
    y = (X @ g.normal(size=6) + g.logistic(size=2000) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(4).cache()
    df.count()  # both fits blockify the same rows in the same order
    work = sys.argv[1]

    def estimator(name: str) -> SGDLogisticRegression:
        # Mini-batches make the result depend on each partition's row order, which a
        # recomputed shuffle does not preserve; checkpointData keeps the blocks as written.
        return SGDLogisticRegression(optimizer="sgd", stepSize=0.5, maxIter=40, tol=0.0,
                                     miniBatchFraction=0.7, seed=5, checkpointData=True,
                                     checkpointDir=os.path.join(work, name))

    reference = estimator("reference").fit(df)

    counter = StepCounter()
    logger = logging.getLogger("gradspark.trainer")
    logger.setLevel(logging.INFO)
    logger.addHandler(counter)
    result = {}
    fit = threading.Thread(target=lambda: result.setdefault("model", estimator("killed").fit(df)))
    fit.start()
    counter.reached.wait(timeout=300)
    victims = executor_pids(spark)
    os.kill(victims[0], signal.SIGKILL)
    fit.join(timeout=600)
    model = result["model"]
    print("RESULT " + json.dumps({
        "executors_before_kill": len(victims),
        "killed_at_step": 8,
        "steps_total": counter.steps,
        "equal": model.coefficients.toArray().tolist() == reference.coefficients.toArray().tolist()
        and model.intercept == reference.intercept,
        "max_diff": float(np.abs(model.coefficients.toArray()
                                 - reference.coefficients.toArray()).max()),
    }))
    spark.stop()


if __name__ == "__main__":
    main()
