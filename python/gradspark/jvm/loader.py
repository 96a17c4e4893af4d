"""Loading the JVM kernels into a session, and calling them with arrays.

The kernels jar is built from the sources on first use (see
:mod:`gradspark.jvm.build`) and added to the running session:
``SparkContext.addJar`` ships it to the executors, and on the driver it is
loaded through its own ``URLClassLoader`` (so only primitive arrays ever come
back from tasks). A jar given in ``spark.jars`` at session start is used as is.
Arrays cross py4j through files (:func:`call_for_doubles` says why).
Nothing is built or started at import time.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading

import numpy as np

logger = logging.getLogger(__name__)

ENTRY_CLASS = "io.gradspark.kernels.PythonEntry"
KERNELS_VERSION = "6"  # PythonEntry.Version of the jar this module calls

_lock = threading.Lock()
_loaded: dict = {}  # id of the JVM SparkContext -> (JavaSparkContext, entry object)
# id of the py4j gateway (one driver JVM for the process) -> (gateway, the entry object
# loaded from the jar). One class loader per JVM, not per SparkContext: py4j caches
# reflected methods by class *name*, so a second loader's classes (a later session of
# the same process) got the first loader's methods ("object is not an instance of
# declaring class"). Holding the gateway keeps its id from being reused.
_jvm_entries: dict = {}


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
            "gradspark.jvm.build) and pass that jar, or none, in spark.jars")


def _visible_entry(jvm):
    """The entry object when the jar is already on the driver's class path."""
    try:
        cls = jvm.py4j.reflection.ReflectionUtil.classForName(ENTRY_CLASS + "$")
    except Exception:
        return None
    return cls.getField("MODULE$").get(None)


def _load_jar(sc):
    from gradspark.jvm.build import ensure_jar

    try:
        jar = ensure_jar()
    except Exception as exc:
        raise RuntimeError(f"cannot build the gradspark JVM kernels jar: {exc}") from exc
    jvm = sc._jvm
    sc._jsc.sc().addJar(str(jar))  # this context's executors fetch it before their next task
    gateway = sc._gateway
    cached = _jvm_entries.get(id(gateway))
    if cached is not None and cached[0] is gateway:
        return cached[1]
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(str(jar)).toURI().toURL()
    parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    loader = jvm.java.net.URLClassLoader(urls, parent)
    cls = loader.loadClass(ENTRY_CLASS + "$")
    entry = cls.getField("MODULE$").get(None)
    _jvm_entries[id(gateway)] = (gateway, entry)
    logger.info("loaded gradspark JVM kernels from %s", jar)
    return entry


def to_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype="<f8").tobytes()


def temp_path(suffix: str) -> str:
    """A temp file named for this driver (see :func:`call_for_doubles`); the caller unlinks it."""
    fd, path = tempfile.mkstemp(prefix=f"gradspark-{os.getpid()}-", suffix=suffix)
    os.close(fd)
    return path


def call_with_file(array: np.ndarray, method, *args):
    """``method(*args, path)``, the file at ``path`` holding ``array`` little-endian: a py4j
    byte[] travels base64-encoded (about 0.15 s per step for 4 million weights), a file
    costs a page-cache write."""
    path = temp_path(".in")
    try:
        np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tofile(path)
        return method(*args, path)
    finally:
        os.unlink(path)


def call_for_doubles(method, *args) -> np.ndarray:
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
    path = temp_path(".f8")
    try:
        method(*args, path)
        return np.fromfile(path, dtype="<f8")
    finally:
        os.unlink(path)


_unavailable_said = threading.Event()


def jvm_kernels_available(spark) -> bool:
    """Whether the kernels jar is (or can be) loaded into this session."""
    try:
        load_kernels(spark)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means: fall back to numpy
        if _unavailable_said.is_set():
            logger.info("JVM kernels not available (%s); using the python engine", exc)
        else:  # once per process: what it costs, and the remedy
            _unavailable_said.set()
            logger.warning(
                "gradspark's JVM kernels cannot load (%s): fits fall back to the numpy "
                "kernels, whose data pass is about 15x and job-per-step steps about 7x "
                "slower (docs/guide.md#benchmark). Install a gradspark wheel built with "
                "`make dist` (it carries the jar), or build the jar with `python -m "
                "gradspark.jvm.build`", exc)
        return False
