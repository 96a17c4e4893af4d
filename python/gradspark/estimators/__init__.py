"""pyspark.ml estimators and models."""

from gradspark.estimators.linear import SGDLinearRegression, SGDLinearRegressionModel
from gradspark.estimators.logistic import SGDLogisticRegression, SGDLogisticRegressionModel
from gradspark.estimators.svc import SGDLinearSVC, SGDLinearSVCModel
from gradspark.estimators.torch_estimator import TorchEstimator, TorchModel

__all__ = [
    "SGDLogisticRegression", "SGDLogisticRegressionModel",
    "SGDLinearRegression", "SGDLinearRegressionModel",
    "SGDLinearSVC", "SGDLinearSVCModel",
    "TorchEstimator", "TorchModel",
]
