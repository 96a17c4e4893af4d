"""TorchEstimator with NCCL on every GPU of this machine (run by run_gpu_checks.sh).

Starts local-cluster[1,N,4096N]: one worker and executor that own all N GPUs
(the discovery script reports every GPU of the machine, so N workers of one
GPU each would all take GPU 0), N task slots of one GPU each through Spark's
resource scheduling; trains the digits MLP with useGpu=True, checks accuracy,
and prints timings next to the same fit with gloo on the CPU.
"""

import os
import sys
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
spark = (SparkSession.builder.master(f"local-cluster[1,{gpus},{4096 * gpus}]")
         .config("spark.ui.enabled", "false")
         .config("spark.worker.resource.gpu.amount", str(gpus))
         .config("spark.worker.resource.gpu.discoveryScript", script)
         .config("spark.executor.resource.gpu.amount", str(gpus))
         .config("spark.task.resource.gpu.amount", "1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
train, test, X_test, y_test = digits(spark)
for use_gpu in (True, False):
    estimator = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=gpus,
                               batchSize=64, epochs=12, learningRate=0.01, labelDtype="int64",
                               useGpu=use_gpu)
    started = time.perf_counter()
    model = estimator.fit(train)
    wall = time.perf_counter() - started
    accuracy = np.mean([r.prediction == r.label for r in model.transform(test).collect()])
    print(f"{'nccl' if use_gpu else 'gloo'}: {gpus} ranks, fit {wall:.1f} s, median epoch "
          f"{np.median(model.summary.epochSeconds):.3f} s, final loss "
          f"{model.summary.lossHistory[-1]:.4f}, test accuracy {accuracy:.3f}")
    assert accuracy >= 0.94, accuracy
spark.stop()
print("GPU CHECKS PASSED")
