"""Per-step loss logging, and a progress bar when a person is watching."""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Optional

logger = logging.getLogger("gradspark.trainer")


class Progress:
    """Logs every step's loss at INFO; draws a bar on stderr only if it is a TTY."""

    def __init__(self, total: int, label: str, stream: Optional[IO[str]] = None) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()

    def update(self, step: int, loss: float) -> None:
        logger.info("%s step %d/%d loss %.10g", self.label, step, self.total, loss)
        if self.interactive:
            done = min(step, self.total)
            filled = int(30 * done / self.total)
            elapsed = time.monotonic() - self.started
            self.stream.write(
                f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] "
                f"{done}/{self.total} loss={loss:.6g} {elapsed:.1f}s"
            )
            self.stream.flush()

    def close(self) -> None:
        if self.interactive:
            self.stream.write("\n")
            self.stream.flush()
