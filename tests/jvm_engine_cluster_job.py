"""JVM engine on a local-cluster: the kernels jar, added to a running session,
reaches separate executor JVMs. Prints one RESULT line of JSON (run by test_jvm_engine.py).
"""

import json

import numpy as np

from job_support import logistic_frame, quiet_session  # sets PYSPARK_PYTHON first
from gradspark.data.blocks import BINARY
from gradspark.data.jvm import JvmTrainingData
from gradspark.engine.jvm import JvmGradientEngine
from gradspark.jvm.loader import load_kernels
from gradspark.engine.python import partition_sums
from gradspark.losses import BinaryLogisticLoss


def run(spark) -> dict:
    df, X, y = logistic_frame(spark, seed=3, rows=400, partitions=4)
    coef, offset = np.array([[0.3], [-0.2], [0.5], [0.1]]), np.array([0.05])
    loss = BinaryLogisticLoss()
    with JvmTrainingData(df, "features", "label", None, BINARY, 32, 2) as data:
        ours = JvmGradientEngine(data, loss).gradient_sums(coef, offset, np.zeros(0))
        blocks = data.python_blocks().collect()
    ref = partition_sums(blocks, loss, coef, offset, np.zeros(0), 1.0, None)
    # Executor JVM process ids, read by a JVM-side task through the kernels' own classes.
    jvm_pids = load_kernels(spark).executorPids(df._jdf)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    return {
        "ours": ours.vector().tolist() + [ours.loss_sum, ours.weight_sum, ours.count],
        "ref": ref.vector().tolist() + [ref.loss_sum, ref.weight_sum, ref.count],
        "jvm_pids": int(jvm_pids), "executors": executors,
    }


def main() -> None:
    spark = quiet_session("local-cluster[2,1,1024]")
    print("RESULT " + json.dumps(run(spark)))
    spark.stop()


if __name__ == "__main__":
    main()
