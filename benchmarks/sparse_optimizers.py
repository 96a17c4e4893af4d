"""Mini-batch optimizers on wide sparse click-through data, at their default step sizes.

One SparkSession (``local[2]``); per generator of :mod:`gradspark.testing.ctr_data`
(``ctr``, the one the defaults were chosen on, and ``tail``, the check) a cached
training set of ``--rows`` rows hashed into ``2^--bits`` buckets and a held-out set
of a quarter as many rows (another seed). Params: ``regParam=--reg,
standardization=False`` everywhere.

* **reference**: gradspark's L-BFGS to ``tol=1e-9`` (its objective is the target)
  and MLlib's ``LogisticRegression`` with the same Params (``maxIter=100``);
* per optimizer (adam, adagrad, ftrl, svrg), per ``--fractions`` entry: a fit of
  ``--passes`` passes (``maxIter = passes / fraction``; for svrg the most updates
  whose full-gradient snapshots and two evaluations per batch read at most that
  many passes) with **no stepSize given** (the optimizer's default), ``tol=0``;
  and, at the first fraction, the same fit with ``lazyUpdates=False`` and with
  ``iterateAveraging="none"`` (not for svrg, which has neither; nor with
  ``--no-variants``).

Columns: the training objective of the returned model (every row, penalty
included: the fit's ``finalObjective``) and its relative gap to L-BFGS's; the
held-out log-loss and AUC (MLlib's evaluators); the fit's wall time. The
issue's target: every optimizer within 1% of L-BFGS in at most 5 passes.

    .venv/bin/python benchmarks/sparse_optimizers.py                 # 400,000 rows, 2^20
    .venv/bin/python benchmarks/sparse_optimizers.py --rows 100000 --bits 18 --fractions 0.1
    .venv/bin/python benchmarks/sparse_optimizers.py --fractions 0.01 --no-variants --no-mllib
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

OPTIMIZERS = ("adam", "adagrad", "ftrl", "svrg")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--bits", type=int, default=20, help="log2 of the hashing space")
    parser.add_argument("--generators", nargs="+", default=["ctr", "tail"])
    parser.add_argument("--reg", type=float, default=1e-4, help="regParam")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--passes", type=float, default=5)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--mllib", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS),
                        choices=OPTIMIZERS)
    parser.add_argument("--variants", action=argparse.BooleanOptionalAction, default=True,
                        help="also lazyUpdates=False and iterateAveraging='none'")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def held_out_metrics(model, held_out) -> Dict[str, float]:
    from pyspark.ml.evaluation import (BinaryClassificationEvaluator,
                                       MulticlassClassificationEvaluator)

    scored = model.transform(held_out).cache()
    out = {"logLoss": MulticlassClassificationEvaluator(metricName="logLoss").evaluate(scored),
           "auc": BinaryClassificationEvaluator(metricName="areaUnderROC").evaluate(scored)}
    scored.unpersist()
    return out


def timed_fit(estimator, df):
    start = time.perf_counter()
    model = estimator.fit(df)
    return time.perf_counter() - start, model


def run_generator(spark, args, generator: str) -> Dict[str, object]:
    from pyspark.ml.classification import LogisticRegression

    from gradspark import SGDLogisticRegression
    from gradspark.optim.variance_reduction import updates_within
    from gradspark.testing.ctr_data import ctr_frame

    width = 1 << args.bits
    train = ctr_frame(spark, args.rows, width, args.partitions, args.seed, generator)
    held_out = ctr_frame(spark, args.rows // 4, width, args.partitions, args.seed + 1000,
                         generator)
    common = dict(regParam=args.reg, standardization=False)
    seconds, lbfgs = timed_fit(SGDLogisticRegression(maxIter=500, tol=1e-9, **common), train)
    target = lbfgs.summary.objectiveHistory[-1]
    out: Dict[str, object] = {"generator": generator, "rows": args.rows, "bits": args.bits,
                              "reg": args.reg, "lbfgs": {
                                  "objective": target, "seconds": seconds,
                                  "iterations": lbfgs.summary.totalIterations,
                                  **held_out_metrics(lbfgs, held_out)}}
    print(f"\n{generator}: L-BFGS {target:.6f} in {lbfgs.summary.totalIterations} iterations, "
          f"{seconds:.1f} s", flush=True)
    if args.mllib:
        seconds, mllib = timed_fit(LogisticRegression(maxIter=100, tol=1e-9, **common), train)
        out["mllib"] = {"objective": mllib.summary.objectiveHistory[-1], "seconds": seconds,
                        **held_out_metrics(mllib, held_out)}
        print(f"{generator}: MLlib {out['mllib']['objective']:.6f}, {seconds:.1f} s",
              flush=True)
    fits: List[Dict[str, object]] = []
    for i, fraction in enumerate(args.fractions):
        variants = [{}] + ([{"lazyUpdates": False}, {"iterateAveraging": "none"}]
                           if i == 0 and args.variants else [])
        for name in args.optimizers:
            steps = updates_within(args.passes, fraction) if name == "svrg" \
                else round(args.passes / fraction)
            for variant in variants:
                if name in ("ftrl", "svrg") and variant.get("iterateAveraging") == "none":
                    continue  # they do not average anyway
                if name == "svrg" and variant:
                    continue  # nor have lazy rules
                estimator = SGDLogisticRegression(optimizer=name, miniBatchFraction=fraction,
                                                  maxIter=steps, tol=0.0, **common, **variant)
                seconds, model = timed_fit(estimator, train)
                final = model.summary.extra["finalObjective"]
                row = {"optimizer": name, "fraction": fraction, "steps": steps,
                       "passes": args.passes, "variant": variant,
                       "stepSize": estimator.getStepSize(), "objective": final,
                       "gap": final / target - 1, "seconds": seconds,
                       "averagedSteps": model.summary.extra.get("averagedSteps"),
                       **held_out_metrics(model, held_out)}
                fits.append(row)
                print(f"  {name:8s} f={fraction:<5} {json.dumps(variant):30s} "
                      f"gap {row['gap']:+.4f}  held-out log-loss {row['logLoss']:.4f} "
                      f"AUC {row['auc']:.4f}  {seconds:.1f} s", flush=True)
    out["fits"] = fits
    train.unpersist()
    held_out.unpersist()
    return out


def report(results: List[Dict[str, object]]) -> None:
    for r in results:
        ref = r["lbfgs"]
        print(f"\n### {r['generator']}: {r['rows']:,} rows x 2^{r['bits']}, "
              f"regParam {r['reg']}\n")
        print("| fit | step size | passes | objective | gap to L-BFGS | held-out log-loss "
              "| held-out AUC | seconds |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        print(f"| L-BFGS (gradspark, tol 1e-9) | | {ref['iterations']} | {ref['objective']:.6f} "
              f"| 0 | {ref['logLoss']:.4f} | {ref['auc']:.4f} | {ref['seconds']:.1f} |")
        if "mllib" in r:
            m = r["mllib"]
            print(f"| MLlib L-BFGS | | | {m['objective']:.6f} | "
                  f"{m['objective'] / ref['objective'] - 1:+.2%} | {m['logLoss']:.4f} | "
                  f"{m['auc']:.4f} | {m['seconds']:.1f} |")
        for f in r["fits"]:
            variant = ", ".join(f"{k}={v}" for k, v in f["variant"].items())
            label = f"{f['optimizer']}, fraction {f['fraction']}" + (
                f", {variant}" if variant else "")
            print(f"| {label} | {f['stepSize']} | {f['passes']:g} | {f['objective']:.6f} | "
                  f"{f['gap']:+.2%} | {f['logLoss']:.4f} | {f['auc']:.4f} | "
                  f"{f['seconds']:.1f} |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master)
             .appName("gradspark sparse optimizers benchmark")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)
    results = [run_generator(spark, args, g) for g in args.generators]
    report(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
