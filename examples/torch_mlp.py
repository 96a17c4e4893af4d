"""TorchEstimator: a PyTorch MLP trained with DDP across Spark barrier tasks.

Two ranks (gloo on CPU; NCCL with useGpu=True on GPU executors) train a small
MLP on synthetic 3-class data; the fitted TorchModel scores a DataFrame like
any Spark ML model.

    python examples/torch_mlp.py [--rows 6000] [--epochs 5] [--master local[2]]
"""

from __future__ import annotations

import json

from example_data import FEATURE_COLUMNS, arguments, session, synthetic
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.feature import VectorAssembler
from pyspark.sql import functions as F

from gradspark import TorchEstimator


def mlp():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(len(FEATURE_COLUMNS), 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 3))


def cross_entropy(output, target):
    import torch

    return torch.nn.functional.cross_entropy(output, target)


def main() -> None:
    args = arguments(__doc__, rows=6_000, epochs=5)
    spark = session(args.master, "gradspark-torch")
    # Three classes: the binary label, split by the sign of x4.
    data = synthetic(spark, args.rows).withColumn(
        "label", F.col("label") + (F.col("x4") > 0).cast("double"))
    data = VectorAssembler(inputCols=FEATURE_COLUMNS, outputCol="features").transform(data)
    train, test = data.randomSplit([0.8, 0.2], seed=4)
    estimator = TorchEstimator(mlp, cross_entropy, numWorkers=2, epochs=args.epochs,
                               batchSize=128, learningRate=0.01, labelDtype="int64", seed=1)
    model = estimator.fit(train)
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(
        model.transform(test))
    history = model.summary.lossHistory
    result = {"loss_history": history, "test_accuracy": accuracy,
              "ranks": model.summary.numWorkers}
    print(f"epoch losses {[round(x, 4) for x in history]}, test accuracy {accuracy:.4f}")
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
