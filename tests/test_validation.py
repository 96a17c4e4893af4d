"""Bad input fails fast with an error that names the column and the problem."""

import math

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.sql.types import DoubleType, StructField, StructType

from gradspark import InvalidDataError, SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression
from pyspark.ml.linalg import VectorUDT

from conftest import gradspark_cached_rdds

SCHEMA = StructType([
    StructField("features", VectorUDT(), True),
    StructField("label", DoubleType(), True),
    StructField("weight", DoubleType(), True),
])


def good_rows(n=20):
    g = np.random.default_rng(0)
    return [(Vectors.dense(g.normal(size=3)), float(i % 2), 1.0) for i in range(n)]


def frame(spark, rows):
    return spark.createDataFrame(rows, SCHEMA).repartition(2)


def with_row(rows, position, row):
    rows = list(rows)
    rows[position] = row
    return rows


V = Vectors.dense


@pytest.mark.parametrize("bad_row,estimator,match", [
    ((V([1.0, math.nan, 0.0]), 1.0, 1.0), SGDLogisticRegression(),
     r"features column 'features' contains NaN or infinite"),
    ((Vectors.sparse(3, [2], [math.inf]), 1.0, 1.0), SGDLogisticRegression(),
     r"features column 'features' contains NaN or infinite"),
    ((None, 1.0, 1.0), SGDLogisticRegression(), r"features column 'features' is null"),
    ((V([1.0, 2.0]), 1.0, 1.0), SGDLogisticRegression(), r"vector of size 2 .* size 3"),
    ((V([1.0, 2.0, 3.0]), math.nan, 1.0), SGDLinearRegression(), r"label column 'label' is nan"),
    ((V([1.0, 2.0, 3.0]), None, 1.0), SGDLinearRegression(), r"column 'label' is null"),
    ((V([1.0, 2.0, 3.0]), 2.0, 1.0), SGDLinearSVC(), r"label column 'label' must be 0 or 1"),
    ((V([1.0, 2.0, 3.0]), 2.0, 1.0), SGDLogisticRegression(family="binomial"),
     r"must be 0 or 1"),
    ((V([1.0, 2.0, 3.0]), 1.5, 1.0), SGDLogisticRegression(), r"class index .* got 1.5"),
    ((V([1.0, 2.0, 3.0]), -1.0, 1.0), SGDLogisticRegression(), r"class index .* got -1.0"),
    ((V([1.0, 2.0, 3.0]), 1.0, -2.0), SGDLogisticRegression(weightCol="weight"),
     r"weight column 'weight' must be finite and >= 0, got -2.0"),
    ((V([1.0, 2.0, 3.0]), 1.0, math.nan), SGDLinearRegression(weightCol="weight"),
     r"weight column 'weight' must be finite"),
    ((V([1.0, 2.0, 3.0]), 1.0, None), SGDLinearRegression(weightCol="weight"),
     r"column 'weight' is null"),
], ids=lambda x: str(x)[:40])
def test_bad_values_are_reported_with_column_and_row(spark, bad_row, estimator, match):
    df = frame(spark, with_row(good_rows(), 13, bad_row))
    with pytest.raises(InvalidDataError, match=match) as info:
        estimator.fit(df)
    assert "partition" in str(info.value) and "row" in str(info.value)
    assert gradspark_cached_rdds(spark) == []  # the failed fit released its blocks


def test_schema_problems_fail_before_any_job(spark):
    df = frame(spark, good_rows())
    with pytest.raises(InvalidDataError, match=r"label column 'y' not found"):
        SGDLogisticRegression(labelCol="y").fit(df)
    with pytest.raises(InvalidDataError, match=r"weight column 'w' not found"):
        SGDLogisticRegression(weightCol="w").fit(df)
    with pytest.raises(InvalidDataError, match=r"must be a pyspark.ml.linalg Vector"):
        SGDLogisticRegression(featuresCol="label").fit(df)
    strings = df.selectExpr("features", "cast(label as string) as label")
    with pytest.raises(InvalidDataError, match=r"label column 'label' must be numeric"):
        SGDLogisticRegression().fit(strings)


def test_empty_and_degenerate_data(spark):
    with pytest.raises(InvalidDataError, match="empty"):
        SGDLogisticRegression().fit(spark.createDataFrame([], SCHEMA))
    one_class = [(r[0], 1.0, 1.0) for r in good_rows()]
    with pytest.raises(InvalidDataError, match="single class"):
        SGDLogisticRegression().fit(frame(spark, one_class))
    zero_weights = [(r[0], r[1], 0.0) for r in good_rows()]
    with pytest.raises(InvalidDataError, match="sum to zero"):
        SGDLinearRegression(weightCol="weight").fit(frame(spark, zero_weights))
    nothing = [(None, 1.0, 1.0)] * 4
    with pytest.raises(InvalidDataError, match="null in every row"):
        SGDLinearRegression().fit(frame(spark, nothing))


def test_bad_params_fail_fast(spark):
    df = frame(spark, good_rows())
    with pytest.raises(ValueError, match="lbfgs.* full-batch"):
        SGDLogisticRegression(miniBatchFraction=0.5).fit(df)
    with pytest.raises(ValueError, match="miniBatchFraction must be in"):
        SGDLogisticRegression(optimizer="sgd", miniBatchFraction=0.0).fit(df)
    with pytest.raises(ValueError, match="elasticNetParam"):
        SGDLogisticRegression(elasticNetParam=2.0).fit(df)
    with pytest.raises(ValueError, match="loss must be one of"):
        SGDLinearRegression(loss="absolute").fit(df)


def test_divergence_is_an_error_not_a_model(spark):
    df = frame(spark, [(V([x * 100.0, 1.0, 2.0]), x * 3.0, 1.0) for x in range(20)])
    with pytest.raises(FloatingPointError, match="diverged.*stepSize"):
        SGDLinearRegression(optimizer="sgd", stepSize=1e6, maxIter=200, standardization=False,
                            fitIntercept=False).fit(df)


def test_transform_needs_the_features_column(spark):
    df = frame(spark, good_rows())
    model = SGDLogisticRegression().fit(df)
    with pytest.raises(ValueError, match="features column 'features' not found"):
        model.transform(df.drop("features"))
