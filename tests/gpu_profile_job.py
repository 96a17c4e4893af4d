"""Stage-level GPU scheduling without a GPU: executors of a local-cluster own one fake
"gpu" each (a discovery script that reports address 0), tasks ask for none by default.
The training stage's profile (gradspark.stages.slots.gpu_stage_profile) must give each
barrier task a GPU while the stage before it runs without one. Prints RESULT <json>."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from pyspark import cloudpickle  # noqa: E402

from gradspark.stages.slots import require_task_slots  # noqa: E402

# Executors cannot import this module from tests/: its task function goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def held(batches):
    import pyarrow as pa
    from pyspark import TaskContext

    gpus = TaskContext.get().resources().get("gpu")
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"gpus": ",".join(gpus.addresses) if gpus else ""}])


def run(spark) -> dict:
    """On a session whose executors own one fake GPU each (local_cluster_jobs.cluster_session)."""
    sc = spark.sparkContext
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
    return {"profile": profile is not None, "etl": etl, "training": training,
            "too_many": too_many}


if __name__ == "__main__":
    from local_cluster_jobs import cluster_session

    session = cluster_session()
    print("RESULT " + json.dumps(run(session)))
    session.stop()
