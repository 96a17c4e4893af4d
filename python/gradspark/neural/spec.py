"""What a rank trains: the spec shipped to every barrier task (:class:`TorchTrainSpec`), the
data layout the ranks agree on, and the step arithmetic that makes every rank take the
same steps over the same global batches."""

from __future__ import annotations

import logging
import math
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from gradspark.data.validation import InvalidDataError

logger = logging.getLogger(__name__)


RESULT_SCHEMA = "rank int, state binary, history array<double>, info string"


class TorchTrainingError(RuntimeError):
    """A user function or the training loop failed on an executor."""


@dataclass(frozen=True)
class TorchTrainSpec:
    """Everything a rank needs; travels to the executors in the task closure."""

    model_fn: Callable[[], Any]
    loss_fn: Callable[[Any, Any], Any]
    optimizer_fn: Callable[[Any], Any]
    features_col: str
    label_col: str
    label_dtype: str
    batch_size: int
    epochs: int
    seed: int
    use_gpu: bool
    checkpoint_dir: Optional[str] = None
    checkpoint_interval: int = 1
    checkpoint_unit: str = "epoch"  # what checkpoint_interval counts: epochs or steps
    strategy: str = "ddp"  # gradspark.neural.parallelism
    checkpoint_format: str = "full"  # or "sharded" (gradspark.checkpoints.epochs)
    keep_checkpoints: int = 2
    fingerprint: Dict[str, Any] = field(default_factory=dict)
    # validationIndicatorCol: held-out rows' loss after every epoch, MLlib's GBT stopping
    # rule with this tolerance (None: no validation)
    validation_tol: Optional[float] = None
    # Test-only fault plan: rank ``fail_rank`` raises on reaching ``fail_epoch``
    # in an attempt that started from scratch (so a resumed retry passes).
    fail_rank: Optional[int] = None
    fail_epoch: Optional[int] = None
    fail_batch: Optional[int] = None  # ... at this step of fail_epoch (None: at its start)
    fail_kill: bool = False  # SIGKILL the rank's process instead of raising
    # Live progress (gradspark.neural.progress): rank 0 reports to this address
    # every progress_interval steps and at epoch ends (None: it does not report).
    progress_address: Optional[Tuple[str, int]] = None
    progress_secret: bytes = b""
    progress_interval: int = 0
    # The rank grid and model parallelism (gradspark.neural.mesh, .tensor_parallel,
    # .pipeline_parallel)
    mesh_shape: Tuple[int, ...] = ()
    tensor_plan: Tuple[Tuple[str, str], ...] = ()
    pipeline_split: Tuple[str, ...] = ()
    pipeline_schedule: str = "1f1b"
    micro_batches: int = 4


def steps_per_epoch(total_rows: int, batch_size: int) -> int:
    return max(1, math.ceil(total_rows / batch_size))


def step_rows(order: np.ndarray, offset: int, steps: int, step: int) -> np.ndarray:
    """Rows of this rank (in shuffled ``order``) that go to ``step``."""
    return order[(step - offset) % steps::steps]


def global_batch_size(total_rows: int, steps: int, step: int) -> int:
    return total_rows // steps + (1 if step < total_rows % steps else 0)


def user_call(what: str, fn: Callable, *args):
    try:
        return fn(*args)
    except Exception as error:
        raise TorchTrainingError(f"{what} raised {type(error).__name__}: {error}\n"
                                 f"{traceback.format_exc()}") from error


def loss_of(spec: TorchTrainSpec, output, target):
    """``loss_fn(output, target)``, the target shaped like the output where needed."""
    # A (n, 1) output and an (n,) float label would broadcast to (n, n) in
    # MSELoss/BCELoss: shape the label like the output when the sizes agree.
    if target.is_floating_point() and output.shape != target.shape \
            and output.numel() == target.numel():
        target = target.reshape(output.shape)
    return user_call("loss_fn", spec.loss_fn, output, target)


def batch_loss(spec: TorchTrainSpec, model, X, y):
    """The mean loss of ``model`` on a batch."""
    return loss_of(spec, user_call("model forward", model, X), y)


def label_tensor(torch, y: np.ndarray, spec: TorchTrainSpec, device):
    dtype = np.int64 if spec.label_dtype == "int64" else np.float32
    return torch.as_tensor(y.astype(dtype), device=device)


@dataclass(frozen=True)
class DataLayout:
    """Row counts of every rank and the feature width, agreed before training."""

    sizes: List[int]
    width: int

    @property
    def total(self) -> int:
        return sum(self.sizes)


def check_partition(X: np.ndarray, y: np.ndarray, spec: TorchTrainSpec) -> None:
    if spec.label_dtype == "int64" and not np.array_equal(y, np.round(y)):
        raise InvalidDataError(f"labelDtype='int64' but label column {spec.label_col!r} has "
                               f"non-integral values")


def agree_on_layout(reports: List[Dict[str, Any]], features_col: str) -> DataLayout:
    """The layout from every rank's report; InvalidDataError if the data cannot train."""
    problems = [r["error"] for r in reports if r.get("error")]
    if problems:
        raise InvalidDataError(problems[0])
    total = sum(r["rows"] for r in reports)
    if total == 0:
        raise InvalidDataError("the training DataFrame is empty")
    widths = sorted({r["width"] for r in reports if r["rows"]})
    if len(widths) != 1:
        raise InvalidDataError(f"features column {features_col!r} has vectors of different "
                               f"sizes on different partitions: {widths}")
    return DataLayout([r["rows"] for r in reports], widths[0])
