"""Straggler remedies: sync, sync + throughput batching, SSP, SSP + scale / compensate.

For each ``--workers`` count, one ``local-cluster[W,1,1024]`` session (W
executor processes, one task slot each) and one cached dense logistic set
(``async_vs_sync.py``'s generator, W partitions). Every configuration fits
``SGDLogisticRegression(optimizer="adam", stepSize=0.05,
miniBatchFraction=--fraction)`` for ``--steps`` steps; the per-step loss the
trainer logs is recorded with its time since ``fit`` started (as in
``async_vs_sync.py``).

A batch's compute is emulated with the test-only fault plan, in proportion
to its rows (the set itself is small enough that its arithmetic takes a few
milliseconds): every worker sleeps ``row_seconds`` per row it used, sized so
that a worker's batch under fixed batching takes ``--batch-seconds``; the
straggler, partition 1, sleeps ``factor`` times as long per row, so
``--slowdowns 2 5`` make it 2x and 5x slower. "5x moving" is a 5x straggler
that moves to the next partition every ``--move-every`` steps. Sync mode runs
resident workers (the JVM kernels would not sleep). Each worker count runs in
its own process (a second SparkContext in one JVM does not take the kernels
jar again).

Per (workers, straggler, configuration), median of ``--repeats``: the time
to reach the target -- sync's final logged loss without a straggler + 1%,
the logged mini-batch losses smoothed over 5 steps -- and the ratio to
sync's time under the same straggler (below 1: sooner), and the exact final
objective after the fixed budget of steps (``summary.extra["finalObjective"]``,
every row, penalty included).

    .venv/bin/python benchmarks/staleness.py
    .venv/bin/python benchmarks/staleness.py --workers 2 --slowdowns 5 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from async_vs_sync import StepLog, make_data, time_to  # noqa: E402

CONFIGS = [
    ("sync", dict(executionStrategy="resident")),
    ("sync + throughput", dict(executionStrategy="resident", batchSizing="throughput")),
    ("SSP s=2", dict(mode="async", maxStaleness=2)),
    ("s=2 + scale", dict(mode="async", maxStaleness=2, staleGradientPolicy="scale")),
    ("s=2 + compensate", dict(mode="async", maxStaleness=2,
                              staleGradientPolicy="compensate")),
    ("s=2 + compensate-a", dict(mode="async", maxStaleness=2, staleGradientPolicy="compensate",
                                adaptiveCompensation=True, delayCompensation=2.0)),
    ("s=-1 + compensate", dict(mode="async", maxStaleness=-1,
                               staleGradientPolicy="compensate")),
]


def fit(df, log: StepLog, steps: int, fraction: float, extra: Dict[str, object]):
    from gradspark import SGDLogisticRegression

    log.reset()
    model = SGDLogisticRegression(optimizer="adam", stepSize=0.05, tol=0.0, maxIter=steps,
                                  miniBatchFraction=fraction, parameterServerHost="127.0.0.1",
                                  **extra).fit(df)
    return smoothed(log.points), model.summary.extra


def smoothed(points, width: int = 5):
    """(time, mean of the last ``width`` logged losses): mini-batch losses are noisy."""
    return [(t, statistics.fmean(loss for _, loss in points[max(0, i - width + 1): i + 1]))
            for i, (t, _) in enumerate(points)]


def stragglers(args, workers: int) -> List[tuple]:
    """(label, fault plan) per straggler setting; see the module docs."""
    row_seconds = args.batch_seconds / (args.fraction * args.rows / workers)
    plans = [("none", {"row_seconds": row_seconds})]
    for factor in args.slowdowns:
        plans.append((f"{factor:g}x", {"row_seconds": row_seconds, "slow_partition": 1,
                                       "slow_factor": factor}))
    if args.move_every:
        factor = max(args.slowdowns)
        plans.append((f"{factor:g}x moving", {
            "row_seconds": row_seconds, "slow_partition": 1, "slow_factor": factor,
            "move_every": args.move_every, "num_partitions": workers}))
    return plans


def run_workers(args, workers: int, log: StepLog) -> List[Dict[str, object]]:
    from pyspark.sql import SparkSession

    from gradspark.testing.faults import ENVIRONMENT_VARIABLE

    spark = (SparkSession.builder.master(f"local-cluster[{workers},1,1024]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = make_data(spark, args.rows, args.cols, workers)
    df.count()
    fit(df, log, 3, args.fraction, dict(mode="async", maxStaleness=0))  # warm-up
    runs: Dict[tuple, list] = {}
    plans = stragglers(args, workers)
    for straggler, plan in plans:
        os.environ[ENVIRONMENT_VARIABLE] = json.dumps(plan)
        for name, extra in CONFIGS:
            for _ in range(args.repeats):
                runs.setdefault((straggler, name), []).append(
                    fit(df, log, args.steps, args.fraction, extra))
        os.environ.pop(ENVIRONMENT_VARIABLE, None)
    spark.stop()

    target = 1.01 * statistics.median(p[-1][1] for p, _ in runs[("none", "sync")])
    rows = []
    for straggler, _ in plans:
        sync_time = None
        for name, _ in CONFIGS:
            fits = runs[(straggler, name)]
            reached = [time_to(p, target) for p, _ in fits]
            median = statistics.median(reached) if None not in reached else None
            sync_time = median if name == "sync" else sync_time
            rows.append(dict(
                workers=workers, straggler=straggler, config=name, target=target,
                timeToTarget=median,
                ratioVsSync=median / sync_time if median is not None and sync_time else None,
                finalObjective=statistics.median(e["finalObjective"] for _, e in fits),
                fitSeconds=statistics.median(p[-1][0] for p, _ in fits),
                compensationRatio=fits[-1][1].get("meanCompensationRatio"),
                meanUpdateDelay=fits[-1][1].get("meanUpdateDelay"),
                batchShares=fits[-1][1].get("batchShares")))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def report(rows: List[Dict[str, object]]) -> None:
    print("\n| workers | straggler | configuration | to target s | vs sync | final objective | "
          "mean update delay | batch shares |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        to = "-" if r["timeToTarget"] is None else f"{r['timeToTarget']:.2f}"
        ratio = "-" if r["ratioVsSync"] is None else f"{r['ratioVsSync']:.2f}x"
        delay = "-" if r["meanUpdateDelay"] is None else f"{r['meanUpdateDelay']:.2f}"
        shares = "-" if not r["batchShares"] else " / ".join(f"{s:.2f}"
                                                              for s in r["batchShares"])
        print(f"| {r['workers']} | {r['straggler']} | {r['config']} | {to} | {ratio} | "
              f"{r['finalObjective']:.6f} | {delay} | {shares} |")


def _with_workers(argv: List[str], workers: int) -> List[str]:
    """``argv`` with one ``--workers`` value and without ``--json``."""
    out, skip = [], False
    for arg in argv:
        if skip and not arg.startswith("--"):
            continue
        skip = arg in ("--workers", "--json")
        if not skip:
            out.append(arg)
    return out + ["--workers", str(workers)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--slowdowns", type=float, nargs="+", default=[2.0, 5.0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cols", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.2, help="miniBatchFraction")
    parser.add_argument("--batch-seconds", type=float, default=0.05,
                        help="emulated compute of one worker's batch at fixed batching")
    parser.add_argument("--move-every", type=int, default=10,
                        help="steps between moves of the moving straggler (0: no such run)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)
    if len(args.workers) > 1:  # one process per session (see the module docs)
        rows = []
        for workers in args.workers:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                argv = [a for a in sys.argv[1:]]
                subprocess.run([sys.executable, __file__, *_with_workers(argv, workers),
                                "--json", out.name, "--child"], check=True)
                rows.extend(json.load(open(out.name))["rows"])
    else:
        log = StepLog()
        trainer_log = logging.getLogger("gradspark.trainer")
        trainer_log.addHandler(log)
        trainer_log.setLevel(logging.INFO)
        rows = run_workers(args, args.workers[0], log)
    if not args.child:
        report(rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "rows": rows}, out, indent=2)


if __name__ == "__main__":
    main()
