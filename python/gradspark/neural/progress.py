"""Live progress of a TorchEstimator fit: rank 0 reports while the barrier stage runs.

The stage runs for the whole fit, so its per-epoch losses used to reach the
driver only with the result. Now rank 0 sends a REPORT frame over the
parameter server's authenticated channel (:mod:`gradspark.rpc`) every
``progressInterval`` steps and at every epoch end: its position, the loss,
rows/s and the time left. The driver's :class:`ProgressReports` logs each
one and draws a progress line on an interactive console.

Mid-epoch losses are rank 0's running mean over its own rows (no collective
is added to the training loop); an epoch's loss is the exact mean over every
rank's rows, as in ``summary.lossHistory``. Reporting never fails a fit: a
rank that cannot reach the driver logs why once and trains on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from gradspark.rpc.wire import ProtocolError
from gradspark.integrations.progress import Progress

logger = logging.getLogger(__name__)

STEP, EPOCH_END = 1, 2  # a REPORT's "what"
_VALUES = 6  # epoch, steps done in it, steps per epoch, epochs, loss, rows/s


@dataclass(frozen=True)
class Report:
    epoch: int  # 0-based
    step: int  # steps done in the epoch
    steps: int  # per epoch
    epochs: int
    loss: float
    rows_per_second: float
    epoch_end: bool

    @property
    def done(self) -> int:
        return self.epoch * self.steps + self.step

    def eta(self, seconds_per_step: float) -> float:
        return (self.epochs * self.steps - self.done) * seconds_per_step


class ProgressReports:
    """Driver side: a :class:`gradspark.rpc.server.Handler` that takes rank 0's REPORTs.

    Keeps every report (``reports``, with its arrival time) for the summary
    and tests.
    """

    vector_size = 2 * _VALUES  # the REPORT frame's room

    def __init__(self, label: str = "TorchEstimator") -> None:
        self.label = label
        self.progress: Optional[Progress] = None
        self.reports: List[Tuple[float, Report]] = []

    def on_hello(self, worker: int, attempt: int) -> int:
        return 0

    def on_report(self, worker: int, step: int, attempt: int, what: int,
                  values: np.ndarray) -> bool:
        if len(values) != _VALUES or what not in (STEP, EPOCH_END):
            return False
        epoch, done, steps, epochs, loss, rate = values.tolist()
        report = Report(int(epoch), int(done), int(steps), int(epochs), loss, rate,
                        what == EPOCH_END)
        self.reports.append((time.monotonic(), report))
        if self.progress is None:
            self.progress = Progress(report.epochs * report.steps, self.label, watch=False)
        seconds_per_step = (time.monotonic() - self.progress.started) / max(report.done, 1)
        kind = "epoch loss" if report.epoch_end else "rank 0 loss"
        detail = (f" epoch {report.epoch + 1}/{report.epochs} ({kind}) "
                  f"{report.rows_per_second:.0f} rows/s ETA {report.eta(seconds_per_step):.0f}s")
        self.progress.update(report.done, report.loss, detail)
        return True

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()

    # The rest of the Handler protocol: a progress channel carries no weights.
    def on_pull(self, worker: int):
        raise ConnectionError("the progress channel serves no weights")

    def on_push(self, *args) -> bool:
        return False

    def on_done(self, worker: int) -> None:
        pass

    def on_disconnect(self, worker: int) -> None:
        pass


class ProgressReporter:
    """Rank 0's side: connects lazily, reports, and gives up quietly on failure."""

    def __init__(self, address: Optional[Tuple[str, int]], secret: bytes, interval: int,
                 attempt: int) -> None:
        self.address, self.secret = address, secret
        self.interval, self.attempt = interval, attempt
        self.client = None
        self.broken = address is None
        self.started = time.monotonic()
        self.rows = 0

    def due(self, step_done: int, steps: int) -> bool:
        """Whether a mid-epoch report goes after ``step_done`` steps of ``steps``."""
        return (not self.broken and self.interval > 0 and step_done < steps
                and step_done % self.interval == 0)

    def send(self, epoch: int, step: int, steps: int, epochs: int, loss: float,
             epoch_end: bool) -> None:
        if self.broken:
            return
        rate = self.rows / max(time.monotonic() - self.started, 1e-9)
        try:
            if self.client is None:
                from gradspark.rpc import ParameterClient

                self.client = ParameterClient(tuple(self.address), self.secret, 0, self.attempt,
                                              connect_timeout=5.0)
            self.client.report(epoch * steps + step, self.attempt,
                               EPOCH_END if epoch_end else STEP,
                               np.array([epoch, step, steps, epochs, loss, rate]))
        except (OSError, EOFError, ConnectionError, ProtocolError) as error:
            self.broken = True
            logger.warning("TorchEstimator: progress reports to %s stopped (%s); training "
                           "goes on", self.address, error)

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.done()
                self.client.close()
            except (OSError, EOFError, ConnectionError, ProtocolError):
                pass
