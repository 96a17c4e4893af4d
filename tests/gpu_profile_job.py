"""Stage-level GPU scheduling without a GPU: executors of a local-cluster own one fake
"gpu" each (a discovery script that reports address 0), tasks ask for none by default.
The training stage's profile (gradspark.stages.slots.gpu_stage_profile) must give each
barrier task a GPU while the stage before it runs without one. Prints RESULT <json>."""

import json
import os
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from job_support import quiet_session  # noqa: E402, F401 (sets PYSPARK_PYTHON)
from pyspark.sql import SparkSession  # noqa: E402

from gradspark.stages.slots import require_task_slots  # noqa: E402

script = os.path.join(tempfile.mkdtemp(), "fake_gpu.sh")
with open(script, "w") as out:
    out.write('#!/usr/bin/env bash\necho \'{"name": "gpu", "addresses": ["0"]}\'\n')
os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.worker.resource.gpu.amount", "1")
         .config("spark.worker.resource.gpu.discoveryScript", script)
         .config("spark.executor.resource.gpu.amount", "1")
         .config("spark.executor.resource.gpu.discoveryScript", script).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
sc = spark.sparkContext


def held(batches):
    import pyarrow as pa
    from pyspark import TaskContext

    gpus = TaskContext.get().resources().get("gpu")
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"gpus": ",".join(gpus.addresses) if gpus else ""}])


profile = require_task_slots(sc, 2, use_gpu=True)
frame = spark.range(0, 100, numPartitions=2)
etl = [r.gpus for r in frame.mapInArrow(held, "gpus string").collect()]
training = [r.gpus for r in frame.mapInArrow(held, "gpus string", barrier=True,
                                             profile=profile).collect()]
too_many = ""
try:
    require_task_slots(sc, 3, use_gpu=True, wait_seconds=0)
except ValueError as error:
    too_many = str(error)
print("RESULT " + json.dumps({"profile": profile is not None, "etl": etl,
                              "training": training, "too_many": too_many}))
spark.stop()
