"""TorchEstimator in its own driver: a rank that fails mid-training, retried by Spark
and resumed from the epoch checkpoint ("fault"), or SIGKILLed mid-epoch and resumed
from a step checkpoint at the next unseen batch ("midepoch"). Prints RESULT <json>.

Usage: torch_cluster_job.py MASTER [fault | midepoch]"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from job_support import quiet_session  # noqa: E402
from torch_support import digits, digits_mlp, state_arrays  # noqa: E402

from gradspark import TorchEstimator  # noqa: E402
from gradspark.testing.faults import ENVIRONMENT_VARIABLE  # noqa: E402

spark = quiet_session(sys.argv[1])
train, _, _, _ = digits(spark, rows=600)
train = train.cache()
work = tempfile.mkdtemp()


MID_EPOCH = sys.argv[2:] == ["midepoch"]
# Mid-epoch: 20 steps an epoch, a checkpoint every 5 steps, dropout so that the ranks'
# RNG states matter.
BATCH = -(-train.count() // 20) if MID_EPOCH else 32


def dropout_mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(32, 10))


def fit(directory):
    extra = dict(checkpointUnit="step", checkpointInterval=5, keepCheckpoints=3) \
        if MID_EPOCH else {}
    return TorchEstimator(dropout_mlp if MID_EPOCH else digits_mlp,
                          torch.nn.CrossEntropyLoss(), numWorkers=2, epochs=4, batchSize=BATCH,
                          labelDtype="int64", seed=1, checkpointDir=os.path.join(work, directory),
                          **extra).fit(train)


straight = fit("straight")
result = {"rank_pids": straight.summary.rankPids, "driver_pid": os.getpid(),
          "history": straight.summary.lossHistory, "rows": train.count(),
          "steps_per_epoch": straight.summary.stepsPerEpoch,
          "rows_per_epoch": straight.summary.rowsPerEpoch}
if sys.argv[2:] == ["fault"]:
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"fail_partition": 1, "fail_step": 2})
    retried = fit("retried")
    del os.environ[ENVIRONMENT_VARIABLE]
    ours, theirs = state_arrays(straight.module()), state_arrays(retried.module())
    result.update(resumed_from=retried.summary.resumedFromEpoch,
                  retried_history=retried.summary.lossHistory,
                  max_weight_difference=max(float(abs(ours[k] - theirs[k]).max()) for k in ours))
if MID_EPOCH:  # rank 1 SIGKILLed before step 7 of the second epoch
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"fail_partition": 1, "fail_step": 1,
                                                   "fail_batch": 7, "kill": True})
    retried = fit("retried")
    del os.environ[ENVIRONMENT_VARIABLE]
    ours, theirs = state_arrays(straight.module()), state_arrays(retried.module())
    result.update(resumed_from=[retried.summary.resumedFromEpoch,
                                retried.summary.resumedFromStep],
                  retried_history=retried.summary.lossHistory,
                  retried_rows_per_epoch=retried.summary.rowsPerEpoch,
                  max_weight_difference=max(float(abs(ours[k] - theirs[k]).max()) for k in ours))
print("RESULT " + json.dumps(result))
spark.stop()
