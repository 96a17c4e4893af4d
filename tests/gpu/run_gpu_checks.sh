#!/usr/bin/env bash
# GPU checks for TorchEstimator (NCCL). Run on a machine with NVIDIA GPUs and a
# CUDA build of torch:  bash tests/gpu/run_gpu_checks.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
nvidia-smi --query-gpu=index,name,memory.total --format=csv
"$PY" -c "import torch, pyspark, sklearn" 2>/dev/null || "$PY" -m pip install -q -e '.[dev,torch]'
"$PY" tests/gpu/gpu_check.py
"$PY" tests/gpu/gpu_check.py --stage-level
