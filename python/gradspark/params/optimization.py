"""Params of the optimizer: which one, its steps, the mini-batch and the parameter space."""

from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters

from gradspark.optim.first_order import DEFAULT_STEP_SIZES
from gradspark.params.choices import (AVERAGINGS, OPTIMIZERS, PARAMETER_SPACES,
                                      PRECONDITIONINGS, SCHEDULES, _one_of)


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
    # MLlib's HasStepSize has one default for every use; here the right step differs by
    # optimizer by an order of magnitude, so an unset stepSize is the optimizer's own.
    stepSize: Param[float] = Param(
        Params._dummy(),
        "stepSize",
        "step size of the first-order optimizers (> 0); not set: the optimizer's default ("
        + ", ".join(f"{k} {v}" for k, v in DEFAULT_STEP_SIZES.items()) + ")",
        typeConverter=TypeConverters.toFloat,
    )
    optimizer: Param[str] = Param(
        Params._dummy(),
        "optimizer",
        "driver-side optimizer: " + ", ".join(OPTIMIZERS)
        + " (lbfgs is full-batch only; svrg, variance-reduced mini-batch steps scaled by "
        "each coefficient's curvature, is sync mode only)",
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
    iterateAveraging: Param[str] = Param(
        Params._dummy(),
        "iterateAveraging",
        "the model of a mini-batch fit: 'tail' is the running average of the weights "
        "after the first pass over the data (or over the second half of maxIter, if "
        "shorter), which cancels most of the mini-batch noise; 'none' the last weights; "
        "'auto': tail for sgd, adagrad and adam with miniBatchFraction < 1, sync mode and "
        "no L1 penalty (averaging fills in L1's zeros), none otherwise (FTRL's weights are "
        "already a dual average)",
        typeConverter=_one_of("iterateAveraging", AVERAGINGS),
    )
    lazyUpdates: Param[bool] = Param(
        Params._dummy(),
        "lazyUpdates",
        "adagrad, adam and ftrl update the moments and take the step of a coordinate only "
        "when a mini-batch's data touches it; untouched coordinates decay by their L2 "
        "penalty alone (the same objective; see gradspark.optim.first_order). False: the "
        "dense textbook rules, every coordinate every step. The same on dense data",
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
    preconditioning: Param[str] = Param(
        Params._dummy(),
        "preconditioning",
        "L-BFGS's initial inverse Hessian (the objective is the same): 'diagonal' scales "
        "each parameter by the inverse of its curvature bound (the loss's curvature times "
        "the mean square of what it multiplies, plus its L2 strength, from the data's "
        "statistics), 'none' is MLlib's scalar; 'auto': diagonal when the bounds differ "
        "by more than 2x (standardization=False on sparse data, where a rare feature's L2 "
        "strength is 1/frequency times a common one's), for the losses that have one "
        "(not hinge or Huber), without L1 or bounds; none otherwise",
        typeConverter=_one_of("preconditioning", PRECONDITIONINGS),
    )

    def getStepSize(self) -> float:
        """``stepSize``, or the optimizer's default when it is not set."""
        if self.isDefined(self.stepSize):
            return self.getOrDefault(self.stepSize)
        return DEFAULT_STEP_SIZES.get(self.getOptimizer(), DEFAULT_STEP_SIZES["sgd"])

    def getIterateAveraging(self) -> str:
        return self.getOrDefault(self.iterateAveraging)

    def getOptimizer(self) -> str:
        return self.getOrDefault(self.optimizer)

    def getLearningRateSchedule(self) -> str:
        return self.getOrDefault(self.learningRateSchedule)

    def getMomentum(self) -> float:
        return self.getOrDefault(self.momentum)

    def getNesterov(self) -> bool:
        return self.getOrDefault(self.nesterov)

    def getLazyUpdates(self) -> bool:
        return self.getOrDefault(self.lazyUpdates)

    def getParameterSpace(self) -> str:
        return self.getOrDefault(self.parameterSpace)

    def getPreconditioning(self) -> str:
        return self.getOrDefault(self.preconditioning)
