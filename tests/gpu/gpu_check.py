"""TorchEstimator with NCCL on every GPU of this machine (run by run_gpu_checks.sh).

Starts local-cluster[1,N,4096N]: one worker and executor that own all N GPUs
(the discovery script reports every GPU of the machine, so N workers of one
GPU each would all take GPU 0), N task slots of one GPU each through Spark's
resource scheduling; trains the digits MLP with useGpu=True, DDP and FSDP,
then tensor and pipeline parallelism (and 2-D meshes with 4+ GPUs),
checks accuracy and that FSDP's losses follow DDP's, prints timings next
to the same fits with gloo on the CPU, and resumes an FSDP fit from its
sharded (torch.distributed.checkpoint) checkpoint.

``--stage-level``: tasks ask for no GPU by default (no
spark.task.resource.gpu.amount); the training stage takes one per task through
its ResourceProfile, and the fits must still run on every GPU.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from torch_support import digits, digits_mlp  # noqa: E402

from gradspark import TorchEstimator  # noqa: E402

gpus = torch.cuda.device_count()
print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}, GPUs: {gpus}")
if gpus == 0:
    sys.exit("no GPU visible to torch: nothing to check")
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "discover_gpus.sh")
stage_level = "--stage-level" in sys.argv
builder = (SparkSession.builder.master(f"local-cluster[1,{gpus},{4096 * gpus}]")
           .config("spark.ui.enabled", "false")
           .config("spark.worker.resource.gpu.amount", str(gpus))
           .config("spark.worker.resource.gpu.discoveryScript", script)
           .config("spark.executor.resource.gpu.amount", str(gpus)))
if not stage_level:
    builder = builder.config("spark.task.resource.gpu.amount", "1")
spark = builder.getOrCreate()
print("GPUs per task:", "training stage only (stage-level)" if stage_level else "every task")
spark.sparkContext.setLogLevel("ERROR")
train, test, X_test, y_test = digits(spark)
losses = {}
for use_gpu, strategy in ((True, "ddp"), (True, "fsdp"), (False, "ddp"), (False, "fsdp")):
    estimator = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=gpus,
                               batchSize=64, epochs=12, learningRate=0.01, labelDtype="int64",
                               useGpu=use_gpu, strategy=strategy)
    started = time.perf_counter()
    model = estimator.fit(train)
    wall = time.perf_counter() - started
    accuracy = np.mean([r.prediction == r.label for r in model.transform(test).collect()])
    losses[use_gpu, strategy] = model.summary.lossHistory
    print(f"{'nccl' if use_gpu else 'gloo'} {strategy}: {gpus} ranks, fit {wall:.1f} s, "
          f"{model.summary.parameterBytesPerRank} parameter bytes per rank, median epoch "
          f"{np.median(model.summary.epochSeconds):.3f} s, final loss "
          f"{model.summary.lossHistory[-1]:.4f}, test accuracy {accuracy:.3f}")
    assert accuracy >= 0.94, accuracy
for use_gpu in (True, False):  # the same steps, sharded or not (float32, other reductions)
    np.testing.assert_allclose(losses[use_gpu, "fsdp"], losses[use_gpu, "ddp"], rtol=1e-4)
# Model parallelism over NCCL: a tensor-parallel group and pipeline stages over every GPU
# (one GPU: one rank, the same code paths on CUDA), and with 4+ GPUs a 2-D mesh whose
# model-parallel pairs are data-parallel replicas; each takes DDP's steps.
runs = [("tensor", []), ("pipeline", [])]
if gpus >= 4 and gpus % 2 == 0:
    runs += [("tensor", [gpus // 2, 2]), ("pipeline", [gpus // 2, 2]), ("fsdp", [gpus // 2, 2])]
for strategy, mesh in runs:
    model = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=gpus,
                           batchSize=64, epochs=12, learningRate=0.01, labelDtype="int64",
                           useGpu=True, strategy=strategy, meshShape=mesh).fit(train)
    accuracy = np.mean([r.prediction == r.label for r in model.transform(test).collect()])
    print(f"nccl {strategy} mesh {model.summary.meshShape}: parameter bytes by rank "
          f"{model.summary.parameterBytesByRank}, peak GPU memory by rank "
          f"{model.summary.peakMemoryBytesByRank}, median epoch "
          f"{np.median(model.summary.epochSeconds):.3f} s, test accuracy {accuracy:.3f}")
    assert accuracy >= 0.94, accuracy
    np.testing.assert_allclose(model.summary.lossHistory, losses[True, "ddp"], rtol=1e-4)
# Sharded checkpoints over NCCL: every rank writes its shard of the CUDA state; 6 epochs,
# then a resumed fit to 12 must follow the uninterrupted FSDP run.
directory = tempfile.mkdtemp(prefix="gradspark-gpu-dcp-")
for epochs in (6, 12):
    resumed = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=gpus,
                             batchSize=64, epochs=epochs, learningRate=0.01,
                             labelDtype="int64", useGpu=True, strategy="fsdp",
                             checkpointDir=directory).fit(train)
shards = sorted(os.listdir(os.path.join(directory, "epoch-000012.dcp")))
print(f"nccl fsdp sharded checkpoint: {shards}, resumed from epoch "
      f"{resumed.summary.resumedFromEpoch}")
assert resumed.summary.resumedFromEpoch == 6
assert sum(name.endswith(".distcp") for name in shards) == gpus, shards
np.testing.assert_allclose(resumed.summary.lossHistory, losses[True, "fsdp"], rtol=1e-5)
spark.stop()
print("GPU CHECKS PASSED")
