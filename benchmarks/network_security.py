"""What encrypting our channels costs per step, on a multi-host network.

    sudo .venv/bin/python benchmarks/network_security.py            # 2^22, ~4 min
    sudo .venv/bin/python benchmarks/network_security.py --width 18 --rows 4000 --iters 30

Builds the netns test bed (tests/netns_bed.py: a standalone master and two
workers in their own network namespaces on one bridge, links capped at
``--rate`` and, where the kernel has netem, delayed) and runs
tests/netns_job.py on it with Spark's RPC authenticated and encrypted: the
same async (``maxStaleness=0``) and sharded (2 servers) fits with our channels
encrypted (Spark's setting) and in clear (the override), interleaved,
``--repeats`` times after a warm-up fit. Prints each phase's median seconds
per step (the summary's ``wallTime`` over ``maxIter``) and wire bytes per
step, and the ratio encrypted / clear. The attacked phase (a flood during a
slowed fit) is not part of the ratio. Needs root (namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from netns_bed import ADDRESSES, NetnsBed, unavailable  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=22, help="log2 of the feature count")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"network_security.py: {reason}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    work = tempfile.mkdtemp(prefix="gradspark-netns-")
    secret = secrets.token_hex(16)
    with NetnsBed(work, rate=args.rate, delay_ms=args.delay_ms) as bed:
        bed.start_spark(secret, memory="3g")
        job = bed.popen("master", [sys.executable, os.path.join(HERE, "..", "tests",
                                                                "netns_job.py"),
                                   "--master", bed.master_url, "--secret", secret,
                                   "--out", work, f"--width={args.width}",
                                   f"--rows={args.rows}", f"--iters={args.iters}",
                                   f"--repeats={args.repeats}"],
                        "job.log", bed.spark_env("master", secret))
        start = time.monotonic()
        while job.poll() is None and time.monotonic() - start < 1800:
            time.sleep(1)
        netem = bed.netem
    if job.returncode != 0:
        sys.exit("the job failed:\n" + open(os.path.join(work, "job.log")).read()[-4000:])
    result = json.load(open(os.path.join(work, "result.json")))
    print(f"\n2^{args.width} features, {args.rows:,} rows, 2 workers on 2 hosts, "
          f"links {args.rate}" + (f" + {args.delay_ms} ms netem delay" if netem else
                                  " (this kernel has no netem: no added delay)")
          + f"; medians of {args.repeats}\n")
    print("| fit | clear s/step | encrypted s/step | encrypted / clear | wire KB/step |")
    print("| --- | --- | --- | --- | --- |")
    summary = {}
    for kind in ("async", "sharded"):
        clear = statistics.median(result[f"{kind}-clear"]["seconds_per_step"])
        sealed = statistics.median(result[f"{kind}-sealed"]["seconds_per_step"])
        kb = statistics.median(result[f"{kind}-sealed"]["bytes_per_step"]) / 1024
        summary[kind] = dict(clear=clear, sealed=sealed, ratio=sealed / clear, kb=kb)
        print(f"| {kind} | {clear:.4f} | {sealed:.4f} | {sealed / clear:.2f}x | {kb:.0f} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(dict(args=vars(args), netem=netem, phases=result, summary=summary), out)
    print(f"\n(driver address {ADDRESSES['master']}; logs in {work})")


if __name__ == "__main__":
    main()
