"""The batch job's Spark session: this Python on the executors, and a check that they can
import gradspark before any work is scheduled."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Dict

from pyspark.sql import SparkSession

from gradspark.connect import is_connect
from gradspark.jobs.checks import UsageError

logger = logging.getLogger("gradspark.cli")

QUIET_LOG4J = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf",
                           "log4j2-quiet.properties")


def _session(job: dict) -> SparkSession:
    builder = SparkSession.builder.appName(f"gradspark {job.get('command', '')}".strip())
    remote = job.get("remote")
    if remote and job.get("master"):
        raise UsageError("give --master or --remote, not both")
    if remote:
        builder = builder.remote(remote)
    elif job.get("master"):
        builder = builder.master(job["master"])
    conf = {}
    for item in job.get("conf", []):
        key, equals, value = item.partition("=")
        if not equals:
            raise UsageError(f"--conf wants KEY=VALUE, got {item!r}")
        conf[key] = value
    _use_this_python(job, conf)
    # A session of its own (not a Connect server elsewhere): keep its JVM quiet.
    own_jvm = not remote or remote.startswith("local")
    if remote and own_jvm:
        # pyspark's local Connect server binds every interface by default; its only client
        # is this process, on loopback.
        conf.setdefault("spark.connect.grpc.binding.address", "127.0.0.1")
    if not job.get("verbose") and own_jvm:
        conf.setdefault("spark.ui.showConsoleProgress", "false")
        options = conf.get("spark.driver.extraJavaOptions", "")
        if "log4j2.configurationFile" not in options and " " not in QUIET_LOG4J:
            conf["spark.driver.extraJavaOptions"] = \
                f"{options} -Dlog4j2.configurationFile=file:{QUIET_LOG4J}".strip()
    for key, value in conf.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        # A local Connect server takes the static settings at its start, then the client
        # warns that it cannot set them again on its session.
        warnings.filterwarnings("ignore", message="Failed to set spark", category=UserWarning)
        spark = builder.getOrCreate()
    if not job.get("verbose") and not is_connect(spark):
        spark.sparkContext.setLogLevel("ERROR")  # a session made before us keeps its own
    return spark


def _use_this_python(job: dict, conf: Dict[str, str]) -> None:
    """Local masters run the Python workers with the CLI's own interpreter.

    Spark starts ``PYSPARK_PYTHON`` (default: the first ``python3`` on PATH),
    which need not be the one gradspark is installed in: the installed
    ``gradspark`` script run by its path from cron or a Makefile, say. On a
    local master the workers run on this machine, so this interpreter is the
    right one unless the user chose another. Under spark-submit (its JVM is
    already running) and on clusters the user's settings stand; see
    :func:`check_executors`.
    """
    if os.environ.get("PYSPARK_PYTHON") or "spark.pyspark.python" in conf:
        return
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started us
    master = job.get("master") or job.get("remote") or ("" if submitted else "local[*]")
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable


def check_executors(spark: SparkSession) -> None:
    """One small task: can the executors' Python import gradspark? A UsageError if not.

    On a classic session an RDD task, which needs nothing but pyspark on the workers
    (an interpreter without pyarrow still answers); on Spark Connect, which has no
    RDDs, a DataFrame task.
    """

    def importable(rows):
        import importlib.util
        import sys

        for _ in rows:
            pass
        yield importlib.util.find_spec("gradspark") is not None, sys.executable

    cure = ("install it there (pip install gradspark), ship it with --py-files, or point "
            "PYSPARK_PYTHON / spark.pyspark.python at an interpreter that has it")
    chosen = (spark.conf.get("spark.pyspark.python", None)
              or os.environ.get("PYSPARK_PYTHON") or "python3")
    try:
        if is_connect(spark):
            import pyarrow as pa

            def importable_batches(batches):
                for found, executable in importable(batches):
                    yield pa.RecordBatch.from_pylist([{"found": found,
                                                       "executable": executable}])

            found, executable = spark.range(1, numPartitions=1).mapInArrow(
                importable_batches, "found boolean, executable string").first()
        else:
            found, executable = spark.sparkContext.parallelize([0], 1) \
                .mapPartitions(importable).collect()[0]
    except Exception as error:  # noqa: BLE001 - e.g. the executors' Python does not start
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(f"the executors' Python ({chosen}) could not run a task ({first}): "
                         f"it needs gradspark and its dependencies; {cure}") from error
    if not found:
        raise UsageError(f"the executors' Python ({executable}) cannot import gradspark: "
                         f"{cure}")
