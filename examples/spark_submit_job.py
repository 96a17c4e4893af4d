"""A batch training job for spark-submit: read, train, evaluate, save.

    spark-submit --master local[2] examples/spark_submit_job.py --output /tmp/gs-model
    spark-submit --master spark://HOST:7077 \\
        --conf spark.executor.memory=4g --conf spark.task.maxFailures=4 \\
        examples/spark_submit_job.py --input hdfs:///data/train.parquet --output hdfs:///models/lr

gradspark must be importable on the executors: `pip install gradspark` in their
image (see docker/), or ship it with `--py-files gradspark.zip`. The master and
resources come from spark-submit; the job reads `--input` (Parquet with
`features` and `label` columns) or, without it, generates data in Spark.
"""

from __future__ import annotations

import argparse
import json

from example_data import FEATURE_COLUMNS, session, synthetic
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import VectorAssembler

from gradspark import SGDLogisticRegression


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="Parquet with features and label (default: synthetic)")
    parser.add_argument("--rows", type=int, default=50_000, help="synthetic rows")
    parser.add_argument("--output", required=True, help="where to save the PipelineModel")
    args = parser.parse_args()
    spark = session("", "gradspark-batch-job")  # the master is spark-submit's
    if args.input:
        data, stages = spark.read.parquet(args.input), []
    else:
        data = synthetic(spark, args.rows)
        stages = [VectorAssembler(inputCols=FEATURE_COLUMNS, outputCol="features")]
    train, test = data.randomSplit([0.9, 0.1], seed=3)
    model = Pipeline(stages=stages + [SGDLogisticRegression(regParam=0.001)]).fit(train)
    model.write().overwrite().save(args.output)
    reloaded = PipelineModel.load(args.output)
    result = {"master": spark.sparkContext.master, "output": args.output,
              "test_auc": BinaryClassificationEvaluator().evaluate(reloaded.transform(test)),
              "iterations": model.stages[-1].summary.totalIterations}
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
