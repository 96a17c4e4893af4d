"""Training summaries: the fit's history (:class:`TrainingSummary`) joined to MLlib's
metrics on the training data (``model.summary``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gradspark.report import LossCurve
from gradspark.summaries.classification import BinaryClassificationSummary, ClassificationSummary
from gradspark.summaries.prediction import RegressionSummary

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
