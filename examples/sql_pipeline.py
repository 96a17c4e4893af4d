"""A SQL-driven feature pipeline: temporary views, SQL transforms, then training.

Raw "orders" are registered as a view, features are built in SQL (a join to a
per-customer aggregate, a log transform, a CASE bucket), and
SGDLinearRegression learns the order value from the SQL result; MLlib's
LinearRegression is fitted on the same rows.

    python examples/sql_pipeline.py [--rows 20000] [--master local[2]]
"""

from __future__ import annotations

import json

from example_data import arguments, session
from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.regression import LinearRegression
from pyspark.sql import functions as F

from gradspark import SGDLinearRegression

FEATURES_SQL = """
SELECT o.quantity, LOG1P(o.price) AS log_price, c.orders_per_customer,
       CASE WHEN o.weekday IN (5, 6) THEN 1.0 ELSE 0.0 END AS weekend,
       o.value
FROM orders o JOIN (SELECT customer, COUNT(*) AS orders_per_customer
                    FROM orders GROUP BY customer) c
  ON o.customer = c.customer
WHERE o.quantity > 0
"""


def main() -> None:
    args = arguments(__doc__, rows=20_000)
    spark = session(args.master, "gradspark-sql-pipeline")
    orders = spark.range(args.rows, numPartitions=4).select(
        (F.col("id") % 500).alias("customer"),
        F.floor(F.rand(1) * 10).alias("quantity"),
        (F.rand(2) * 100 + 1).alias("price"),
        (F.col("id") % 7).alias("weekday"))
    orders = orders.withColumn(
        "value", 3.0 * F.col("quantity") + 5.0 * F.log1p("price")
        + 2.0 * F.col("weekday").isin(5, 6).cast("double") + F.randn(3))
    orders.createOrReplaceTempView("orders")

    table = spark.sql(FEATURES_SQL)
    columns = ["quantity", "log_price", "orders_per_customer", "weekend"]
    data = VectorAssembler(inputCols=columns, outputCol="features").transform(table)
    data = data.withColumnRenamed("value", "label").cache()
    train, test = data.randomSplit([0.8, 0.2], seed=2)
    rmse = RegressionEvaluator(metricName="rmse")
    ours = SGDLinearRegression(regParam=0.0).fit(train)
    ref = LinearRegression(regParam=0.0).fit(train)
    result = {"gradspark_rmse": rmse.evaluate(ours.transform(test)),
              "mllib_rmse": rmse.evaluate(ref.transform(test)),
              "gradspark_coefficients": ours.coefficients.toArray().tolist(),
              "mllib_coefficients": ref.coefficients.toArray().tolist()}
    print(f"test RMSE: gradspark {result['gradspark_rmse']:.4f}, "
          f"MLlib {result['mllib_rmse']:.4f}")
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
