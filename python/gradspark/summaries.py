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

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Dict, List, Optional

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from gradspark.report import LossCurve

BINS = 1000  # the bins of the BinaryClassificationMetrics behind MLlib 4.x summaries


def training_summary(model: Any) -> Any:
    """``model.summary``, whether the model's class has it as a property (most MLlib
    models) or as a method (``LinearSVCModel``, in MLlib and here)."""
    summary = model.summary
    return summary() if callable(summary) else summary


@dataclass
class TrainingSummary(LossCurve):
    """Training history, as MLlib's ``summary.objectiveHistory``/``totalIterations``;
    ``saveLossPlot(path)`` draws it (matplotlib)."""

    objectiveHistory: List[float]
    totalIterations: int
    converged: bool
    optimizer: str
    numInstances: int
    weightSum: float
    extra: Dict[str, Any] = field(default_factory=dict)
    # validationIndicatorCol: the held-out loss at the start and after each step
    validationHistory: List[float] = field(default_factory=list)
    bestIteration: Optional[int] = None  # the step whose parameters the model holds
    # solver='normal' without L1: diag((A^T W A)^-1) per coefficient (then the intercept),
    # MLlib's WeightedLeastSquaresModel.diagInvAtWA; None for iterative fits
    diagInvAtWA: Optional[List[float]] = None


class PredictionSummary:
    """What every summary holds: the predictions and the columns it reads."""

    def __init__(self, predictions: DataFrame, labelCol: str, predictionCol: str,
                 featuresCol: str, weightCol: Optional[str] = None) -> None:
        self.predictions = predictions
        self.labelCol = labelCol
        self.predictionCol = predictionCol
        self.featuresCol = featuresCol
        self.weightCol = weightCol or ""

    def _label(self):
        return F.col(self.labelCol).cast("double")

    def _weight(self):
        return F.col(self.weightCol).cast("double") if self.weightCol else F.lit(1.0)


class RegressionSummary(PredictionSummary):
    """``LinearRegressionSummary``'s metrics (``RegressionMetrics``, weighted)."""

    def __init__(self, predictions: DataFrame, labelCol: str, predictionCol: str,
                 featuresCol: str, weightCol: Optional[str], numCoefficients: int,
                 fitIntercept: bool) -> None:
        super().__init__(predictions, labelCol, predictionCol, featuresCol, weightCol)
        self._num_coefficients = numCoefficients
        self._fit_intercept = fitIntercept

    @cached_property
    def _sums(self) -> Dict[str, float]:
        y, w = self._label(), self._weight()
        yhat = F.col(self.predictionCol)
        r = y - yhat
        row = self.predictions.select(
            F.count(F.lit(1)).alias("n"), F.sum(w).alias("w"), F.sum(w * w).alias("ww"),
            F.sum(w * y).alias("wy"), F.sum(w * y * y).alias("wyy"),
            F.sum(w * yhat).alias("wp"), F.sum(w * yhat * yhat).alias("wpp"),
            F.sum(w * r * r).alias("wrr"), F.sum(w * F.abs(r)).alias("war"),
        ).first()
        return {k: float(row[k] or 0.0) for k in row.asDict()}

    @property
    def numInstances(self) -> int:
        return int(self._sums["n"])

    @property
    def degreesOfFreedom(self) -> int:
        return self.numInstances - self._num_coefficients - int(self._fit_intercept)

    @property
    def meanSquaredError(self) -> float:
        return self._sums["wrr"] / self._sums["w"]

    @property
    def rootMeanSquaredError(self) -> float:
        return math.sqrt(self.meanSquaredError)

    @property
    def meanAbsoluteError(self) -> float:
        return self._sums["war"] / self._sums["w"]

    @property
    def explainedVariance(self) -> float:
        s = self._sums
        mean = s["wy"] / s["w"]
        ss_reg = s["wpp"] - 2 * mean * s["wp"] + mean * mean * s["w"]
        return ss_reg / s["w"]

    @property
    def r2(self) -> float:
        s = self._sums
        if not self._fit_intercept:  # regression through the origin
            return 1.0 - s["wrr"] / s["wyy"]
        mean = s["wy"] / s["w"]
        squares = s["wyy"] - s["w"] * mean * mean
        # MLlib: the summarizer's weighted (unbiased) variance times (weightSum - 1)
        ss_tot = squares / (s["w"] - s["ww"] / s["w"]) * (s["w"] - 1.0)
        return 1.0 - s["wrr"] / ss_tot

    @property
    def r2adj(self) -> float:
        n, k = self.numInstances, int(self._fit_intercept)
        return 1.0 - (1.0 - self.r2) * (n - k) / (n - self._num_coefficients - k)

    @property
    def residuals(self) -> DataFrame:
        """label - prediction, one row per instance, as a column named ``residuals``."""
        return self.predictions.select(
            (self._label() - F.col(self.predictionCol)).alias("residuals"))

    def _diag_inv_atwa(self) -> Optional[List[float]]:
        """The normal equations' diag((A^T W A)^-1), where the fit had them."""
        return None

    def _coefficient_covariance(self, name: str) -> np.ndarray:
        diagonal = self._diag_inv_atwa()
        if diagonal is None:
            raise NotImplementedError(
                f"{name}: No Std. Error of coefficients available for this model. MLlib has "
                "them only from its normal-equation solver without L1 (solver='normal' or "
                "'auto' below 4,096 features, elasticNetParam=0 or regParam=0), and only in "
                "the training summary; so does gradspark")
        return np.asarray(diagonal, dtype=np.float64)

    @property
    def coefficientStandardErrors(self) -> List[float]:
        """sqrt(diag((A^T W A)^-1) * RSS / degreesOfFreedom), the intercept's last."""
        diagonal = self._coefficient_covariance("coefficientStandardErrors")
        rss = self._sums["wrr"]  # sum of w * residual^2 (w = 1 without weightCol)
        return np.sqrt(diagonal * rss / self.degreesOfFreedom).tolist()

    @property
    def tValues(self) -> List[float]:
        """Each estimate over its standard error, the intercept's last."""
        estimates = np.asarray(self._estimates(), dtype=np.float64)
        return (estimates / np.asarray(self.coefficientStandardErrors)).tolist()

    @property
    def pValues(self) -> List[float]:
        """Two-sided p-values of the t statistics (Student's t, degreesOfFreedom)."""
        from scipy.stats import t as students_t

        # MLlib's 2 * (1 - cdf), not the sf: the same values, underflow to 0 included
        cdf = students_t.cdf(np.abs(self.tValues), self.degreesOfFreedom)
        return (2.0 * (1.0 - cdf)).tolist()

    def _estimates(self) -> List[float]:
        raise NotImplementedError(
            "tValues need the model's coefficients: only a training summary has them")

    @property
    def devianceResiduals(self) -> List[float]:
        """[min, max] of the weighted residuals (label - prediction) * sqrt(weight)."""
        weighted = (self._label() - F.col(self.predictionCol)) * F.sqrt(self._weight())
        row = self.predictions.select(F.min(weighted).alias("low"),
                                      F.max(weighted).alias("high")).first()
        return [float(row["low"]), float(row["high"])]


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
        counts = (self.predictions.select(score.alias("score"), positive.alias("positive"),
                                          weight.alias("weight"))
                  .groupBy("score")
                  .agg(F.sum(F.when(F.col("positive"), F.col("weight")).otherwise(0.0))
                       .alias("pos"),
                       F.sum(F.when(F.col("positive"), 0.0).otherwise(F.col("weight")))
                       .alias("neg")))
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
            rows = counts.orderBy(F.col("score").desc()).collect()
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


class _Trained(LossCurve):
    """The training history beside the metrics, for ``model.summary``."""

    def __init__(self, history: TrainingSummary, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.history = history

    @property
    def objectiveHistory(self) -> List[float]:
        return self.history.objectiveHistory

    @property
    def totalIterations(self) -> int:
        return self.history.totalIterations

    @property
    def converged(self) -> bool:
        return self.history.converged

    @property
    def optimizer(self) -> str:
        return self.history.optimizer

    @property
    def numInstances(self) -> int:
        return self.history.numInstances

    @property
    def weightSum(self) -> float:
        return self.history.weightSum

    @property
    def extra(self) -> Dict[str, Any]:
        return self.history.extra

    @property
    def validationHistory(self) -> List[float]:
        return self.history.validationHistory

    @property
    def bestIteration(self) -> Optional[int]:
        return self.history.bestIteration


class RegressionTrainingSummary(_Trained, RegressionSummary):
    """``model.summary`` of a regression: history and metrics on the training data, and
    with solver='normal', the coefficients' standard errors, t- and p-values."""

    def __init__(self, history: TrainingSummary, *args, estimates: Optional[List[float]] = None,
                 **kwargs) -> None:
        super().__init__(history, *args, **kwargs)
        self._fitted_estimates = estimates

    def _diag_inv_atwa(self) -> Optional[List[float]]:
        return self.history.diagInvAtWA

    def _estimates(self) -> List[float]:
        return self._fitted_estimates


class ClassificationTrainingSummary(_Trained, ClassificationSummary):
    """``model.summary`` of a multiclass model."""


class BinaryClassificationTrainingSummary(_Trained, BinaryClassificationSummary):
    """``model.summary`` of a binary classifier."""
