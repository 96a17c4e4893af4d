"""TorchEstimator in its own driver: a rank that fails mid-training, retried by Spark
and resumed from the epoch checkpoint. Prints RESULT <json>.

Usage: torch_cluster_job.py MASTER [fault]"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from job_support import quiet_session  # noqa: E402
from torch_support import digits, digits_mlp, state_arrays  # noqa: E402

from gradspark import TorchEstimator  # noqa: E402
from gradspark.faults import ENVIRONMENT_VARIABLE  # noqa: E402

spark = quiet_session(sys.argv[1])
train, _, _, _ = digits(spark, rows=600)
train = train.cache()
work = tempfile.mkdtemp()


def fit(directory):
    return TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=2, epochs=4,
                          batchSize=32, labelDtype="int64", seed=1,
                          checkpointDir=os.path.join(work, directory)).fit(train)


straight = fit("straight")
result = {"rank_pids": straight.summary.rankPids, "driver_pid": os.getpid(),
          "history": straight.summary.lossHistory}
if sys.argv[2:] == ["fault"]:
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"fail_partition": 1, "fail_step": 2})
    retried = fit("retried")
    del os.environ[ENVIRONMENT_VARIABLE]
    ours, theirs = state_arrays(straight.module()), state_arrays(retried.module())
    result.update(resumed_from=retried.summary.resumedFromEpoch,
                  retried_history=retried.summary.lossHistory,
                  max_weight_difference=max(float(abs(ours[k] - theirs[k]).max()) for k in ours))
print("RESULT " + json.dumps(result))
spark.stop()
