"""Training reports: the loss curve as a PNG (matplotlib, the optional ``plot`` extra)."""

from __future__ import annotations

import io
from typing import Sequence


def loss_plot_png(history: Sequence[float], title: str = "training loss") -> bytes:
    """The loss per step (or epoch) as PNG bytes; log scale when it spans decades."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a cluster node
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting the loss curve needs matplotlib: "
                          "pip install 'gradspark[plot]'") from None
    figure = Figure(figsize=(6, 4), dpi=100)
    axes = figure.subplots()
    axes.plot(range(len(history)), list(history), marker="." if len(history) < 60 else None)
    positive = [x for x in history if x > 0]
    if positive and len(positive) == len(history) and max(positive) > 100 * min(positive):
        axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


class LossCurve:
    """For training summaries: ``summary.saveLossPlot("loss.png")``."""

    objectiveHistory: Sequence[float]

    def saveLossPlot(self, path: str, title: str = "training loss") -> None:
        """Write the loss history as a PNG at a local ``path``."""
        with open(path, "wb") as handle:
            handle.write(loss_plot_png(self.objectiveHistory, title))
