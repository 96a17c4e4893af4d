"""Early stopping on held-out rows (``validationIndicatorCol``).

After every step the trainer hands the parameters to :class:`EarlyStopping`, which
measures the validation loss (the weighted mean loss of the held-out rows, without
the penalty) and applies MLlib's gradient-boosted trees rule: stop as soon as a step
improves the best loss by less than ``tol * max(loss, 0.01)``. The parameters with
the lowest validation loss seen become the model.
"""

from __future__ import annotations

import logging
from typing import Callable, List, Optional

import numpy as np

logger = logging.getLogger(__name__)


class EarlyStopping:
    def __init__(self, validation_loss: Callable[[np.ndarray], float], tol: float) -> None:
        self.validation_loss = validation_loss
        self.tol = tol
        self.history: List[float] = []
        self.best_loss = np.inf
        self.best_theta: Optional[np.ndarray] = None
        self.best_step = 0

    def __call__(self, step: int, theta: np.ndarray) -> bool:
        """Record the loss at ``theta`` (after ``step`` steps); True means stop."""
        loss = float(self.validation_loss(theta))
        self.history.append(loss)
        stop = self.best_loss - loss < self.tol * max(loss, 0.01)
        if loss < self.best_loss:  # (MLlib drops a last, too small gain; we keep it)
            self.best_loss, self.best_theta, self.best_step = loss, theta.copy(), step
        if stop:
            logger.info("validation loss %.6g after step %d: improved by less than "
                        "validationTol; stopping with step %d's parameters", loss, step,
                        self.best_step)
        return stop

    def metrics(self) -> dict:
        return {"validationHistory": list(self.history), "bestIteration": self.best_step}
