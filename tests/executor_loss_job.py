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
import traceback

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402

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
    """Executor JVMs are child processes of this driver's JVM in local-cluster mode.

    One ``ps`` snapshot with whole command lines (``-ww``): the JVM also has
    short-lived children (``getconf PAGESIZE``), and reading a listed child's
    ``/proc/<pid>/cmdline`` afterwards fails when it has exited in between.
    """
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(jvm_pid)],
                         capture_output=True, text=True, check=True).stdout
    return [int(line.split(None, 1)[0]) for line in out.splitlines()
            if "CoarseGrainedExecutorBackend" in line]


def run(spark, work: str) -> dict:
    g = np.random.default_rng(9)
    X = g.normal(size=(2000, 6))
    y = (X @ g.normal(size=6) + g.logistic(size=2000) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(4).cache()
    df.count()  # both fits blockify the same rows in the same order

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
    try:
        return kill_one_executor_mid_fit(spark, estimator, df, reference, counter)
    finally:
        logger.removeHandler(counter)


def executor_ids(spark) -> list:
    return sorted(spark.sparkContext._jsc.sc().getExecutorIds().mkString(",").split(","))


def kill_one_executor_mid_fit(spark, estimator, df, reference, counter) -> dict:
    result = {}

    def fit() -> None:
        try:
            result["model"] = estimator("killed").fit(df)
        except BaseException:  # noqa: BLE001 - reported by the main thread
            result["error"] = traceback.format_exc()
            counter.reached.set()

    thread = threading.Thread(target=fit)
    thread.start()
    if not counter.reached.wait(timeout=300):
        raise RuntimeError(f"the fit did not reach step 8 in 300 s ({counter.steps} steps)")
    if "error" in result:
        raise RuntimeError("the fit failed before the kill:\n" + result["error"])
    victims, ids_before = executor_pids(spark), executor_ids(spark)
    os.kill(victims[0], signal.SIGKILL)
    thread.join(timeout=600)
    if "model" not in result:
        raise RuntimeError("the fit did not finish after the kill:\n"
                           + result.get("error", "still running after 600 s"))
    model = result["model"]
    return {
        "executors_before_kill": len(victims),
        # The driver saw the executor go (and the cluster start another).
        "executor_ids_before": ids_before, "executor_ids_after": executor_ids(spark),
        "killed_at_step": 8,
        "steps_total": counter.steps,
        "equal": model.coefficients.toArray().tolist() == reference.coefficients.toArray().tolist()
        and model.intercept == reference.intercept,
        "max_diff": float(np.abs(model.coefficients.toArray()
                                 - reference.coefficients.toArray()).max()),
    }


def main() -> None:
    from local_cluster_jobs import cluster_session

    spark = cluster_session()
    try:
        print("RESULT " + json.dumps(run(spark, sys.argv[1])))
    finally:
        # Without a clean stop, the local cluster's workers keep relaunching executors
        # while the JVM shuts down, burying the error under their stack traces.
        spark.stop()


if __name__ == "__main__":
    main()
