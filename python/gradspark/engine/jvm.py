"""JVM gradient engine: Scala blockify/validation/statistics and gradient kernels.

Everything heavy runs in the JVM (``scala/src/main/scala/io/gradspark/kernels``):
the blocks are built, validated and cached by Scala code, and each step is one
Spark job of Scala kernels (weights in the task closure, an ordered
``treeAggregate``); Python only sends the weights (little-endian float64 bytes
through py4j) and reads the sums from a file the JVM writes
(:func:`_call_for_doubles` says why). Nothing is built or started at import time.

The kernels jar is built from the sources on first use (see
:mod:`gradspark.engine.kernels_build`) and added to the running session:
``SparkContext.addJar`` ships it to the executors, and on the driver it is
loaded through its own ``URLClassLoader`` (so only primitive arrays ever come
back from tasks). A jar given in ``spark.jars`` at session start is used as is.

Mini-batch sampling draws Bernoulli(fraction) rows from a
``java.util.SplittableRandom`` seeded by ``(seed, step, partition)``: the same
seed gives the same sample, but not the sample numpy draws in the Python engine.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from typing import Dict, Optional

import numpy as np
from pyspark import StorageLevel

from gradspark.comm.traffic import JobTraffic
from gradspark.data.blocks import BINARY, CLASS_INDEX
from gradspark.data.codec import decode_block
from gradspark.data.dataset import _num_features, trainable
from gradspark.data.statistics import DataStatistics, Moments
from gradspark.data.validation import check_schema, raising_data_errors
from gradspark.engine.sums import GradientSums
from gradspark.losses import Loss

logger = logging.getLogger(__name__)

ENTRY_CLASS = "io.gradspark.kernels.PythonEntry"
KERNELS_VERSION = "3"  # PythonEntry.Version of the jar this module calls
_STATS_HEADER = 8

_lock = threading.Lock()
_loaded: dict = {}  # id of the JVM SparkContext -> (JavaSparkContext, entry object)


def load_kernels(spark):
    """The Scala entry object (``io.gradspark.kernels.PythonEntry``) for this session.

    Raises RuntimeError when the jar can be neither built nor loaded.
    """
    sc = spark.sparkContext if hasattr(spark, "sparkContext") else spark
    jvm = sc._jvm
    key = sc._jsc.sc().hashCode()
    with _lock:
        cached = _loaded.get(key)
        if cached is not None and cached[0] is sc._jsc:
            return cached[1]
        try:
            entry = _visible_entry(jvm)
            if entry is None:
                entry = _load_jar(sc)
            check_version(entry)
        except RuntimeError:
            raise
        except Exception as exc:
            raise RuntimeError(f"cannot load the gradspark JVM kernels: {exc}") from exc
        _loaded[key] = (sc._jsc, entry)
        return entry


def check_version(entry) -> None:
    """Refuse a kernels jar built from other sources (say, an old one in ``spark.jars``),
    whose methods would fail with py4j's "method does not exist" mid-fit."""
    version = str(entry.Version())
    if version != KERNELS_VERSION:
        raise RuntimeError(
            f"the gradspark kernels jar in this session is version {version}, this gradspark "
            f"calls version {KERNELS_VERSION}: rebuild it (python -m "
            "gradspark.engine.kernels_build) and pass that jar, or none, in spark.jars")


def _visible_entry(jvm):
    """The entry object when the jar is already on the driver's class path."""
    try:
        cls = jvm.py4j.reflection.ReflectionUtil.classForName(ENTRY_CLASS + "$")
    except Exception:
        return None
    return cls.getField("MODULE$").get(None)


def _load_jar(sc):
    from gradspark.engine.kernels_build import ensure_jar

    try:
        jar = ensure_jar()
    except Exception as exc:
        raise RuntimeError(f"cannot build the gradspark JVM kernels jar: {exc}") from exc
    jvm = sc._jvm
    url = jvm.java.io.File(str(jar)).toURI().toURL()
    sc._jsc.sc().addJar(str(jar))  # executors fetch it before their next task
    gateway = sc._gateway
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = url
    parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    loader = jvm.java.net.URLClassLoader(urls, parent)
    cls = loader.loadClass(ENTRY_CLASS + "$")
    entry = cls.getField("MODULE$").get(None)
    logger.info("loaded gradspark JVM kernels from %s", jar)
    return entry


def _to_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype="<f8").tobytes()


def _temp_path(suffix: str) -> str:
    """A temp file named for this driver (see :func:`_call_for_doubles`); the caller unlinks it."""
    fd, path = tempfile.mkstemp(prefix=f"gradspark-{os.getpid()}-", suffix=suffix)
    os.close(fd)
    return path


def _call_with_file(array: np.ndarray, method, *args):
    """``method(*args, path)``, the file at ``path`` holding ``array`` little-endian: a py4j
    byte[] travels base64-encoded (about 0.15 s per step for 4 million weights), a file
    costs a page-cache write."""
    path = _temp_path(".in")
    try:
        np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tofile(path)
        return method(*args, path)
    finally:
        os.unlink(path)


def _call_for_doubles(method, *args) -> np.ndarray:
    """``method(*args, resultPath)`` writes little-endian float64 to resultPath; read it.

    A byte[] returned through py4j comes back as one base64 line that the JVM
    writes in 8 KiB pieces, and on loopback the last piece waits for a delayed
    ACK: 80 KB (a 10,000-feature gradient) sent to the JVM and back took 48 ms
    median, against 0.7 ms one way, and a sparse step was 0.093 s. The JVM's
    write of the file took 0.4 ms.

    The driver JVM and this process share a host (py4j is local), as
    pyspark's own temp-file transfers to the JVM assume. The file's name
    carries this driver's pid, so that drivers sharing a temp directory can
    tell their files apart.
    """
    path = _temp_path(".f8")
    try:
        method(*args, path)
        return np.fromfile(path, dtype="<f8")
    finally:
        os.unlink(path)


def _statistics(flat: np.ndarray, d: int) -> Optional[DataStatistics]:
    if len(flat) == 0:
        return None
    h = _STATS_HEADER
    k = int(flat[6])
    total = float(flat[1])
    return DataStatistics(
        count=int(flat[0]),
        weight_sum=total,
        weight_sq_sum=float(flat[2]),
        features=Moments(total, flat[h:h + d].copy(), flat[h + d:h + 2 * d].copy()),
        label=Moments(total, np.array([flat[4]]), np.array([flat[5]])),
        label_max=float(flat[3]),
        class_weights=flat[h + 2 * d:h + 2 * d + k].copy(),
        stored_entries=float(flat[7]),
    )


class JvmTrainingData:
    """Training blocks validated, cached and summarized by Scala code, for one fit.

    Same interface and semantics as :class:`gradspark.data.dataset.TrainingData`:
    one Spark job over the input (blockify + validate, cache ``MEMORY_AND_DISK``,
    tree-aggregated statistics), an optional reliable RDD checkpoint of the
    blocks, :meth:`release` (or the context manager) unpersists everything.
    """

    def __init__(
        self,
        df,
        features_col: str,
        label_col: str,
        weight_col: Optional[str],
        label_domain: str,
        block_size: int,
        aggregation_depth: int,
        checkpoint_dir: Optional[str] = None,
    ) -> None:
        check_schema(df, features_col, label_col, weight_col)
        self.num_features = _num_features(df, features_col)
        self.spark = df.sparkSession
        self._python_blocks = None
        self.label_domain = label_domain
        self.aggregation_depth = aggregation_depth
        entry = load_kernels(self.spark)
        sc = self.spark.sparkContext
        if checkpoint_dir and sc.getCheckpointDir() is None:
            sc.setCheckpointDir(checkpoint_dir)
            logger.info("SparkContext checkpoint directory set to %s", checkpoint_dir)
        self.blocks = entry.blockify(
            df._jdf, features_col, label_col, weight_col or "", label_domain,
            self.num_features, int(block_size), bool(checkpoint_dir),
        )
        track_classes = label_domain in (BINARY, CLASS_INDEX)
        try:
            with raising_data_errors(features_col):
                flat = _call_for_doubles(self.blocks.statistics, track_classes,
                                         int(aggregation_depth))
        except BaseException:
            self.release()
            raise
        self.statistics: DataStatistics = trainable(_statistics(flat, self.num_features),
                                                    weight_col, self.release)
        stats = self.statistics
        logger.info(
            "cached %d rows x %d features in %d partitions in the JVM (weight sum %g)",
            stats.count, self.num_features, self.blocks.numPartitions(), stats.weight_sum,
        )

    def compact(self, active: np.ndarray) -> None:
        """Keep only the ``active`` features (see :mod:`gradspark.data.compaction`)."""
        self.blocks = _call_with_file(np.asarray(active, dtype=np.int32), self.blocks.compact)
        self.statistics = self.statistics.select(active)
        self.num_features = len(active)

    def block_frame(self):
        """The cached blocks as a DataFrame of ``(partition, block)``: ``partition`` is the
        blocks' partition index, ``block`` the encoding :func:`decode_block` reads.
        Resident and async workers read it as Arrow batches, once per fit."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        frame = DataFrame(self.blocks.binaryFrame(), self.spark)
        return frame.select(F.spark_partition_id().alias("partition"), "block")

    def python_blocks(self):
        """The cached blocks as a pyspark RDD of :class:`Block`, for numpy job-per-step
        passes: decoded once, cached, and unpersisted by :meth:`release`."""
        if self._python_blocks is None:
            from pyspark.sql import DataFrame

            frame = DataFrame(self.blocks.binaryFrame(), self.spark)
            self._python_blocks = frame.rdd.map(lambda row: decode_block(row[0]))
            self._python_blocks.persist(StorageLevel.MEMORY_AND_DISK)
            self._python_blocks.setName("gradspark python copy of the JVM blocks")
        return self._python_blocks

    def block_source(self):
        """Where long-running workers read the blocks: Arrow batches of :meth:`block_frame`."""
        from gradspark.ps.tasks import FrameBlocks

        return FrameBlocks(self.block_frame(), decode_block)

    @property
    def num_partitions(self) -> int:
        return int(self.blocks.numPartitions())

    def stored_bytes(self) -> float:
        """Memory + disk size of the cached blocks, as Spark's storage info reports it."""
        from gradspark.engine.choice import cached_bytes

        return cached_bytes(self.spark.sparkContext, int(self.blocks.rdd().id()))

    def release(self) -> None:
        if self._python_blocks is not None:
            self._python_blocks.unpersist(blocking=False)
        self.blocks.release()

    def __enter__(self) -> "JvmTrainingData":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


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
    """

    def __init__(self, data: JvmTrainingData, loss: Loss, aggregation_depth: int = 2) -> None:
        self.data = data
        self.loss = loss
        self.aggregation_depth = aggregation_depth
        self._constants = _to_bytes(_loss_constants(loss))
        self.traffic = JobTraffic()
        self._partitions = data.num_partitions  # fixed for the fit; asking is a py4j call

    @property
    def metrics(self) -> Dict[str, object]:
        return {"compression": "none", **self.traffic.totals}

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
            return _call_for_doubles(
                self.data.blocks.gradientSums, self.loss.name, k, len(aux), self._constants,
                params_path, float(fraction), seed64, int(step), int(self.aggregation_depth),
            )

        flat = _call_with_file(params, job)
        size = d * k + k + len(aux)
        self.traffic.step(8 * size, self._partitions * 8 * (size + 3), self._partitions)
        if len(flat) == 0 or flat[-1] == 0:
            return None
        return GradientSums.from_vector(
            flat[:size], d, k, float(flat[size]), float(flat[size + 1]), int(flat[size + 2])
        )
