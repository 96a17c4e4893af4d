"""Training data larger than the executors' storage memory (local-cluster).

Executors of 1 GiB with ``spark.memory.fraction=0.006`` hold ~4 MiB each of
cached blocks; the training blocks are ~20 MiB. They must spill to disk
(MEMORY_AND_DISK), not fail, and the model must still equal MLlib's, with
each engine's blocks (Python and JVM). The driver may not collect the data:
``spark.driver.maxResultSize=4m`` fails any job that tries. Prints RESULT
<json>: per engine, its model and the largest memory and disk use seen.
"""

import json
import threading

from pyspark.ml.classification import LogisticRegression
from pyspark.ml.feature import VectorAssembler
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import job_support  # noqa: F401 - sets PYSPARK_PYTHON first
from gradspark import SGDLogisticRegression

ROWS, FEATURES = 120_000, 20


def watch_storage(sc, stop: threading.Event, seen: dict) -> None:
    """Largest memory and disk use of gradspark's cached RDDs while training."""
    while not stop.wait(0.2):
        for info in sc._jsc.sc().getRDDStorageInfo():
            if "gradspark" in str(info.name()):
                seen["disk"] = max(seen["disk"], int(info.diskSize()))
                seen["memory"] = max(seen["memory"], int(info.memSize()))


def main() -> None:
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.memory.fraction", "0.006")
             .config("spark.driver.maxResultSize", "4m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    columns = [F.randn(seed=i).alias(f"x{i}") for i in range(FEATURES)]
    raw = spark.range(ROWS).repartition(4).select(*columns)
    score = sum((0.5 - i / FEATURES) * F.col(f"x{i}") for i in range(FEATURES))
    df = (VectorAssembler(inputCols=[f"x{i}" for i in range(FEATURES)], outputCol="features")
          .transform(raw.withColumn("label", (score + F.randn(seed=99) > 0).cast("double")))
          .select("features", "label"))

    params = dict(regParam=0.01, tol=1e-10, maxIter=100)
    sc = spark.sparkContext
    result = {}
    for engine in ("python", "jvm"):
        seen = {"disk": 0, "memory": 0}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_storage, args=(sc, stop, seen), daemon=True)
        watcher.start()
        ours = SGDLogisticRegression(engine=engine, **params).fit(df)
        stop.set()
        watcher.join()
        result[engine] = {
            "ours": ours.coefficients.toArray().tolist() + [ours.intercept],
            "disk_bytes": seen["disk"], "memory_bytes": seen["memory"],
            "engine": ours.summary.extra.get("engine"),
            "strategy": ours.summary.extra.get("executionStrategy"),
        }
    ref = LogisticRegression(**params).fit(df)
    result["ref"] = ref.coefficients.toArray().tolist() + [ref.intercept]
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
