"""The checks that need separate executor JVMs, run one after another in one
local-cluster driver, so that the suite starts a local cluster once instead of
once per check (each start costs 15-20 s of JVMs on CI's two cores).

    python local_cluster_jobs.py NAME [NAME ...]

Prints one ``RESULT <json>`` line: each name's result, or ``{"error": traceback}``
for a check that raised, so that one broken check fails its own test only.
Between checks the runner drops cached data and any fault left armed; the
executor kill (``executor_loss``) goes last, since the cluster relaunches the
lost executor afterwards. Each check's module also runs alone (its ``main``).

The cluster's settings are the union of what the checks need: a fake GPU on
each executor (tasks ask for none unless a stage profile does) and
``spark.task.maxFailures=8`` for the executor kill, whose lost tasks are retried.
"""

import json
import os
import stat
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from job_support import quiet_session  # noqa: E402 - sets PYSPARK_PYTHON first
from gradspark.testing.faults import ENVIRONMENT_VARIABLE  # noqa: E402

MASTER = "local-cluster[2,1,1024]"
# The executor kill last: afterwards the cluster runs on a relaunched executor.
ORDER = ["fit", "jvm_kernels", "gpu_profile", "async", "sharded", "torch_fault",
         "torch_midepoch", "torch_midepoch_tensor", "torch_midepoch_pipeline", "executor_loss"]


def fake_gpu_script() -> str:
    """A discovery script that reports one GPU, address 0."""
    script = os.path.join(tempfile.mkdtemp(), "fake_gpu.sh")
    with open(script, "w") as out:
        out.write('#!/usr/bin/env bash\necho \'{"name": "gpu", "addresses": ["0"]}\'\n')
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
    return script


def cluster_session(master: str = MASTER):
    script = fake_gpu_script()
    return quiet_session(master, **{
        "spark.worker.resource.gpu.amount": "1",
        "spark.worker.resource.gpu.discoveryScript": script,
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.discoveryScript": script,
        "spark.task.maxFailures": "8"})


def checks() -> dict:
    import async_cluster_job
    import cluster_fit_job
    import executor_loss_job
    import gpu_profile_job
    import jvm_engine_cluster_job
    import sharded_cluster_job

    jobs = {"fit": cluster_fit_job.run, "async": async_cluster_job.run,
            "jvm_kernels": jvm_engine_cluster_job.run, "sharded": sharded_cluster_job.run,
            "gpu_profile": gpu_profile_job.run,
            "executor_loss": lambda spark: executor_loss_job.run(spark, tempfile.mkdtemp())}
    try:
        import torch_cluster_job
    except ImportError:  # torch is optional
        pass
    else:
        jobs["torch_fault"] = lambda spark: torch_cluster_job.run(spark, "fault")
        jobs["torch_midepoch"] = lambda spark: torch_cluster_job.run(spark, "midepoch")
        for strategy in ("tensor", "pipeline"):
            jobs[f"torch_midepoch_{strategy}"] = \
                lambda spark, strategy=strategy: torch_cluster_job.run(spark, "midepoch",
                                                                       strategy)
    return jobs


def main() -> None:
    names = sorted(sys.argv[1:], key=lambda name: ORDER.index(name) if name in ORDER else -1)
    jobs = checks()
    spark = cluster_session()
    results = {}
    try:
        for name in names:
            try:
                results[name] = jobs[name](spark) if name in jobs else {
                    "error": f"no check named {name} here (torch missing?)"}
            except BaseException:  # noqa: BLE001 - reported to that check's test
                results[name] = {"error": traceback.format_exc()}
            finally:
                os.environ.pop(ENVIRONMENT_VARIABLE, None)
                spark.catalog.clearCache()
    finally:
        print("RESULT " + json.dumps(results), flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
