"""TorchEstimator on four ranks (``local[4]``, its own driver): the 2-D meshes. Data x
tensor, data x pipeline and HSDP, each against DDP on the same four partitions, and
what each rank holds. Prints RESULT <json>.

Usage: torch_mesh_job.py [MESH ...]"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from torch_support import digits, state_arrays  # noqa: E402

from gradspark import TorchEstimator  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MESHES = {"data x tensor": ("tensor", {}),
          "data x pipeline": ("pipeline", {"microBatches": 2}),
          "hsdp": ("fsdp", {})}


def deep_mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 10))


def run(spark, only=()) -> dict:
    train = digits(spark, rows=700)[0].cache()

    def fit(strategy, mesh, **params):
        model = TorchEstimator(deep_mlp, torch.nn.CrossEntropyLoss(), numWorkers=4,
                               epochs=3, batchSize=50, labelDtype="int64", seed=6,
                               learningRate=0.01, strategy=strategy, meshShape=mesh,
                               progressInterval=-1, **params).fit(train)
        summary = model.summary
        return {"history": summary.lossHistory, "mesh": summary.meshShape,
                "parameter_bytes": summary.parameterBytesByRank,
                "optimizer_bytes": summary.optimizerStateBytesByRank,
                "state": {k: v.tolist() for k, v in state_arrays(model.module()).items()}}

    result = {"ddp": fit("ddp", [])}
    for name, (strategy, params) in MESHES.items():
        if only and name not in only:
            continue
        result[name] = fit(strategy, [2, 2], **params)
    train.unpersist()
    return result


if __name__ == "__main__":
    from job_support import quiet_session

    session = quiet_session("local[4]")
    print("RESULT " + json.dumps(run(session, sys.argv[1:])))
    session.stop()
