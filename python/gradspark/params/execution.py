"""Params of how a fit runs: sync or async, parameter servers, kernels and strategy, blocks."""

from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters

from gradspark.params.choices import (ENGINES, MODES, STALE_GRADIENT_POLICIES, STRATEGIES,
                                      TOPOLOGIES, _one_of)


class HasMode(Params):
    """How workers and the driver's optimizer meet: in lockstep or with bounded staleness."""

    mode: Param[str] = Param(
        Params._dummy(),
        "mode",
        "training mode: 'sync' (bulk-synchronous, one treeAggregate per step) or 'async' "
        "(workers push gradients to a parameter server on the driver, bounded staleness)",
        typeConverter=_one_of("mode", MODES),
    )
    maxStaleness: Param[int] = Param(
        Params._dummy(),
        "maxStaleness",
        "async mode: how many steps a worker may run ahead of the slowest one (SSP); "
        "0 is bulk-synchronous, -1 removes the bound (Hogwild-style)",
        typeConverter=TypeConverters.toInt,
    )
    workerTimeout: Param[float] = Param(
        Params._dummy(),
        "workerTimeout",
        "async mode: seconds a worker may go unheard of (not started, lost, hung) before "
        "it stops holding the others back; it rejoins when it comes back",
        typeConverter=TypeConverters.toFloat,
    )

    def getMode(self) -> str:
        return self.getOrDefault(self.mode)

    def getMaxStaleness(self) -> int:
        return self.getOrDefault(self.maxStaleness)

    def getWorkerTimeout(self) -> float:
        return self.getOrDefault(self.workerTimeout)


class HasParameterServers(Params):
    """Where the parameters live while workers push gradients: the driver, or shards."""

    parameterServers: Param[int] = Param(
        Params._dummy(),
        "parameterServers",
        "0: one parameter server in the driver (async mode) or none (sync); N >= 1: the "
        "weights and optimizer state split by key range over N server shards hosted in the "
        "workers' executor tasks, the driver keeping only the clock and the checkpoints "
        "(first-order optimizers, uncentered parameters; sync mode runs them "
        "bulk-synchronously, async with maxStaleness)",
        typeConverter=TypeConverters.toInt,
    )
    parameterServerHost: Param[str] = Param(
        Params._dummy(),
        "parameterServerHost",
        "async mode: the driver address the parameter server binds, reachable from the "
        "executors; empty uses spark.driver.host",
        typeConverter=TypeConverters.toString,
    )

    def getParameterServers(self) -> int:
        return self.getOrDefault(self.parameterServers)

    def getParameterServerHost(self) -> str:
        return self.getOrDefault(self.parameterServerHost)


class HasStaleGradients(Params):
    """What async mode's server does with a stale gradient."""

    staleGradientPolicy: Param[str] = Param(
        Params._dummy(),
        "staleGradientPolicy",
        "async mode: what the server does with a gradient computed tau updates ago: "
        "'none' (apply it as is), 'scale' (learning rate / (1 + tau), DynSGD) or "
        "'compensate' (g + delayCompensation * g * g * (w_now - w_pulled), DC-ASGD)",
        typeConverter=_one_of("staleGradientPolicy", STALE_GRADIENT_POLICIES),
    )
    delayCompensation: Param[float] = Param(
        Params._dummy(),
        "delayCompensation",
        "staleGradientPolicy='compensate': lambda, the weight of the diagonal Hessian "
        "approximation g * g (>= 0); with adaptiveCompensation it is lambda_0 in "
        "lambda_0 / sqrt(mean square of g)",
        typeConverter=TypeConverters.toFloat,
    )
    adaptiveCompensation: Param[bool] = Param(
        Params._dummy(),
        "adaptiveCompensation",
        "staleGradientPolicy='compensate': DC-ASGD-a, lambda per coordinate divided by "
        "the root of a moving mean square of its gradients (decay 0.95)",
        typeConverter=TypeConverters.toBoolean,
    )

    def getStaleGradientPolicy(self) -> str:
        return self.getOrDefault(self.staleGradientPolicy)

    def getDelayCompensation(self) -> float:
        return self.getOrDefault(self.delayCompensation)

    def getAdaptiveCompensation(self) -> bool:
        return self.getOrDefault(self.adaptiveCompensation)


class HasEngine(Params):
    engine: Param[str] = Param(
        Params._dummy(),
        "engine",
        "where sync mode's gradient kernels run: 'python' (numpy in Python workers), "
        "'jvm' (Scala kernels over blocks cached in the JVM; needs the gradspark kernels "
        "jar) or 'auto'",
        typeConverter=_one_of("engine", ENGINES),
    )
    executionStrategy: Param[str] = Param(
        Params._dummy(),
        "executionStrategy",
        "how sync mode runs a step: 'jobPerStep' (a broadcast and a treeAggregate job per "
        "step), 'resident' (one long-running stage keeps the blocks in Python workers' "
        "memory; a step is one message round with the driver; python engine only) or "
        "'auto'",
        typeConverter=_one_of("executionStrategy", STRATEGIES),
    )

    aggregationTopology: Param[str] = Param(
        Params._dummy(),
        "aggregationTopology",
        "resident strategy: 'star' (every worker answers the driver) or 'tree' (workers "
        "combine their sums in a tree of fan-in ceil(workers ** (1 / aggregationDepth)), "
        "as treeAggregate, so the driver exchanges one message per step; a barrier "
        "stage). jobPerStep always uses treeAggregate",
        typeConverter=_one_of("aggregationTopology", TOPOLOGIES),
    )

    def getEngine(self) -> str:
        return self.getOrDefault(self.engine)

    def getExecutionStrategy(self) -> str:
        return self.getOrDefault(self.executionStrategy)

    def getAggregationTopology(self) -> str:
        return self.getOrDefault(self.aggregationTopology)


class HasBlockSize(Params):
    blockSize: Param[int] = Param(
        Params._dummy(),
        "blockSize",
        "rows per cached block; gradients are computed one block (matrix) at a time",
        typeConverter=TypeConverters.toInt,
    )

    def getBlockSize(self) -> int:
        return self.getOrDefault(self.blockSize)
