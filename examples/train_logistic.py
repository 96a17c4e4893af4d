"""Train gradspark's SGDLogisticRegression on a local Spark and print its metrics.

This is what ``make demo`` runs. It builds a synthetic binary-classification
dataset inside Spark (SQL expressions + VectorAssembler, no driver-side data),
splits it, trains gradspark in a Pipeline twice (full-batch L-BFGS, and
mini-batch Adam) next to MLlib's LogisticRegression, and prints held-out AUC,
accuracy and the agreement of the coefficients.

    .venv/bin/python examples/train_logistic.py [--rows 50000] [--master local[2]]
"""

from __future__ import annotations

import logging
import time

import numpy as np
from example_data import FEATURE_COLUMNS, TRUE_COEFFICIENTS, arguments, session, synthetic
from pyspark.ml import Pipeline
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.evaluation import BinaryClassificationEvaluator, MulticlassClassificationEvaluator
from pyspark.ml.feature import VectorAssembler

from gradspark import SGDLogisticRegression


def main() -> None:
    args = arguments(__doc__, rows=50_000)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    spark = session(args.master, "gradspark-demo")
    train, test = synthetic(spark, args.rows).randomSplit([0.8, 0.2], seed=1)
    train, test = train.cache(), test.cache()
    print(f"data: {train.count()} training rows, {test.count()} test rows, "
          f"{len(TRUE_COEFFICIENTS)} features, master {args.master}")

    assembler = VectorAssembler(inputCols=FEATURE_COLUMNS, outputCol="features")
    candidates = {
        "gradspark lbfgs": SGDLogisticRegression(regParam=0.001),
        "gradspark adam (10% mini-batches)": SGDLogisticRegression(
            regParam=0.001, optimizer="adam", stepSize=0.1, miniBatchFraction=0.1,
            learningRateSchedule="cosine", maxIter=60),
        "MLlib LogisticRegression": LogisticRegression(regParam=0.001),
    }
    auc = BinaryClassificationEvaluator(metricName="areaUnderROC")
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy")
    fitted = {}
    print(f"\n{'model':<36}{'fit s':>7}{'iters':>7}{'test AUC':>10}{'accuracy':>10}")
    for name, estimator in candidates.items():
        start = time.perf_counter()
        model = Pipeline(stages=[assembler, estimator]).fit(train)
        seconds = time.perf_counter() - start
        scored = model.transform(test)
        lr = model.stages[-1]
        fitted[name] = lr
        print(f"{name:<36}{seconds:>7.1f}{lr.summary.totalIterations:>7}"
              f"{auc.evaluate(scored):>10.4f}{accuracy.evaluate(scored):>10.4f}")

    ours = fitted["gradspark lbfgs"]
    ref = fitted["MLlib LogisticRegression"]
    diff = np.abs(ours.coefficients.toArray() - ref.coefficients.toArray()).max()
    print(f"\ngradspark lbfgs coefficients: {np.round(ours.coefficients.toArray(), 3).tolist()}")
    truth = [round(b / (j + 1), 3) for j, b in enumerate(TRUE_COEFFICIENTS)]
    print(f"generating coefficients:      {truth}")
    print(f"max |gradspark - MLlib| coefficient difference: {diff:.2e}")
    history = ours.summary.objectiveHistory
    print(f"objective: {history[0]:.5f} -> {history[-1]:.5f} in {len(history) - 1} iterations")
    spark.stop()


if __name__ == "__main__":
    main()
