"""Raw categorical columns -> FeatureHasher -> SGDLogisticRegression, next to MLlib.

Click-through-shaped data made in SQL: six string columns (site, ad, device,
hour, ...) of very different cardinalities, and a click label. A Pipeline
hashes them into 2^20 binary features (pyspark's FeatureHasher, the usual
way to feed categorical data of unbounded vocabulary to a linear model) and
fits gradspark's and MLlib's logistic regression with the same Params. Only a
few thousand of the 2^20 buckets ever occur: gradspark trains on those
(``summary.extra["trainedFeatures"]``) and returns a 2^20-wide model.

    python examples/hashed_features.py [--rows 50000] [--bits 20] [--master local[2]]
"""

from __future__ import annotations

import json

from example_data import arguments, session
from pyspark.ml import Pipeline
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import FeatureHasher
from pyspark.sql import functions as F

from gradspark import SGDLogisticRegression

# column -> number of distinct values (a long tail for the larger ones)
CATEGORIES = {"site": 300, "app": 1000, "ad": 5000, "device": 20, "hour": 24, "user": 20000}


def clicks(spark, rows: int, seed: int = 5):
    """One row per impression: skewed categorical ids as strings, and a click that depends
    on a hash of each value (a per-value effect, as in real CTR data)."""
    df = spark.range(rows, numPartitions=4)
    margin = F.lit(-1.0)
    for i, (name, cardinality) in enumerate(CATEGORIES.items()):
        skewed = F.floor(F.pow(F.rand(seed + i), 3) * cardinality).cast("int")
        df = df.withColumn(name, F.concat(F.lit(name[0]), skewed.cast("string")))
        effect = (F.abs(F.hash(F.col(name))) % 1001 - 500) / 500.0 * 0.8
        margin = margin + effect
    label = (F.rand(seed + 99) < 1 / (1 + F.exp(-margin))).cast("double")
    return df.withColumn("label", label).drop("id")


def main() -> None:
    args = arguments(__doc__, rows=50_000, bits=20)
    spark = session(args.master, "gradspark-hashed-features")
    train, test = clicks(spark, args.rows).randomSplit([0.8, 0.2], seed=1)
    train.cache()
    hasher = FeatureHasher(inputCols=list(CATEGORIES), outputCol="features",
                           numFeatures=1 << args.bits)
    # to convergence: the two L-BFGS implementations then agree on every coefficient
    params = dict(regParam=1e-3, standardization=False, maxIter=1000, tol=1e-10)
    auc = BinaryClassificationEvaluator(metricName="areaUnderROC")
    result = {}
    for name, estimator in (("gradspark", SGDLogisticRegression(**params)),
                            ("mllib", LogisticRegression(**params))):
        model = Pipeline(stages=[hasher, estimator]).fit(train)
        fitted = model.stages[-1]
        result[name] = {"test_auc": auc.evaluate(model.transform(test)),
                        "coefficients": fitted.coefficients.toArray().tolist(),
                        "intercept": fitted.intercept,
                        "num_features": fitted.numFeatures}
        if name == "gradspark":
            result[name]["trained_features"] = fitted.summary.extra["trainedFeatures"]
        print(f"{name}: test AUC {result[name]['test_auc']:.4f}")
    print(f"gradspark trained {result['gradspark']['trained_features']:,} of "
          f"{result['gradspark']['num_features']:,} hashed features")
    coefficients = {k: v.pop("coefficients") for k, v in result.items()}
    nonzero = [i for i, c in enumerate(coefficients["mllib"]) if c != 0.0]
    result["max_coefficient_gap"] = max(
        abs(coefficients["gradspark"][i] - coefficients["mllib"][i]) for i in nonzero)
    result["gradspark_zero_where_mllib_zero"] = all(
        coefficients["gradspark"][i] == 0.0
        for i, c in enumerate(coefficients["mllib"]) if c == 0.0)
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
