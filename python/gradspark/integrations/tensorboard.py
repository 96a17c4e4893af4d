"""TensorBoard event files for a fit (the ``tensorboardDir`` Param).

Written with TensorBoard's own event-file writer and protos (the ``tensorboard``
package, the optional extra ``gradspark[tensorboard]``; torch's
``SummaryWriter`` is the same writer, but the linear estimators never import
torch). A fit writes one run, ``<tensorboardDir>/<Estimator uid>-<time>``:

* ``loss``: every step's training loss, as the progress log shows it;
* ``learning_rate``: the schedule's rate at every step (first-order optimizers);
* ``staleness``: a histogram of how many steps each async pull was ahead of the
  slowest worker;
* ``rows_per_second/worker_<i>``: each async worker's rows over the fit's wall time;
* TorchEstimator: ``loss`` and ``rows_per_second`` per progress report of rank 0,
  ``epoch_seconds`` per epoch.

A local path (or ``file:``) is written in place; any other Hadoop file system
(``hdfs://``, ``s3a://``, ...) gets the finished files copied there, as our
checkpoints are written, when the fit ends.

While a fit runs, :func:`current` is the run's writer (a context variable the
trainers' :class:`~gradspark.integrations.progress.Progress` reads when it is made).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import tempfile
import time
from typing import Iterator, Optional, Sequence
from urllib.parse import urlparse

import numpy as np

_CURRENT: contextvars.ContextVar[Optional["TensorBoardRun"]] = contextvars.ContextVar(
    "gradspark_tensorboard", default=None)


def current() -> Optional["TensorBoardRun"]:
    return _CURRENT.get()


class TensorBoardRun:
    """One fit's event file: scalars and histograms by step."""

    def __init__(self, directory: str, name: str, spark=None) -> None:
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as missing:
            raise ImportError("tensorboardDir needs the tensorboard package: pip install "
                              "'gradspark[tensorboard]'") from missing
        scheme = urlparse(directory).scheme
        self.remote = None if scheme in ("", "file") else directory.rstrip("/") + "/" + name
        self.spark = spark
        local_root = (directory[len("file:"):] if scheme == "file" else directory) \
            if self.remote is None else tempfile.mkdtemp(prefix="gradspark-tensorboard-")
        self.local = os.path.join(local_root, name)
        os.makedirs(self.local, exist_ok=True)
        self._writer = EventFileWriter(self.local)
        self.path = self.remote or self.local
        self.steps_logged = 0  # loss values logged live (by the trainer's Progress)

    def scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._add(Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]), step)

    def histogram(self, tag: str, values: Sequence[float], step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary

        values = np.asarray(values, dtype=np.float64)
        if not values.size:
            return
        edges = np.unique(values)  # one bucket per distinct value (small integer data)
        counts = np.searchsorted(np.sort(values), edges, side="right")
        counts = np.diff(np.concatenate([[0], counts]))
        proto = HistogramProto(min=float(values.min()), max=float(values.max()),
                               num=float(values.size), sum=float(values.sum()),
                               sum_squares=float((values ** 2).sum()),
                               bucket_limit=edges.tolist(), bucket=counts.astype(float).tolist())
        self._add(Summary(value=[Summary.Value(tag=tag, histo=proto)]), step)

    def _add(self, summary, step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self._writer.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def close(self) -> None:
        self._writer.close()
        if self.remote is not None:  # copy the finished run to hdfs/s3/...
            jvm = self.spark.sparkContext._jvm
            target = jvm.org.apache.hadoop.fs.Path(self.remote)
            fs = target.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
            fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(self.local),
                                 target)
            shutil.rmtree(os.path.dirname(self.local), ignore_errors=True)


@contextlib.contextmanager
def tensorboard_run(directory: str, name: str, spark=None) -> Iterator[Optional[TensorBoardRun]]:
    """The fit's run while the block runs (None when ``directory`` is empty)."""
    if not directory:
        yield None
        return
    run = TensorBoardRun(directory, name, spark)
    token = _CURRENT.set(run)
    try:
        yield run
    finally:
        _CURRENT.reset(token)
        run.close()


def write_fit_curves(run: TensorBoardRun, estimator, model) -> None:
    """What a finished linear fit adds to its run: the loss curve (when no step was
    logged live, as for the normal equations), the learning rate per step, the async
    staleness histogram and every worker's rows per second."""
    from gradspark.optim.schedules import learning_rate

    summary = model.summary() if callable(model.summary) else model.summary
    history = list(summary.objectiveHistory)
    if not run.steps_logged:
        for step, loss in enumerate(history):
            run.scalar("loss", loss, step)
    extra = getattr(summary, "extra", {}) or {}
    if estimator.getOptimizer() != "lbfgs" and extra.get("engine") != "normal":
        for step in range(1, len(history) + 1):
            run.scalar("learning_rate", learning_rate(
                estimator.getLearningRateSchedule(), estimator.getStepSize(), step - 1,
                estimator.getMaxIter()), step)
    counts = extra.get("stalenessHistogram")
    if counts:
        run.histogram("staleness", np.repeat([float(k) for k in counts],
                                             [int(v) for v in counts.values()]), len(history))
    for worker, rate in enumerate(extra.get("workerRowsPerSecond") or []):
        run.scalar(f"rows_per_second/worker_{worker}", rate, len(history))


def write_torch_curves(run: TensorBoardRun, reports, summary) -> None:
    """A finished TorchEstimator fit's run: rank 0's live reports (``loss/rank0`` and
    ``rows_per_second`` at each report's global step), the exact mean loss of every
    epoch over all ranks (``epoch_loss``) and each epoch's wall time (``epoch_seconds``)."""
    for _, report in reports:
        run.scalar("loss/rank0", report.loss, report.done)
        run.scalar("rows_per_second", report.rows_per_second, report.done)
    first = summary.resumedFromEpoch or 0
    for epoch, loss in enumerate(summary.lossHistory, start=1):
        run.scalar("epoch_loss", loss, epoch)
    for epoch, seconds in enumerate(summary.epochSeconds, start=first + 1):
        run.scalar("epoch_seconds", seconds, epoch)
