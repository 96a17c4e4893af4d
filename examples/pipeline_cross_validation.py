"""Feature stages + SGDLogisticRegression tuned by CrossValidator, next to MLlib.

A Pipeline (VectorAssembler -> StandardScaler -> SGDLogisticRegression) is tuned
over regParam and elasticNetParam with 3-fold cross-validation, folds fitted in
parallel; MLlib's LogisticRegression goes through the same search.

    python examples/pipeline_cross_validation.py [--rows 20000] [--folds 3] [--master local[2]]
"""

from __future__ import annotations

import json

from example_data import FEATURE_COLUMNS, arguments, session, synthetic
from pyspark.ml import Pipeline
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import StandardScaler, VectorAssembler
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

from gradspark import SGDLogisticRegression


def tune(estimator, train, test, folds: int) -> dict:
    pipeline = Pipeline(stages=[
        VectorAssembler(inputCols=FEATURE_COLUMNS, outputCol="raw"),
        StandardScaler(inputCol="raw", outputCol="features"),
        estimator,
    ])
    grid = (ParamGridBuilder().addGrid(estimator.regParam, [0.001, 0.1])
            .addGrid(estimator.elasticNetParam, [0.0, 0.5]).build())
    evaluator = BinaryClassificationEvaluator()
    cv = CrossValidator(estimator=pipeline, estimatorParamMaps=grid, evaluator=evaluator,
                        numFolds=folds, parallelism=2, seed=1).fit(train)
    best = cv.bestModel.stages[-1]
    return {"regParam": best.getRegParam(), "elasticNetParam": best.getElasticNetParam(),
            "test_auc": evaluator.evaluate(cv.bestModel.transform(test))}


def main() -> None:
    args = arguments(__doc__, rows=20_000, folds=3)
    spark = session(args.master, "gradspark-cross-validation")
    train, test = synthetic(spark, args.rows).randomSplit([0.8, 0.2], seed=1)
    train, test = train.cache(), test.cache()
    result = {"gradspark": tune(SGDLogisticRegression(), train, test, args.folds),
              "mllib": tune(LogisticRegression(), train, test, args.folds)}
    for name, found in result.items():
        print(f"{name:<10} best regParam={found['regParam']} "
              f"elasticNetParam={found['elasticNetParam']} test AUC={found['test_auc']:.4f}")
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
