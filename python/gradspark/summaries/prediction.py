"""MLlib's evaluation summaries of a model's predictions: the base class, and regression's
(computed in one pass of weighted sums, as MLlib's ``RegressionMetrics``)."""

from __future__ import annotations

import math
from functools import cached_property
from typing import Callable, Dict, List, Optional, Union

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F



BINS = 1000  # the bins of the BinaryClassificationMetrics behind MLlib 4.x summaries


class PredictionSummary:
    """What every summary holds: the predictions and the columns it reads.

    ``predictions`` may be a function that plans them: a training summary plans
    its scoring stage when it is first read, not in every fit (planning the
    Python scoring UDF cost about 0.1 s a fit, for a summary often never read).
    """

    def __init__(self, predictions: Union[DataFrame, Callable[[], DataFrame]],
                 labelCol: str, predictionCol: str, featuresCol: str,
                 weightCol: Optional[str] = None) -> None:
        self._predictions = predictions
        self.labelCol = labelCol
        self.predictionCol = predictionCol
        self.featuresCol = featuresCol
        self.weightCol = weightCol or ""

    @property
    def predictions(self) -> DataFrame:
        """The model's output columns appended to the summarized DataFrame."""
        if not isinstance(self._predictions, DataFrame):
            self._predictions = self._predictions()
        return self._predictions

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
