"""TorchEstimator's ranks in two executor processes (run by local_cluster_jobs.py):
a rank that fails mid-training, retried by Spark and resumed from the epoch
checkpoint ("fault"), or SIGKILLed mid-epoch and resumed from a step checkpoint at
the next unseen batch ("midepoch"), under DDP or another strategy (a tensor-parallel
pair, two pipeline stages). Alone it prints RESULT <json>.

Usage: torch_cluster_job.py MASTER (fault | midepoch) [STRATEGY]"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from torch_support import digits, digits_mlp, state_arrays  # noqa: E402

from gradspark import TorchEstimator  # noqa: E402
from gradspark.testing.faults import ENVIRONMENT_VARIABLE  # noqa: E402

# Executors cannot import this module from tests/: its model factory goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def dropout_mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(32, 10))


def run(spark, variant: str, strategy: str = "ddp") -> dict:
    train, _, _, _ = digits(spark, rows=600)
    train = train.cache()
    work = tempfile.mkdtemp()
    mid_epoch = variant == "midepoch"
    # Mid-epoch: 20 steps an epoch, a checkpoint every 5 steps, dropout so that the ranks'
    # RNG states matter.
    batch = -(-train.count() // 20) if mid_epoch else 32

    def fit(directory):
        extra = dict(checkpointUnit="step", checkpointInterval=5, keepCheckpoints=3) \
            if mid_epoch else {}
        return TorchEstimator(dropout_mlp if mid_epoch else digits_mlp,
                              torch.nn.CrossEntropyLoss(), numWorkers=2, epochs=4,
                              batchSize=batch, labelDtype="int64", seed=1, strategy=strategy,
                              checkpointDir=os.path.join(work, directory), **extra).fit(train)

    straight = fit("straight")
    result = {"rank_pids": straight.summary.rankPids, "strategy": straight.summary.strategy,
              "checkpoint_format": straight.summary.checkpointFormat, "driver_pid": os.getpid(),
              "history": straight.summary.lossHistory, "rows": train.count(),
              "steps_per_epoch": straight.summary.stepsPerEpoch,
              "rows_per_epoch": straight.summary.rowsPerEpoch}
    # "fault": rank 1 raises at epoch 2; "midepoch": rank 1 SIGKILLed before step 7 of
    # the second epoch.
    fault = {"fail_partition": 1, "fail_step": 1, "fail_batch": 7, "kill": True} \
        if mid_epoch else {"fail_partition": 1, "fail_step": 2}
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps(fault)
    try:
        retried = fit("retried")
    finally:
        del os.environ[ENVIRONMENT_VARIABLE]
    ours, theirs = state_arrays(straight.module()), state_arrays(retried.module())
    resumed = [retried.summary.resumedFromEpoch, retried.summary.resumedFromStep] \
        if mid_epoch else retried.summary.resumedFromEpoch
    result.update(resumed_from=resumed, retried_history=retried.summary.lossHistory,
                  retried_rows_per_epoch=retried.summary.rowsPerEpoch,
                  max_weight_difference=max(float(abs(ours[k] - theirs[k]).max())
                                            for k in ours))
    train.unpersist()
    return result


if __name__ == "__main__":
    from job_support import quiet_session

    session = quiet_session(sys.argv[1])
    print("RESULT " + json.dumps(run(session, *sys.argv[2:4])))
    session.stop()
