"""The per-rank training loop of :class:`gradspark.TorchEstimator`.

Every barrier task runs :func:`train_rank` on its partition. The ranks agree
on one batch schedule so that each optimizer step is exactly one step of
single-process mini-batch SGD on the union of the ranks' batches:

* each epoch has ``S = ceil(N / batchSize)`` steps on every rank (N = rows of
  all partitions), so no rank waits in a collective the others never reach;
* rank r's rows, shuffled per epoch with seed ``(seed, epoch, r)``, are dealt
  to steps round-robin starting at ``offset_r`` = rows of the ranks before
  it, so every global batch has ``floor(N/S)`` or ``ceil(N/S)`` rows and every
  row is used once per epoch (no padding, no dropped rows);
* partitions need not be equal: rank r's mean batch loss is scaled by
  ``W * b_r / B`` (its share of the global batch B), so DDP's gradient
  *average* over W ranks is the gradient of the mean loss over the global
  batch. ``loss_fn`` must therefore return the batch mean (torch's default
  ``reduction="mean"``). A rank with no rows at some step runs one zero row
  with weight 0, so its collectives still happen.

Model initialization is seeded identically on every rank (and DDP broadcasts
rank 0's parameters anyway); torch's RNG is reseeded per (epoch, rank), so a
run resumed from an epoch checkpoint continues exactly as it would have.

Mid-epoch checkpoints (``checkpointUnit="step"``) add each rank's position:
the schedule above is a pure function of ``(seed, epoch, rank, step)``, so
``(epoch, step)`` says which rows every rank has trained on; with each rank's
torch RNG state (dropout and the like draw from it) and its partial loss and
row sums, gathered to rank 0 at the checkpoint, a resumed run continues at
the next unseen batch of every rank and ends bit-identical to an
uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from gradspark.checkpoints.epochs import EpochCheckpoints
from gradspark.data.validation import InvalidDataError
from gradspark.neural.group_rows import GroupRows, gather_partitions, held_out
from gradspark.neural.mesh import RankGrid, mesh_shape, place_ranks
from gradspark.neural.rehearsal import rehearse
from gradspark.neural.spec import (DataLayout, TorchTrainSpec, TorchTrainingError, agree_on_layout,
                                   check_partition, global_batch_size, steps_per_epoch, user_call)

logger = logging.getLogger(__name__)


def peak_memory(device) -> int:
    """This rank's peak memory in bytes: CUDA memory allocated during this fit on a GPU;
    the process's peak resident set on the CPU (a reused Python worker carries the peak
    of its earlier tasks)."""
    import resource

    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def validation_loss(strategy, model, held, device) -> float:
    """Mean loss of every batch group's held-out rows, in chunks of the strategy's
    ``chunk_rows``; every rank runs as many forward passes as the rank with the most
    chunks (under FSDP a forward pass gathers parameters, a collective every rank must
    join; a pipeline's stages pass activations)."""
    import torch
    import torch.distributed as dist

    features, labels = held
    size = strategy.chunk_rows
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    chunks = torch.tensor(math.ceil(len(features) / size), device=device)
    dist.all_reduce(chunks, op=dist.ReduceOp.MAX)
    model.eval()
    with torch.no_grad():
        for index in range(int(chunks)):
            chunk = slice(index * size, (index + 1) * size)
            rows = len(features[chunk])
            loss = strategy.evaluate(model, features[chunk], labels[chunk])
            if loss is not None and rows:
                totals[0] += loss.to(torch.float64) * rows
                totals[1] += rows
    dist.all_reduce(totals)
    return float(totals[0] / totals[1])


def train_rank(spec: TorchTrainSpec, group, grid: RankGrid, layout: DataLayout,
               X: np.ndarray, y: np.ndarray, X_held: Optional[np.ndarray] = None,
               y_held: Optional[np.ndarray] = None, reporter=None) -> Dict[str, Any]:
    """Train on this rank's partition (and, under model parallelism, its grid row's);
    returns the full state (on rank 0) and the loss history. With held-out rows
    (``spec.validation_tol``), stops early and returns the best epoch's parameters.
    ``reporter`` (the rank :attr:`RankGrid.reporter`): a
    :class:`gradspark.neural.progress.ProgressReporter`."""
    import torch
    import torch.distributed as dist
    from gradspark.neural.strategies import parallelism
    from gradspark.neural.pipeline_parallel import padded_batch_rows

    rank, world, device = group.rank, group.world_size, group.device
    total, width = layout.total, layout.width
    fingerprint = {**spec.fingerprint, "rows": total, "features": width}
    steps = steps_per_epoch(total, spec.batch_size)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(spec.seed)
    module = user_call("model_fn", spec.model_fn).to(device)
    strategy = parallelism(spec, grid, width, padded_batch_rows(
        layout.sizes, grid.grid, steps, spec.micro_batches)
        if spec.strategy == "pipeline" else 0)
    model = strategy.wrap(module, device)
    module = strategy.module  # what this rank holds: the whole module, or its stage
    optimizer = user_call("optimizer_fn", spec.optimizer_fn, model.parameters())
    members = grid.batch_group
    parts = gather_partitions((X, y, X_held, y_held), members, strategy.batch_process_group)
    rows = GroupRows(spec, layout, members, [p[:2] for p in parts], device)
    own = members.index(rank)  # this rank's partition among the group's
    held = held_out(spec, parts, device, width)
    replicas = grid.batch_groups  # gradients are averaged over this many batches

    store = (EpochCheckpoints(spec.checkpoint_dir, spec.keep_checkpoints)
             if spec.checkpoint_dir else None)
    # Rank 0 reads the checkpoint and broadcasts it, so only rank 0's host
    # needs to reach the directory on this attempt.
    holder = [store.load_latest() if (store is not None and rank == 0) else None]
    dist.broadcast_object_list(holder, src=0)
    state = holder[0]
    history: List[float] = []
    rows_per_epoch: List[int] = []
    checkpoint_seconds: List[float] = []  # each checkpoint's write, as this rank saw it
    start, start_step, position = 0, 0, None  # position: this rank's mid-epoch state
    validating = spec.validation_tol is not None
    validation = {"history": [], "best_loss": math.inf, "best_epoch": 0, "best_state": None}
    if state is not None:
        if state["fingerprint"] != fingerprint:
            raise TorchTrainingError(
                f"the checkpoint in {spec.checkpoint_dir} was written by another run "
                f"({state['fingerprint']}); this run is {fingerprint}: use another "
                f"checkpointDir or resume=False")
        if "shards" in state:  # sharded: every rank reads the chunks it holds
            shards = strategy.sharded_state(optimizer)
            store.read_shards(state, shards)
            strategy.load_sharded(optimizer, shards)
        else:
            strategy.load(model, optimizer, state["model"], state["optimizer"])
        history, start = list(state["history"]), int(state["epoch"])
        rows_per_epoch = list(state.get("rows_per_epoch", []))
        start_step = int(state.get("step", 0))
        if start_step:
            if state["layout"] != layout.sizes:
                raise TorchTrainingError(
                    f"the mid-epoch checkpoint in {spec.checkpoint_dir} was written by "
                    f"{len(state['layout'])} ranks holding {state['layout']} rows; this run "
                    f"has {layout.sizes}: resume with the same numWorkers (or resume=False)")
            position = state["ranks"][rank]
        validation = state.get("validation", validation)
        if rank == 0:
            logger.info("TorchEstimator resumed from epoch %d of %d%s", start, spec.epochs,
                        f", step {start_step} of {steps}" if start_step else "")

    def validate(epochs_done: int) -> bool:
        """Record the held-out loss; True: stop (MLlib's GBT rule, see
        gradspark.trainer.early_stopping)."""
        loss = validation_loss(strategy, model, held, device)
        validation["history"].append(loss)
        stop = validation["best_loss"] - loss < spec.validation_tol * max(loss, 0.01)
        if loss < validation["best_loss"]:
            validation.update(best_loss=loss, best_epoch=epochs_done,
                              best_state=strategy.model_state(model))
        return stop

    def save_mid_epoch(epoch: int, step: int, loss_sum, rows_done: int,
                       loss_rows: int) -> None:
        """Checkpoint ``step`` steps into ``epoch``: every rank's position, rank 0 writes."""
        mine = {"rng": torch.get_rng_state(), "loss_sum": float(loss_sum), "rows": rows_done,
                "loss_rows": loss_rows}
        if spec.use_gpu:
            mine["cuda_rng"] = torch.cuda.get_rng_state(device)
        ranks: List[Any] = [None] * world
        dist.all_gather_object(ranks, mine)
        save(epoch, {"step": step, "ranks": ranks, "layout": layout.sizes}, step)

    def save(epoch: int, extra: Dict[str, Any], step: int = 0) -> None:
        """Checkpoint ``epoch`` epochs and ``step`` steps in, in the spec's format; every
        rank calls it."""
        started = time.perf_counter()
        state = {"epoch": epoch, "history": history, "rows_per_epoch": rows_per_epoch,
                 "fingerprint": fingerprint, "validation": validation, **extra}
        if spec.checkpoint_format == "sharded":
            store.save_sharded(epoch, state, strategy.sharded_state(optimizer), rank,
                               step=step)
        else:
            model_state, optimizer_state = strategy.full_state(model, optimizer)
            if rank == 0:
                store.save(epoch, {**state, "model": model_state,
                                   "optimizer": optimizer_state}, step=step)
        checkpoint_seconds.append(time.perf_counter() - started)

    every_steps = spec.checkpoint_interval if spec.checkpoint_unit == "step" else None
    stopped = False
    if validating and not validation["history"]:
        stopped = validate(start)
    timings: List[float] = []
    for epoch in range(start, start if stopped else spec.epochs):
        fresh = state is None  # injected failures hit the first attempt only
        if spec.fail_epoch == epoch and spec.fail_rank == rank and fresh \
                and spec.fail_batch is None:
            raise TorchTrainingError(f"injected failure: rank {rank}, epoch {epoch}")
        started = time.perf_counter()
        first = start_step if epoch == start else 0
        if first:  # mid-epoch: where this rank's RNG and sums were
            torch.set_rng_state(position["rng"])
            if spec.use_gpu:
                torch.cuda.set_rng_state(position["cuda_rng"], device)
        else:  # one seed per batch group: a tensor-parallel row draws the same dropout
            torch.manual_seed(hash((spec.seed, epoch, members[0])) & 0x7FFFFFFF)
        rows.shuffle(epoch, steps)
        model.train()
        loss_sum = torch.tensor(position["loss_sum"] if first else 0.0, dtype=torch.float64,
                                device=device)
        rows_done = position["rows"] if first else 0
        loss_rows = position.get("loss_rows", rows_done) if first else 0  # rows in loss_sum
        for step in range(first, steps):
            if (spec.fail_batch == step and spec.fail_epoch == epoch
                    and spec.fail_rank == rank and fresh):
                if spec.fail_kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise TorchTrainingError(f"injected failure: rank {rank}, epoch {epoch}, "
                                         f"step {step}")
            batch_X, batch_y = rows.batch(step)
            batch = sum(len(rows.rows_of(i, step)) for i in range(len(members)))
            # The group's share of the global batch, times the number of groups whose
            # gradients are averaged: the step is the gradient of the global mean loss.
            scale = replicas * batch / global_batch_size(total, steps, step)
            optimizer.zero_grad(set_to_none=True)
            loss = strategy.train_step(model, batch_X, batch_y, scale)
            optimizer.step()
            if loss is not None:
                loss_sum += loss.to(torch.float64) * batch
                loss_rows += batch
            rows_done += len(rows.rows_of(own, step))
            if reporter is not None:
                reporter.rows += global_batch_size(total, steps, step)
                if reporter.due(step + 1, steps):
                    reporter.send(epoch, step + 1, steps, spec.epochs,
                                  float(loss_sum) / max(loss_rows, 1), epoch_end=False)
            if (store is not None and every_steps and step + 1 < steps
                    and (epoch * steps + step + 1) % every_steps == 0):
                save_mid_epoch(epoch, step + 1, loss_sum, rows_done, loss_rows)
        dist.all_reduce(loss_sum)
        rows_seen = torch.tensor(rows_done, dtype=torch.int64, device=device)
        dist.all_reduce(rows_seen)
        rows_per_epoch.append(int(rows_seen))
        epoch_loss = float(loss_sum) / total
        if not math.isfinite(epoch_loss):
            raise TorchTrainingError(f"training loss became {epoch_loss} in epoch {epoch + 1}; "
                                     f"lower the learning rate or check the data")
        history.append(epoch_loss)
        timings.append(time.perf_counter() - started)
        if rank == 0:
            logger.info("TorchEstimator epoch %d/%d loss %.6g", epoch + 1, spec.epochs,
                        epoch_loss)
        if reporter is not None:
            reporter.send(epoch, steps, steps, spec.epochs, epoch_loss, epoch_end=True)
        stopped = validating and validate(epoch + 1)
        done = epoch + 1
        due = (done * steps) % every_steps == 0 if every_steps else \
            done % spec.checkpoint_interval == 0
        if store is not None and (due or done == spec.epochs or stopped):
            save(done, {})
        if stopped:
            break
    holds = strategy.bytes_per_rank(optimizer)
    holds["peakMemory"] = peak_memory(device)
    if validating and validation["best_state"] is not None:
        final_state = validation["best_state"]
    else:
        final_state = strategy.model_state(model)
    return {"state": final_state if rank == 0 else None, "history": history, "start": start,
            "timings": timings, "checkpoint_seconds": checkpoint_seconds,
            "strategy": strategy.name, **holds, "mesh": [grid.replicas, grid.parallel],
            "start_step": start_step, "rows_per_epoch": rows_per_epoch,
            "rows": total, "steps": steps, "width": width,
            "validation": validation["history"], "best_epoch": validation["best_epoch"]}


def partition_trainer(spec: TorchTrainSpec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow(..., barrier=True)`` function: one result row per rank."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import io

        import torch
        from pyspark import BarrierTaskContext

        from gradspark.data.columnar import partition_arrays
        from gradspark.neural.process_group import process_group

        context = BarrierTaskContext.get()
        # One task per core: torch's default (all cores) would oversubscribe them.
        torch.set_num_threads(max(1, context.cpus()))
        # Every rank reports its rows (or what is wrong with them) through
        # allGather before any process group exists: bad data then ends the
        # stage with one clear error on every rank, instead of a failure that
        # Spark would retry while the other ranks wait in a collective.
        try:
            X, y, held = partition_arrays(batches, spec.features_col, spec.label_col)
            check_partition(X, y, spec)
            X_held, y_held, X, y = X[held], y[held], X[~held], y[~held]
            report = {"rows": len(X), "width": int(X.shape[1]), "held_out": len(X_held)}
        except InvalidDataError as error:
            X = y = X_held = y_held = None
            report = {"error": str(error)}
        reports = [json.loads(r) for r in context.allGather(json.dumps(report))]
        rank = context.partitionId()
        try:
            layout = agree_on_layout(reports, spec.features_col)
            if spec.validation_tol is not None and not sum(r["held_out"] for r in reports):
                raise InvalidDataError("validationIndicatorCol is true on no row: there is "
                                       "nothing to validate on")
        except InvalidDataError as error:
            yield _result_batch(rank, None, [], {"error": str(error)})
            return
        hosts = [info.address.rsplit(":", 1)[0] for info in context.getTaskInfos()]
        grid = RankGrid(spec.strategy, place_ranks(
            hosts, mesh_shape(spec.strategy, spec.mesh_shape, len(hosts))), rank)
        problems = context.allGather(rehearse(spec, X, y, layout.width, grid) or "")
        if any(problems):
            yield _result_batch(rank, None, [], {"user_error": next(p for p in problems if p)})
            return
        reporter = None
        if rank == grid.reporter:
            from gradspark.neural.progress import ProgressReporter

            reporter = ProgressReporter(spec.progress_address, spec.progress_secret,
                                        spec.progress_interval, context.attemptNumber())
        try:
            with process_group(spec.use_gpu) as group:
                result = train_rank(spec, group, grid, layout, X, y, X_held, y_held,
                                    reporter)
        finally:
            if reporter is not None:
                reporter.close()
        state = None
        if group.rank == 0:
            buffer = io.BytesIO()
            torch.save(result["state"], buffer)
            state = buffer.getvalue()
        info = {k: result[k] for k in ("start", "timings", "rows", "steps", "width",
                                       "validation", "best_epoch", "start_step",
                                       "rows_per_epoch", "strategy", "parameterBytes",
                                       "optimizerStateBytes", "checkpoint_seconds", "mesh",
                                       "peakMemory")}
        info["pid"] = os.getpid()
        yield _result_batch(group.rank, state, result["history"], info)

    return run


def _result_batch(rank: int, state: Optional[bytes], history: List[float],
                  info: Dict[str, Any]):
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(
        {"rank": [rank], "state": [state], "history": [history], "info": [json.dumps(info)]},
        schema=pa.schema([("rank", pa.int32()), ("state", pa.binary()),
                          ("history", pa.list_(pa.float64())), ("info", pa.string())]))
