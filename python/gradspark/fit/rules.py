"""Rules across Params: combinations that cannot train correctly fail before any data pass.

A Param's own range is checked by its type converter (:mod:`gradspark.params`);
what one Param allows depending on another is checked here, once per fit, by
:func:`check_params` (called by :func:`gradspark.fit.plan.plan_data`). Engines
and trainers take the resolved plan and do not check Params again.
"""

from __future__ import annotations

import math

from gradspark.params import FIRST_ORDER, SGDParams


def _validate_communication(params: SGDParams) -> None:
    if not 0.0 < params.getCompressionRatio() <= 1.0:
        raise ValueError(f"compressionRatio must be in (0, 1], got {params.getCompressionRatio()}")
    if params.getLocalSteps() < 1:
        raise ValueError(f"localSteps must be >= 1, got {params.getLocalSteps()}")
    if not 0.0 < params.getWorkerQuorum() <= 1.0:
        raise ValueError(f"workerQuorum must be in (0, 1], got {params.getWorkerQuorum()}")
    if params.getMode() == "async" and (params.getLocalSteps() > 1
                                        or params.getWorkerQuorum() < 1.0):
        raise ValueError("localSteps and workerQuorum are sync-mode levers; async mode "
                         "already lets workers run ahead (maxStaleness)")
    throughput = params.getBatchSizing() == "throughput"
    if throughput and (params.getMode() != "sync" or params.getParameterServers()):
        raise ValueError("batchSizing='throughput' sizes the sync rounds of resident workers "
                         "(mode='sync', parameterServers=0); in async mode a faster worker "
                         "already pushes more often")
    if throughput and params.getMiniBatchFraction() >= 1.0:
        raise ValueError("batchSizing='throughput' moves rows of a mini-batch between "
                         "workers: set miniBatchFraction < 1 (a full batch uses every row)")
    if throughput and (params.getLocalSteps() > 1 or params.getWorkerQuorum() < 1.0
                       or params.getAggregationTopology() == "tree"):
        raise ValueError("batchSizing='throughput' needs localSteps=1, workerQuorum=1 and "
                         "aggregationTopology='star': it sizes each worker's gradient "
                         "answer by the time that answer takes")
    resident = params.needsResidentWorkers()
    if not resident:
        return
    if params.getOptimizer() == "lbfgs":
        raise ValueError(f"{resident} needs a first-order optimizer ({FIRST_ORDER}): "
                         "L-BFGS's line search needs exact full-batch gradients")
    if resident == "compression='fp16'" and params.getExecutionStrategy() == "jobPerStep":
        if params.getEngine() != "python":
            raise ValueError("compression='fp16' with executionStrategy='jobPerStep' "
                             "compresses the numpy engine's partition sums: set "
                             "engine='python' (the JVM kernels' sums are not compressed)")
        return
    if params.getEngine() == "jvm" or params.getExecutionStrategy() == "jobPerStep":
        raise ValueError(
            f"{resident} needs long-running workers that keep state between steps "
            "(executionStrategy='resident' or 'auto', engine='python' or 'auto'); "
            "a job per step has none"
        )
    if params.getWorkerQuorum() < 1.0 and params.getAggregationTopology() == "tree":
        raise ValueError("workerQuorum < 1 needs aggregationTopology='star': in a tree a "
                         "node's answer carries its whole subtree")


def has_l1(params: SGDParams) -> bool:
    return (params.hasParam("elasticNetParam") and params.getRegParam() > 0
            and params.getElasticNetParam() > 0)


def averaging_supported(params: SGDParams) -> bool:
    """Iterate averaging runs in the driver's sync trainer, one optimizer step per step."""
    return (params.getMode() == "sync" and not params.getParameterServers()
            and params.getLocalSteps() == 1)


def nonsmooth_loss(params: SGDParams) -> str:
    """The loss's name when it has no curvature bound for SVRG's steps, else ''."""
    if getattr(params, "_loss_without_curvature_bound", ""):
        return params._loss_without_curvature_bound
    if params.hasParam("loss") and params.getOrDefault("loss") == "huber":
        return "huber"
    return ""


def _check_svrg(params: SGDParams) -> None:
    """SVRG evaluates each batch twice, on the same rows, in the driver's sync trainer."""
    if params.getMode() != "sync" or params.getParameterServers() \
            or params.getLocalSteps() > 1:
        raise ValueError("optimizer='svrg' needs sync mode with localSteps=1 and no "
                         "parameterServers: its steps correct each batch's gradient by the "
                         "same batch's gradient at a snapshot, in the driver")
    if params.getWorkerQuorum() < 1.0 or params.getBatchSizing() != "fixed" \
            or params.getCompression() != "none":
        raise ValueError("optimizer='svrg' needs workerQuorum=1, batchSizing='fixed' and "
                         "compression='none': its correction needs the exact sums of the "
                         "same rows at two points")
    if params.getIterateAveraging() == "tail":
        raise ValueError("optimizer='svrg' converges without iterate averaging; set "
                         "iterateAveraging='auto' or 'none'")
    loss = nonsmooth_loss(params)
    if loss:
        raise ValueError(f"optimizer='svrg' scales its steps by a bound on the loss's "
                         f"curvature, which loss {loss!r} does not have; use another "
                         f"optimizer")


def check_params(params: SGDParams) -> None:
    """Raise ValueError on Param combinations that cannot train correctly."""
    if params.getOptimizer() == "svrg":
        _check_svrg(params)
    if params.getIterateAveraging() == "tail":
        if params.getOptimizer() == "lbfgs":
            raise ValueError("iterateAveraging='tail' averages first-order steps; "
                             "optimizer='lbfgs' has none (use " + FIRST_ORDER + ")")
        if not averaging_supported(params):
            raise ValueError("iterateAveraging='tail' needs sync mode with localSteps=1 and "
                             "no parameterServers (the driver's sync trainer averages)")
        if params.getValidationIndicatorCol():
            raise ValueError("iterateAveraging='tail' and validationIndicatorCol each choose "
                             "the returned weights; set one of them")
    if params.getValidationIndicatorCol():
        if params.getMode() == "async" or params.getParameterServers() \
                or params.getLocalSteps() > 1:
            raise ValueError("validationIndicatorCol needs sync mode with localSteps=1 "
                             "(the validation loss is measured between steps)")
        if params.getExecutionStrategy() == "resident":
            raise ValueError("validationIndicatorCol runs a job per step (validation passes "
                             "cannot run while resident workers hold the task slots); "
                             "use executionStrategy='auto' or 'jobPerStep'")
    for param, value in params.extractParamMap().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{param.name} must be a finite number, got {value}")
    if params.getTol() < 0:
        raise ValueError(f"tol must be >= 0, got {params.getTol()}")
    fraction = params.getMiniBatchFraction()
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"miniBatchFraction must be in (0, 1], got {fraction}")
    if params.getOptimizer() == "lbfgs" and fraction < 1.0:
        raise ValueError(
            "optimizer='lbfgs' needs full-batch gradients (miniBatchFraction=1.0); "
            f"use optimizer={FIRST_ORDER} for mini-batches"
        )
    if params.getMode() == "async":
        if params.getOptimizer() == "lbfgs":
            raise ValueError(
                f"mode='async' needs a first-order optimizer: set optimizer={FIRST_ORDER} "
                "(lbfgs, the default, is sync-only)"
            )
        if params.getMaxStaleness() < -1:
            raise ValueError(
                f"maxStaleness must be >= 0, or -1 for no bound; got {params.getMaxStaleness()}"
            )
        if params.getWorkerTimeout() <= 0:
            raise ValueError(f"workerTimeout must be > 0, got {params.getWorkerTimeout()}")
    policy = params.getStaleGradientPolicy()
    if policy != "none" and (params.getMode() != "async" or params.getParameterServers()):
        raise ValueError(f"staleGradientPolicy={policy!r} acts on the updates of async mode's "
                         "server in the driver (mode='async', parameterServers=0)")
    if params.getDelayCompensation() < 0:
        raise ValueError(f"delayCompensation must be >= 0, got {params.getDelayCompensation()}")
    shards = params.getParameterServers()
    if shards < 0:
        raise ValueError(f"parameterServers must be >= 0, got {shards}")
    if shards and params.getOptimizer() == "lbfgs":
        raise ValueError(f"parameterServers={shards} needs a first-order optimizer: set "
                         f"optimizer={FIRST_ORDER}")
    if shards and (params.getLocalSteps() > 1 or params.getWorkerQuorum() < 1.0
                   or params.getCompression() != "none"):
        raise ValueError(f"parameterServers={shards} runs plain (bulk-)synchronous or SSP "
                         "steps: localSteps, workerQuorum and lossy compression are for the "
                         "driver's server or resident workers")
    if params.getEngine() == "jvm" and params.getExecutionStrategy() == "resident":
        raise ValueError(
            "executionStrategy='resident' runs numpy kernels in resident Python workers; "
            "use engine='python' or 'auto' with it (engine='jvm' is jobPerStep only)"
        )
    _validate_communication(params)
    if params.getMaxIter() < 0:
        raise ValueError(f"maxIter must be >= 0, got {params.getMaxIter()}")
    if params.getRegParam() < 0:
        raise ValueError(f"regParam must be >= 0, got {params.getRegParam()}")
    if not 0.0 <= params.getElasticNetParam() <= 1.0:
        raise ValueError(
            f"elasticNetParam must be in [0, 1], got {params.getElasticNetParam()}"
        )
    if params.getStepSize() <= 0:
        raise ValueError(f"stepSize must be > 0, got {params.getStepSize()}")
    if params.getPreconditioning() == "diagonal" and params.getOptimizer() != "lbfgs":
        raise ValueError("preconditioning='diagonal' scales L-BFGS's steps (optimizer="
                         "'lbfgs'); svrg scales its steps by the same curvature bounds "
                         "already, and adagrad and adam by their own statistics")
    if not 0.0 <= params.getMomentum() < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {params.getMomentum()}")
    if params.getAggregationDepth() < 1:
        raise ValueError(
            f"aggregationDepth must be >= 1, got {params.getAggregationDepth()}"
        )
    if params.getBlockSize() < 1:
        raise ValueError(f"blockSize must be >= 1, got {params.getBlockSize()}")
