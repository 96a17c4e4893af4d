"""Throughput batch sizing: a sync mini-batch split over resident workers by their speed.

With ``batchSizing="fixed"`` every row is in step ``t``'s mini-batch with
probability ``f = miniBatchFraction``, so a worker's share of the batch
follows the rows it holds and the slowest worker sets the pace of every
step. ``"throughput"`` gives worker ``w`` its own fraction ``f_w`` so that
its expected rows follow its measured rows/s, the global batch keeping its
expected size ``f * N``::

    f_w = f * N * r_w / sum(r) / N_w     (clipped to [floor * f, 1], the rest re-spread)

- **Every row stays reachable**: each step draws each row with probability
  at least ``floor * f``, from the same ``(seed, step, partition)`` stream as
  fixed batching (a row sampled at ``f_w`` is sampled at any larger fraction).
- **Gradients stay unbiased**: a worker multiplies its sums by ``f / f_w``,
  its rows' inverse inclusion probability relative to ``f``, so every sum
  has the expectation it has under fixed batching (``f`` times the full
  batch's); the driver's gradient sum / weight sum is the usual
  self-normalised mean.
- **Bit-identical when balanced**: while the predicted round times at ``f``
  are within ``tolerance`` of each other, every worker samples at exactly
  ``f`` with weight 1, as fixed batching does; a worker's fraction moves only
  by more than ``hysteresis`` (sparse-pull workers sample before they pull,
  with the fraction they last heard: a change costs them one pull again).

Rates are moving averages of rows over seconds, a worker's seconds being the
time from publishing a round to its answer's arrival (its compute and
transfer: what the round waits for). ``N_w`` is learnt the same way, as
rows used / fraction. What the fit cannot reproduce from ``(seed, step,
partition)`` alone is the fractions, which follow measured times; they are
reported (``batchFractionChanges``) so a run can be explained.
"""

from __future__ import annotations

from typing import Dict, Mapping, Sequence, Tuple

FRACTION_BITS = 20  # a fraction travels as round(f * 2**20), in a round's code


def quantize(fraction: float) -> int:
    """``fraction`` in units of ``2**-FRACTION_BITS`` (at least one unit)."""
    return max(1, min(1 << FRACTION_BITS, round(fraction * (1 << FRACTION_BITS))))


def dequantize(units: int) -> float:
    return units / (1 << FRACTION_BITS)


class BatchSizing:
    """Measures each worker's rows/s every round; with ``adaptive`` sets their fractions.

    ``fraction``: ``miniBatchFraction``; ``workers``: the resident workers'
    ids. :meth:`fractions` is what each samples at next (exactly
    ``fraction`` for every worker when not adaptive or balanced);
    :meth:`observe` takes a round's ``{worker: (rows used, seconds)}``.
    """

    def __init__(self, fraction: float, workers: Sequence[int], adaptive: bool,
                 tolerance: float = 0.25, hysteresis: float = 0.05, floor: float = 0.1,
                 smoothing: float = 0.3) -> None:
        self.fraction = fraction
        self.workers = list(workers)
        self.adaptive = adaptive
        self.tolerance, self.hysteresis = tolerance, hysteresis
        self.floor, self.smoothing = floor, smoothing
        self.current: Dict[int, float] = {w: fraction for w in self.workers}
        self.rate: Dict[int, float] = {}  # moving rows/s
        self.held: Dict[int, float] = {}  # moving estimate of the rows a worker holds
        self.rows_used = {w: 0 for w in self.workers}
        self.rounds = 0
        self.rebalanced_rounds = 0  # sampled rounds run with unequal fractions
        self.changes = 0

    def fractions(self) -> Dict[int, float]:
        return dict(self.current)

    def balanced(self) -> bool:
        return all(f == self.fraction for f in self.current.values())

    def observe(self, timings: Mapping[int, Tuple[int, float]], sampled: bool) -> None:
        """One round's answers; ``sampled``: a mini-batch round (full-batch rounds use every
        row, so they only update the rates)."""
        self.rounds += 1
        for worker, (rows, seconds) in timings.items():
            if rows <= 0 or seconds <= 0:
                continue
            self._smooth(self.rate, worker, rows / seconds)
            self._smooth(self.held, worker, rows / (self.current[worker] if sampled else 1.0))
            self.rows_used[worker] += rows
        if sampled:
            self.rebalanced_rounds += int(not self.balanced())
        if self.adaptive:
            self._rebalance()

    def _smooth(self, table: Dict[int, float], worker: int, value: float) -> None:
        old = table.get(worker)
        table[worker] = value if old is None else old + self.smoothing * (value - old)

    def _rebalance(self) -> None:
        if any(w not in self.rate or w not in self.held for w in self.workers):
            return  # not every worker measured yet
        times = [self.fraction * self.held[w] / self.rate[w] for w in self.workers]
        if max(times) <= (1.0 + self.tolerance) * min(times):
            target = {w: self.fraction for w in self.workers}
        else:
            target = self._spread()
        for worker, value in target.items():
            old = self.current[worker]
            if value == self.fraction or abs(value - old) > self.hysteresis * old:
                new = value if value == self.fraction else dequantize(quantize(value))
                self.changes += int(new != old)
                self.current[worker] = new

    def _spread(self) -> Dict[int, float]:
        """The global batch ``f * N`` by rate, each fraction clipped to [floor * f, 1]."""
        budget = self.fraction * sum(self.held[w] for w in self.workers)
        low, high = self.floor * self.fraction, 1.0
        pinned: Dict[int, float] = {}
        while True:
            free = [w for w in self.workers if w not in pinned]
            left = budget - sum(pinned[w] * self.held[w] for w in pinned)
            total_rate = sum(self.rate[w] for w in free)
            spread = {w: left * self.rate[w] / total_rate / self.held[w] for w in free}
            clipped = {w: min(max(f, low), high) for w, f in spread.items()
                       if not low <= f <= high}
            if not clipped or len(clipped) == len(free):
                return {**pinned, **spread, **clipped}
            pinned.update(clipped)

    def metrics(self) -> Dict[str, object]:
        total = sum(self.rows_used.values()) or 1
        return {
            "batchSizing": "throughput" if self.adaptive else "fixed",
            "workerRowsPerSecond": [round(self.rate.get(w, 0.0), 1) for w in self.workers],
            "batchShares": [round(self.rows_used[w] / total, 4) for w in self.workers],
            "workerFractions": [self.current[w] for w in self.workers],
            "rebalancedRounds": self.rebalanced_rounds,
            "batchFractionChanges": self.changes,
        }
