"""Driver-side optimizers: small, pure and swappable.

First-order optimizers follow the optax shape: ``init(theta) -> state`` and
``update(theta, grad, state, lr, l1) -> (theta, state)``, where the state is
a plain dict of numpy arrays (easy to checkpoint) and L1 is handled by a
proximal (soft-threshold) step. SVRG (:mod:`gradspark.optim.variance_reduction`)
also asks the trainer for a full gradient at its snapshots and a second batch
gradient there. L-BFGS is full-batch and lives in
:mod:`gradspark.optim.lbfgs`.
"""

from gradspark.optim.averaging import TailAverage, averaged_weights
from gradspark.optim.first_order import (
    DEFAULT_STEP_SIZES, FTRL, SGD, Adagrad, Adam, make_first_order, soft_threshold,
)
from gradspark.optim.lbfgs import minimize_lbfgs
from gradspark.optim.schedules import learning_rate
from gradspark.optim.variance_reduction import SVRG

__all__ = [
    "SGD", "Adagrad", "Adam", "FTRL", "SVRG", "make_first_order", "soft_threshold",
    "DEFAULT_STEP_SIZES", "TailAverage", "averaged_weights",
    "minimize_lbfgs", "learning_rate",
]
