"""Model summaries with MLlib's fields and definitions: training history and metrics.

``model.summary`` (on the training data) and ``model.evaluate(df)`` return the
classes below, which answer what ``pyspark.ml``'s summaries answer, under the
same names and with the same definitions (``MulticlassMetrics``,
``BinaryClassificationMetrics`` with 100 bins, ``RegressionMetrics``, instance
weights included). Every metric is computed lazily with DataFrame aggregations,
so it runs on classic and Spark Connect sessions alike, and only small
aggregates (a confusion table, at most ~200 curve points) reach the driver.

One difference in the binned curves: MLlib groups consecutive distinct scores
inside each partition of its sorted RDD, so its bins depend on the partitioning;
here they are grouped over the global order. With fewer than 200 distinct
scores neither side bins and the curves are equal.
"""

from gradspark.summaries.classification import BinaryClassificationSummary, ClassificationSummary
from gradspark.summaries.prediction import BINS, PredictionSummary, RegressionSummary
from gradspark.summaries.training import (BinaryClassificationTrainingSummary,
                                          ClassificationTrainingSummary,
                                          RegressionTrainingSummary, TrainingSummary,
                                          training_summary)

__all__ = [
    "BINS", "PredictionSummary", "RegressionSummary", "ClassificationSummary",
    "BinaryClassificationSummary", "TrainingSummary", "RegressionTrainingSummary",
    "ClassificationTrainingSummary", "BinaryClassificationTrainingSummary", "training_summary",
]
