"""MLlib's classification summaries: per-label rates from one confusion pass, and the binary
curves (ROC, PR, by threshold) from MLlib 4.x's binned BinaryClassificationMetrics."""

from __future__ import annotations

import math
from functools import cached_property
from typing import List, Optional

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window
from gradspark.connect import context_of
from gradspark.summaries.prediction import BINS, PredictionSummary



class ClassificationSummary(PredictionSummary):
    """``ClassificationSummary``'s metrics (``MulticlassMetrics``, weighted)."""

    def __init__(self, predictions: DataFrame, labelCol: str, predictionCol: str,
                 featuresCol: str, weightCol: Optional[str] = None,
                 probabilityCol: str = "") -> None:
        super().__init__(predictions, labelCol, predictionCol, featuresCol, weightCol)
        self.probabilityCol = probabilityCol

    @cached_property
    def _confusion(self):
        """(labels, matrix): summed weight of label i predicted as label j, over the labels
        present in the label column (MLlib's ``labels``), predictions elsewhere dropped
        from the matrix but kept in the false positives."""
        rows = (self.predictions
                .groupBy(self._label().alias("label"),
                         F.col(self.predictionCol).cast("double").alias("prediction"))
                .agg(F.sum(self._weight()).alias("weight")).collect())
        if not rows:
            raise ValueError("the predictions DataFrame is empty: no metrics to compute")
        labels = sorted({r["label"] for r in rows})
        index = {label: i for i, label in enumerate(labels)}
        matrix = np.zeros((len(labels), len(labels)))
        false_positives = np.zeros(len(labels))
        for r in rows:
            i, j = index[r["label"]], index.get(r["prediction"])
            if j is not None:
                matrix[i, j] += r["weight"]
                if i != j:
                    false_positives[j] += r["weight"]
        by_label = np.array([sum(r["weight"] for r in rows if r["label"] == label)
                             for label in labels])
        return labels, matrix, false_positives, by_label

    @property
    def labels(self) -> List[float]:
        return list(self._confusion[0])

    def _tp_fp_counts(self):
        _, matrix, fp, by_label = self._confusion
        return np.diag(matrix), fp, by_label

    @property
    def recallByLabel(self) -> List[float]:
        tp, _, by_label = self._tp_fp_counts()
        return (tp / by_label).tolist()

    @property
    def truePositiveRateByLabel(self) -> List[float]:
        return self.recallByLabel

    @property
    def falsePositiveRateByLabel(self) -> List[float]:
        _, fp, by_label = self._tp_fp_counts()
        with np.errstate(divide="ignore", invalid="ignore"):
            return (fp / (by_label.sum() - by_label)).tolist()

    @property
    def precisionByLabel(self) -> List[float]:
        tp, fp, _ = self._tp_fp_counts()
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(tp + fp == 0, 0.0, tp / (tp + fp)).tolist()

    def fMeasureByLabel(self, beta: float = 1.0) -> List[float]:
        p, r = np.array(self.precisionByLabel), np.array(self.recallByLabel)
        b2 = beta * beta
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(p + r == 0, 0.0, (1 + b2) * p * r / (b2 * p + r)).tolist()

    def _weighted(self, per_label: List[float]) -> float:
        by_label = self._confusion[3]
        return float(np.dot(per_label, by_label) / by_label.sum())

    @property
    def accuracy(self) -> float:
        tp, _, by_label = self._tp_fp_counts()
        return float(tp.sum() / by_label.sum())

    @property
    def weightedRecall(self) -> float:
        return self._weighted(self.recallByLabel)

    @property
    def weightedTruePositiveRate(self) -> float:
        return self.weightedRecall

    @property
    def weightedFalsePositiveRate(self) -> float:
        return self._weighted(self.falsePositiveRateByLabel)

    @property
    def weightedPrecision(self) -> float:
        return self._weighted(self.precisionByLabel)

    def weightedFMeasure(self, beta: float = 1.0) -> float:
        return self._weighted(self.fMeasureByLabel(beta))

    @property
    def asBinary(self) -> "BinaryClassificationSummary":
        if not isinstance(self, BinaryClassificationSummary):
            raise TypeError("not a binary summary: the model has more than two classes")
        return self


class BinaryClassificationSummary(ClassificationSummary):
    """``BinaryClassificationSummary``: the multiclass metrics plus the threshold curves of
    ``scoreCol``'s second entry (the probability, or the raw margin for an SVM)."""

    def __init__(self, predictions: DataFrame, labelCol: str, predictionCol: str,
                 featuresCol: str, weightCol: Optional[str], scoreCol: str,
                 probabilityCol: str = "") -> None:
        super().__init__(predictions, labelCol, predictionCol, featuresCol, weightCol,
                         probabilityCol)
        self.scoreCol = scoreCol

    @cached_property
    def _cumulative(self):
        """(thresholds descending, true positives, false positives, positives, negatives)
        after MLlib's down-sampling to about ``BINS`` groups of consecutive scores."""
        from pyspark.ml.functions import vector_to_array

        score = vector_to_array(F.col(self.scoreCol))[1]
        positive = self._label() > 0.5
        weight = self._weight()
        # Cached in one partition per task slot, not spark.sql.shuffle.partitions (200 by
        # default): a cached plan keeps its shuffle's partitions (AQE does not coalesce
        # them), so every later pass over 600 scores ran 200 tasks (9 s where MLlib's
        # summary takes 0.7 s). Coalesced after the aggregation, not repartitioned before
        # it, so that each task still sends partial sums, not its rows.
        slots = context_of(self.predictions.sparkSession).defaultParallelism
        counts = (self.predictions.select(score.alias("score"), positive.alias("positive"),
                                          weight.alias("weight"))
                  .groupBy("score")
                  .agg(F.sum(F.when(F.col("positive"), F.col("weight")).otherwise(0.0))
                       .alias("pos"),
                       F.sum(F.when(F.col("positive"), 0.0).otherwise(F.col("weight")))
                       .alias("neg"))
                  .coalesce(max(1, slots)))
        # The per-score table is read twice (its size, then the bins): keep it, so the
        # predictions (a Python UDF per row) are computed once.
        table = counts = counts.persist()
        try:
            grouping = table.count() // BINS
            if grouping >= 2:
                # Bin k holds the k-th run of `grouping` distinct scores, highest first; its
                # threshold is its first (highest) score. One task ranks the distinct scores.
                rank = F.row_number().over(Window.orderBy(F.col("score").desc())) - 1
                counts = (counts.withColumn("bin", F.floor(rank / grouping)).groupBy("bin")
                          .agg(F.max("score").alias("score"), F.sum("pos").alias("pos"),
                               F.sum("neg").alias("neg")))
            # At most ~2 * BINS rows: sorted here, without a range-partitioning job.
            # Spark's order: NaN above every number.
            rows = sorted(counts.collect(),
                          key=lambda r: (not math.isnan(r["score"]), -r["score"]))
        finally:
            table.unpersist()
        if not rows:
            raise ValueError("the predictions DataFrame is empty: no metrics to compute")
        thresholds = np.array([r["score"] for r in rows])
        tp = np.cumsum([r["pos"] for r in rows])
        fp = np.cumsum([r["neg"] for r in rows])
        return thresholds, tp, fp, tp[-1], fp[-1]

    def _rates(self):
        thresholds, tp, fp, positives, negatives = self._cumulative
        with np.errstate(divide="ignore", invalid="ignore"):
            return thresholds, tp / positives, fp / negatives, tp / (tp + fp)

    def _frame(self, columns, *values) -> DataFrame:
        rows = [tuple(float(v) for v in row) for row in zip(*values)]
        schema = ", ".join(f"`{c}` double" for c in columns)
        return self.predictions.sparkSession.createDataFrame(rows, schema)

    def _roc_points(self):
        _, recall, fpr, _ = self._rates()
        return (np.concatenate([[0.0], fpr, [1.0]]), np.concatenate([[0.0], recall, [1.0]]))

    @property
    def roc(self) -> DataFrame:
        """(FPR, TPR) with (0, 0) prepended and (1, 1) appended."""
        return self._frame(("FPR", "TPR"), *self._roc_points())

    @property
    def areaUnderROC(self) -> float:
        x, y = self._roc_points()
        return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0))

    @property
    def pr(self) -> DataFrame:
        """(recall, precision) with (0, 1) prepended."""
        _, recall, _, precision = self._rates()
        return self._frame(("recall", "precision"), np.concatenate([[0.0], recall]),
                           np.concatenate([[1.0], precision]))

    def _by_threshold(self, name: str, values) -> DataFrame:
        return self._frame(("threshold", name), self._cumulative[0], values)

    @property
    def fMeasureByThreshold(self) -> DataFrame:
        _, recall, _, precision = self._rates()
        with np.errstate(divide="ignore", invalid="ignore"):
            f1 = 2.0 * precision * recall / (precision + recall)
        return self._by_threshold("F-Measure", f1)

    @property
    def precisionByThreshold(self) -> DataFrame:
        return self._by_threshold("precision", self._rates()[3])

    @property
    def recallByThreshold(self) -> DataFrame:
        return self._by_threshold("recall", self._rates()[1])
