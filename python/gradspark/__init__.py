"""gradspark: distributed SGD estimators for Spark ML.

The driver owns the parameters and the optimizer state; executors compute
gradients of their cached partitions, summed with ``treeAggregate``.
``TorchEstimator`` hands a barrier stage's tasks to torch DDP instead.

Layout: ``estimators`` (pyspark.ml Estimator/Model classes) -> ``trainer``
(sync loop, objective) -> ``engine`` (distributed gradient sums) ->
``losses`` / ``optim`` (per-example losses, optimizers); ``data`` turns
DataFrames into validated, cached blocks.
"""

from gradspark import pyspark_fixes
from gradspark.data.validation import InvalidDataError
from gradspark.estimators import (
    SGDLinearRegression,
    SGDLinearRegressionModel,
    SGDLinearSVC,
    SGDLinearSVCModel,
    SGDLogisticRegression,
    SGDLogisticRegressionModel,
    TorchEstimator,
    TorchModel,
)
from gradspark.neural.spec import TorchTrainingError

__version__ = "0.1.0"

pyspark_fixes.install()  # a pyspark bug that loads wrong CrossValidator sub-models

__all__ = [
    "InvalidDataError",
    "SGDLogisticRegression", "SGDLogisticRegressionModel",
    "SGDLinearRegression", "SGDLinearRegressionModel",
    "SGDLinearSVC", "SGDLinearSVCModel",
    "TorchEstimator", "TorchModel", "TorchTrainingError",
]
