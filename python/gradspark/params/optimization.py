"""Params of the optimizer: which one, its steps, the mini-batch and the parameter space."""

from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters

from gradspark.params.choices import OPTIMIZERS, PARAMETER_SPACES, SCHEDULES, _one_of


class HasMiniBatchFraction(Params):
    miniBatchFraction: Param[float] = Param(
        Params._dummy(),
        "miniBatchFraction",
        "fraction of rows sampled (Bernoulli, reproducible from seed and step) "
        "for each gradient step, in (0, 1]",
        typeConverter=TypeConverters.toFloat,
    )

    def getMiniBatchFraction(self) -> float:
        return self.getOrDefault(self.miniBatchFraction)


class HasOptimizer(Params):
    optimizer: Param[str] = Param(
        Params._dummy(),
        "optimizer",
        "driver-side optimizer: " + ", ".join(OPTIMIZERS)
        + " (lbfgs is full-batch only)",
        typeConverter=_one_of("optimizer", OPTIMIZERS),
    )
    learningRateSchedule: Param[str] = Param(
        Params._dummy(),
        "learningRateSchedule",
        "step size schedule for first-order optimizers: " + ", ".join(SCHEDULES),
        typeConverter=_one_of("learningRateSchedule", SCHEDULES),
    )
    momentum: Param[float] = Param(
        Params._dummy(),
        "momentum",
        "heavy-ball momentum for optimizer='sgd', in [0, 1)",
        typeConverter=TypeConverters.toFloat,
    )
    nesterov: Param[bool] = Param(
        Params._dummy(),
        "nesterov",
        "use Nesterov momentum with optimizer='sgd'",
        typeConverter=TypeConverters.toBoolean,
    )
    parameterSpace: Param[str] = Param(
        Params._dummy(),
        "parameterSpace",
        "the coordinates the optimizer moves (the objective is the same): 'standardized' "
        "(MLlib's: coefficients of centered, unit-variance features), 'raw' (coefficients "
        "of the input features as they are), or 'auto': raw for first-order optimizers on "
        "sparse data (fewer than half the entries stored), standardized otherwise",
        typeConverter=_one_of("parameterSpace", PARAMETER_SPACES),
    )

    def getOptimizer(self) -> str:
        return self.getOrDefault(self.optimizer)

    def getLearningRateSchedule(self) -> str:
        return self.getOrDefault(self.learningRateSchedule)

    def getMomentum(self) -> float:
        return self.getOrDefault(self.momentum)

    def getNesterov(self) -> bool:
        return self.getOrDefault(self.nesterov)

    def getParameterSpace(self) -> str:
        return self.getOrDefault(self.parameterSpace)
