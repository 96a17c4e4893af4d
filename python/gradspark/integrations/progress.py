"""Per-step loss logging, and a progress bar when a person is watching."""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Optional

from gradspark.integrations import tensorboard

logger = logging.getLogger("gradspark.trainer")

#: Steps in a row the loss may rise, above where it started, before the step size
#: is called too large. Mini-batch noise near the optimum stays below the start.
RISING_STEPS = 10


class Progress:
    """Logs every step's loss at INFO; draws a bar on stderr only if it is a TTY.

    Warns once when the loss has risen in each of :data:`RISING_STEPS` steps and is
    above the first step's: the mark of a step size that is too large but has not
    (yet) overflowed. An overflow is an error (``FloatingPointError``) elsewhere.
    """

    def __init__(self, total: int, label: str, stream: Optional[IO[str]] = None,
                 watch: bool = True) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.first: Optional[float] = None
        self.last: Optional[float] = None
        self.rising = 0
        self.warned = not watch  # (the rising-loss warning's advice is the linear models')
        # The fit's TensorBoard run, if any: taken here, in the fit's thread, since
        # async and sharded steps close in server threads.
        self.board = tensorboard.current()

    def update(self, step: int, loss: float, detail: str = "") -> None:
        """``detail``: more of the same line (logged and drawn after the loss)."""
        if detail:
            logger.info("%s step %d/%d loss %.10g%s", self.label, step, self.total, loss,
                        detail)
        else:
            logger.info("%s step %d/%d loss %.10g", self.label, step, self.total, loss)
        self._watch(step, loss)
        if self.board is not None:
            self.board.scalar("loss", loss, step)
            self.board.steps_logged += 1
        if self.interactive:
            done = min(step, self.total)
            filled = int(30 * done / self.total)
            elapsed = time.monotonic() - self.started
            self.stream.write(
                f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] "
                f"{done}/{self.total} loss={loss:.6g} {elapsed:.1f}s{detail}"
            )
            self.stream.flush()

    def _watch(self, step: int, loss: float) -> None:
        self.first = loss if self.first is None else self.first
        self.rising = self.rising + 1 if self.last is not None and loss > self.last else 0
        self.last = loss
        if self.rising >= RISING_STEPS and loss > self.first and not self.warned:
            self.warned = True
            logger.warning(
                "%s: the training loss rose in each of the last %d steps, to %.6g from %.6g "
                "at the start (step %d); the step size is too large: lower stepSize, or use "
                "optimizer='lbfgs'", self.label, self.rising, loss, self.first, step)

    def close(self) -> None:
        if self.interactive:
            self.stream.write("\n")
            self.stream.flush()
