"""Learning-rate schedules: step size as a function of the step number (from 0)."""

from __future__ import annotations

import math


def learning_rate(schedule: str, base: float, step: int, total_steps: int) -> float:
    """``constant``: base; ``inverse_time``: base / (1 + t);
    ``inverse_sqrt``: base / sqrt(1 + t) (classic MLlib SGD);
    ``cosine``: base * (1 + cos(pi t / T)) / 2, annealed to 0 over T steps."""
    if schedule == "constant":
        return base
    if schedule == "inverse_time":
        return base / (1.0 + step)
    if schedule == "inverse_sqrt":
        return base / math.sqrt(1.0 + step)
    if schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * step / max(total_steps, 1)))
    raise ValueError(f"unknown learning-rate schedule {schedule!r}")
