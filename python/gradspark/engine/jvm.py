"""JVM gradient engine: each step is one Spark job of Scala kernels.

The blocks are those of :class:`gradspark.data.jvm.JvmTrainingData`; each step
is one Spark job of Scala kernels (weights in the task closure, an ordered
``treeAggregate``); Python only sends the weights (little-endian float64
bytes through py4j) and reads the sums from a file the JVM writes
(:func:`gradspark.jvm.loader.call_for_doubles` says why).

Mini-batch sampling draws Bernoulli(fraction) rows from a
``java.util.SplittableRandom`` seeded by ``(seed, step, partition)``: the same
seed gives the same sample, but not the sample numpy draws in the Python engine.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from gradspark.comm.traffic import JobTraffic
from gradspark.data.jvm import JvmTrainingData
from gradspark.engine.sums import GradientSums
from gradspark.jvm.loader import call_for_doubles, call_with_file, to_bytes
from gradspark.losses import Loss


def _loss_constants(loss: Loss) -> np.ndarray:
    if loss.name == "squaredError":
        return np.array([loss.label_shift, loss.label_scale], dtype=np.float64)
    if loss.name == "huber":
        return np.array([loss.epsilon], dtype=np.float64)
    if loss.name in ("logistic", "multinomial", "hinge"):
        return np.zeros(0)
    raise ValueError(f"the JVM engine has no kernel for loss {loss.name!r}")


class JvmGradientEngine:
    """Distributed gradient sums with Scala kernels: one Spark job per call.

    ``metrics`` counts the arrays each step moves
    (:class:`~gradspark.comm.traffic.JobTraffic`): every partition's task
    returns its sums (``GradientFunction`` in ``Kernels.scala``), even when
    it has no rows.

    ``local_features``: first renumber each partition to the features it holds
    (:meth:`JvmTrainingData.localize`); a task then gathers and returns only
    those (``LocalFeatures.scala``), with the same sums to the bit at the same
    aggregation tree.
    """

    def __init__(self, data: JvmTrainingData, loss: Loss, aggregation_depth: int = 2,
                 local_features: bool = False) -> None:
        self.data = data
        self.loss = loss
        self.aggregation_depth = aggregation_depth
        self._constants = to_bytes(_loss_constants(loss))
        self.traffic = JobTraffic()
        self._partitions = data.num_partitions  # fixed for the fit; asking is a py4j call
        # features each partition holds (None: dense steps)
        self.held_features = data.localize() if local_features else None

    @property
    def metrics(self) -> Dict[str, object]:
        local = {} if self.held_features is None else {
            "meanPartitionFeatures": float(self.held_features.mean())}
        return {"compression": "none", **local, **self.traffic.totals}

    def gradient_sums(
        self,
        coef: np.ndarray,
        offset: np.ndarray,
        aux: np.ndarray,
        fraction: float = 1.0,
        seed: int = 0,
        step: int = 0,
    ) -> Optional[GradientSums]:
        """Sums over all rows, or over a Bernoulli(fraction) sample seeded by (seed, step)."""
        coef = np.asarray(coef, dtype=np.float64)
        d = self.data.num_features
        k = coef.shape[1] if coef.ndim == 2 else 1
        offset = np.asarray(offset, dtype=np.float64).reshape(k)
        aux = np.asarray(aux, dtype=np.float64).ravel()
        params = np.concatenate([coef.reshape(d * k), offset, aux])
        seed64 = int(seed) & 0xFFFFFFFFFFFFFFFF
        if seed64 >= 1 << 63:
            seed64 -= 1 << 64

        def job(params_path: str) -> np.ndarray:
            return call_for_doubles(
                self.data.blocks.gradientSums, self.loss.name, k, len(aux), self._constants,
                params_path, float(fraction), seed64, int(step), int(self.aggregation_depth),
            )

        flat = call_with_file(params, job)
        size = d * k + k + len(aux)
        tail = 8 * (size - d * k + 3)
        received = (self._partitions * (8 * d * k + tail) if self.held_features is None
                    else int(self.held_features.sum()) * (4 + 8 * k) + self._partitions * tail)
        self.traffic.step(8 * size, received, self._partitions)
        if len(flat) == 0 or flat[-1] == 0:
            return None
        return GradientSums.from_vector(
            flat[:size], d, k, float(flat[size]), float(flat[size + 1]), int(flat[size + 2])
        )
