"""Sharded parameter servers: the weights and optimizer state live in executor tasks.

``parameterServers=N`` splits the parameters by key range
(:mod:`gradspark.trainer.shards`) over N server shards, each a
:class:`~gradspark.rpc.server.ParameterServer` thread inside one of the
workers' tasks (round robin), so the model's memory, its updates and the
weight/gradient traffic leave the driver. The driver keeps the
:class:`Coordinator`: the SSP clock (a worker asks it before each step),
the loss history (each worker reports its loss sums, each shard its part of
the penalty and of the step's norm), convergence, and the checkpoints.

A worker's step: permission for clock ``c`` from the coordinator; the rows
of step ``c`` (sampled from ``(seed, c, partition)``); pull the weights of
the features they touch from each shard (:mod:`gradspark.engine.touched`,
or whole slices on dense data); push each shard its part of the gradient
sums; report the loss sums to the coordinator.

A shard applies the async trainer's rule on its range: with
``maxStaleness = 0`` a step's pushes are summed in worker order and applied
once all workers have pushed; otherwise each push is applied on arrival.
Every optimizer here works coordinate by coordinate and, without centering,
so does the gradient, so a shard's arithmetic is the single server's on its
slice: bulk-synchronous sharded training gives the single server's weights
(tested to 1e-9). Centering (the standardized space with an intercept) ties
every coefficient's gradient to the intercept's and is refused: the raw
space, which ``parameterSpace="auto"`` picks for sparse data, has none.

The workers run as one barrier stage. Any lost task -- a worker or a shard
-- fails the stage; Spark retries it whole, the shards load the last
checkpoint the coordinator wrote (or the starting point, without
checkpoints) and every worker continues from that step. Mini-batches are
reproducible from ``(seed, step, partition)``, so a bulk-synchronous fit
killed and restored this way ends with the uninterrupted fit's weights.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Dict, List, Optional

import numpy as np

from gradspark.checkpoints import TrainingCheckpoints
from gradspark.comm.compression import Encoded
from gradspark.engine.worker_step import WorkerStep, scalars_of
from gradspark.rpc import ParameterClient, ParameterServer
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.stages.slots import require_task_slots, resident_stage_lock
from gradspark.stages.sources import by_partition
from gradspark.trainer.config import AsyncConfig
from gradspark.trainer.objective import LinearObjective
from gradspark.integrations.progress import Progress
from gradspark.trainer.shard_coordinator import Coordinator
from gradspark.trainer.shard_server import (
    FINAL,
    FINAL_COUNTS,
    LOSS,
    ShardRule,
    ShardTraining,
)
from gradspark.trainer.shards import ShardLayout, unpack_state
from gradspark.trainer.sync import TrainingResult, check_finite

logger = logging.getLogger(__name__)









def run_sharded_worker(coordinator: ParameterClient, shards: List[ParameterClient],
                       layout: ShardLayout, groups, step: WorkerStep, max_iter: int,
                       sparse_pull: bool = True) -> int:
    """A worker's loop (see the module docs); returns its steps."""
    worker = coordinator.worker
    touched = step.touched(groups) if sparse_pull else None
    ranges = [layout.map_range(s) for s in range(layout.num_shards)]
    steps = 0
    while True:
        permit = coordinator.pull()
        clock, attempt = permit.clock, permit.version
        if permit.stop or clock >= max_iter:
            break
        step.before([worker], clock, attempt)
        batch = step.sample(touched, clock)
        pieces = layout.split_keys(batch.keys) if batch is not None else None
        for s, client in enumerate(shards):
            client.request_weights(None if pieces is None else pieces[s][1])
        replies = [client.weights() for client in shards]
        if any(r.clock != clock for r in replies):
            raise RuntimeError(f"worker {worker}: shards at clocks "
                               f"{[r.clock for r in replies]}, coordinator at {clock}")
        values = np.concatenate([r.vector for r in replies])
        sums = step.sums(groups, values, clock, batch)
        step.after([worker], clock, sums)
        encoded = step.encode(sums, batch)
        if batch is not None:
            outgoing = [Encoded(hi - lo, encoded.values[part], local)
                        for (lo, hi), (part, local) in zip(ranges, pieces)]
        else:
            outgoing = [encoded[lo:hi] for lo, hi in ranges]
        scalars = scalars_of(sums)
        for client, reply, message in zip(shards, replies, outgoing):
            client.send_push(clock, reply.version, *scalars, message)
        if not all(client.acked() for client in shards):
            raise RuntimeError(f"worker {worker}: a shard refused step {clock}")
        coordinator.report(clock, attempt, LOSS, np.array(scalars, dtype=np.float64))
        steps += 1
    for client in shards:
        client.done()
    coordinator.done()
    return steps


def sharded_task(address, secret: bytes, objective: LinearObjective, layout: ShardLayout,
                 config: AsyncConfig, num_workers: int, loopback: bool,
                 checkpoint_interval: int):
    """The barrier task of one worker: host its shards, exchange addresses, work."""
    rules = [ShardRule.of(objective, layout, s) for s in range(layout.num_shards)]
    step = WorkerStep(objective.loss, objective.num_features, objective.num_outputs,
                      objective.mini_batch_fraction, objective.seed & 0xFFFFFFFF,
                      config.faults)
    timeout = config.worker_timeout

    def run(worker: int, tagged):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        groups = by_partition(tagged)
        host = "127.0.0.1" if loopback else \
            ctx.getTaskInfos()[worker].address.rsplit(":", 1)[0]
        hosted: Dict[int, tuple] = {}
        clients: List[ParameterClient] = []
        try:
            for shard in layout.hosts(num_workers)[worker]:
                reporter = ParameterClient(address, secret, num_workers + shard)
                clients.append(reporter)
                start = reporter.pull()
                rule = rules[shard]
                optimizer = config.first_order(rule.l2)
                theta, state = unpack_state(start.vector, optimizer.init(np.zeros(rule.size)),
                                            rule.size)
                report = functools.partial(_report, reporter, start.version)
                training = ShardTraining(rule, config, num_workers, start.clock, theta, state,
                                         report, checkpoint_interval)
                # as encrypted as the driver's server, which this task just reached
                server = ParameterServer(training, host, num_workers, secret,
                                         encrypt=reporter.encrypted)
                hosted[shard] = (training, server, reporter, start.version)
            gathered = ctx.allGather(json.dumps({s: v[1].address for s, v in hosted.items()}))
            addresses = {int(s): tuple(a) for text in gathered
                         for s, a in json.loads(text).items()}
            coordinator = ParameterClient(address, secret, worker)
            clients.append(coordinator)
            shards = [ParameterClient(addresses[s], secret, worker)
                      for s in range(layout.num_shards)]
            clients.extend(shards)
            steps = run_sharded_worker(coordinator, shards, layout, groups, step,
                                       config.max_iter, config.sparse_pull)
            for shard, (training, server, reporter, attempt) in hosted.items():
                training.wait_finished(num_workers, timeout)
                counts = {**server.traffic.totals(), "framesRejected": server.rejected_frames,
                          "gradientsRejected": server.rejected_gradients,
                          "connectionsRefused": server.refused_connections}
                with training.lock:
                    reporter.report(training.next_step, attempt, FINAL, np.concatenate(
                        [[counts[name] for name in FINAL_COUNTS], training.packed()]))
        finally:
            for _, server, _, _ in hosted.values():
                server.close()
            for client in clients:
                client.close()
        yield worker, ctx.attemptNumber(), steps

    return run


def _report(client: ParameterClient, attempt: int, step: int, what: int,
            values: np.ndarray) -> None:
    client.report(step, attempt, what, values)


def train_sharded(objective: LinearObjective, theta0: np.ndarray, config: AsyncConfig,
                  blocks, num_shards: int,
                  checkpoints: Optional[TrainingCheckpoints] = None) -> TrainingResult:
    """Train with ``num_shards`` parameter-server shards in the workers' tasks."""
    if config.optimizer == "lbfgs":
        raise ValueError("parameterServers needs a first-order optimizer, not L-BFGS")
    if config.compression.lossy:
        raise ValueError("parameterServers supports compression='none' only (sparse pushes "
                         "are exact and already small)")
    source = blocks
    sc = source.context
    num_workers = source.num_workers()
    if num_shards > objective.num_features:
        raise ValueError(f"parameterServers={num_shards} exceeds the {objective.num_features} "
                         "features to split")
    layout = ShardLayout.even(objective.num_features, objective.num_outputs, objective.size,
                              objective.map_size, num_shards)
    resumed = checkpoints.resume_state() if checkpoints else None
    progress = Progress(config.max_iter, config.label)
    coordinator = Coordinator(objective, layout, config, num_workers, theta0, checkpoints,
                              resumed, progress)
    ShardRule.of(objective, layout, 0)  # the centering check, before any task starts
    server = None
    try:
        if not coordinator.stopped:
            require_task_slots(sc, num_workers, use_gpu=False)
            bind, advertise = driver_endpoint(sc, config.host)
            with resident_stage_lock(sc):
                server = ParameterServer(coordinator, bind, num_workers + num_shards,
                                         advertise=advertise, encrypt=spark_encrypts(sc))
                try:
                    task = sharded_task(server.address, server.secret, objective, layout,
                                        config, num_workers, advertise.startswith("127."),
                                        checkpoints.interval if checkpoints else 0)
                    reports = source.run(task, "sharded", barrier=True)
                    logger.info("sharded: %d workers finished (%s)", len(reports), reports)
                finally:
                    server.close()
    finally:
        progress.close()
    if coordinator.failure is not None:
        raise coordinator.failure
    result = coordinator.result(server)
    check_finite(result, config)
    return result
