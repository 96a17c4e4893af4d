"""Shared fixtures: one real local[2] SparkSession for the whole run, small datasets."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

import numpy as np
import pytest

# Executors must run the same interpreter (and so see the same packages) as the driver.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Every JVM the suite starts, here or in a job's subprocess, reads spark-conf/ (why: there).
os.environ.setdefault("SPARK_CONF_DIR", os.path.join(os.path.dirname(__file__), "spark-conf"))

from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    session = (
        SparkSession.builder.master("local[2]")
        .appName("gradspark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "local_cluster(name): the test reads the check `name` of "
        "local_cluster_jobs.py, run with the other selected ones in one local-cluster driver")


#: Groups of tests that start servers or clusters on fixed ports, or share one costly
#: fixture: pytest-xdist (``make test``: ``-n 2``) runs each group on one worker.
SHARED_RESOURCES = {
    "test_standalone_cluster": "clusters", "test_netns_bed": "clusters",
    "test_containers": "clusters",
    "test_connect": "connect",  # a local Connect server listens on Spark's fixed port
}
#: The modules whose tests read the one local-cluster driver (``local_cluster``).
LOCAL_CLUSTER_MODULES = ("test_cluster", "test_fault_tolerance", "test_jvm_engine",
                         "test_sharded")
#: The longest groups, started first so that the two workers end together.
LONGEST_FIRST = ("local_cluster", "clusters", "test_cli", "test_examples", "connect")


def group_of(nodeid: str) -> str:
    """A test's group, from its node id alone (xdist's controller sees only ids)."""
    path, _, name = nodeid.partition("::")
    module = os.path.splitext(os.path.basename(path))[0]
    if module in LOCAL_CLUSTER_MODULES:
        return "local_cluster"
    if "spark_connect" in name:
        return "connect"  # the CLI's run on a local Connect server
    return SHARED_RESOURCES.get(module, module)


def pytest_collection_modifyitems(config, items):
    """The local-cluster checks the selected tests read, in local_cluster_jobs.py's order;
    the tests ordered longest group first (the order xdist hands groups out in)."""
    from local_cluster_jobs import ORDER

    wanted = {m.args[0] for item in items for m in item.iter_markers("local_cluster")}
    config.local_cluster_checks = [name for name in ORDER if name in wanted]
    strays = [item.nodeid for item in items if item.get_closest_marker("local_cluster")
              and group_of(item.nodeid) != "local_cluster"]
    if strays:
        raise pytest.UsageError(f"add their modules to LOCAL_CLUSTER_MODULES: {strays}")
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # plain pytest runs one process; nothing to schedule
    pass
else:
    class GroupScheduling(LoadScopeScheduling):
        """Each group (:func:`group_of`) on one worker, in collection order. xdist's
        own ``loadgroup`` cannot be used: it renames ``item._nodeid``, which pytest 9
        no longer reads."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        config.option.loadscopereorder = False  # keep the longest groups first
        return GroupScheduling(config, log)


@pytest.fixture(scope="session")
def local_cluster(request) -> Callable[[str], dict]:
    """``local_cluster(name)``: that check's result; its traceback fails only its test.

    The selected checks run together, once, in one local-cluster driver process:
    a cluster's JVMs take 15-20 s to start on CI's two cores.
    """
    from job_support import run_job

    results = run_job("local_cluster_jobs.py", *request.config.local_cluster_checks,
                      timeout=1800)

    def check(name: str) -> dict:
        result = results.get(name, {"error": f"{name} was not run: mark its test "
                                              f"@pytest.mark.local_cluster({name!r})"})
        assert "error" not in result, f"local-cluster check {name} failed:\n{result['error']}"
        return result

    return check


@pytest.fixture(scope="session")
def hashed_rare(spark):
    """Hashed rows with a tail of buckets seen once (tests/hashed_data.py): after
    compaction ~2,000 features, of which a 5-10% mini-batch touches a few hundred."""
    from hashed_data import frames, hashed_rows

    columns, labels = hashed_rows(2400, seed=5, rare=True)
    return frames(spark, columns, labels, partitions=3)


def make_df(spark, X, columns: dict, partitions: int = 2, sparse: bool = False):
    """DataFrame with a `features` vector column plus the given 1-d columns."""
    names = list(columns)
    rows = []
    for i, x in enumerate(X):
        if sparse:
            idx = np.flatnonzero(x)
            vec = Vectors.sparse(len(x), idx.tolist(), x[idx].tolist())
        else:
            vec = Vectors.dense(x)
        rows.append((vec, *[float(columns[n][i]) for n in names]))
    return spark.createDataFrame(rows, ["features", *names]).repartition(partitions).cache()


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(20261202)


@pytest.fixture(scope="session")
def classification_data(spark):
    """Features on very different scales and offsets, binary and 3-class labels, weights."""
    g = np.random.default_rng(7)
    n = 500
    X = g.normal(size=(n, 5)) * [1.0, 3.0, 0.2, 10.0, 1.0] + [0.0, 2.0, -1.0, 5.0, 0.5]
    z = (X - X.mean(0)) / X.std(0)
    binary = (z @ [1.5, -1.0, 0.5, 0.8, 0.0] + g.logistic(size=n) > 0.3).astype(float)
    multi = np.argmax(z @ g.normal(size=(5, 3)) + g.gumbel(size=(n, 3)), axis=1).astype(float)
    weight = g.uniform(0.2, 3.0, size=n)
    df = make_df(spark, X, {"label": binary, "multi": multi, "weight": weight})
    return df, X, binary, multi, weight


@pytest.fixture(scope="session")
def regression_data(spark):
    g = np.random.default_rng(11)
    n = 400
    X = g.normal(size=(n, 4)) * [1.0, 5.0, 0.3, 2.0] + [1.0, -3.0, 0.0, 10.0]
    y = X @ [2.0, -0.4, 3.0, 0.7] + 5.0 + g.normal(scale=0.5, size=n)
    y_outliers = y.copy()
    y_outliers[:15] += g.normal(scale=40.0, size=15)
    weight = g.uniform(0.5, 2.0, size=n)
    df = make_df(spark, X, {"label": y, "noisy": y_outliers, "weight": weight})
    return df, X, y, weight


@pytest.fixture(scope="session")
def sparse_data(spark):
    """~15% dense features; the same rows as sparse and as dense vectors."""
    g = np.random.default_rng(5)
    n, d = 400, 30
    X = g.normal(size=(n, d)) * (g.random((n, d)) < 0.15)
    y = (X @ g.normal(size=d) + 0.3 * g.normal(size=n) > 0).astype(float)
    return make_df(spark, X, {"label": y}, sparse=True), make_df(spark, X, {"label": y}), X, y


def gradspark_cached_rdds(spark) -> list:
    """Names of RDDs that gradspark cached and did not release."""
    rdds = spark.sparkContext._jsc.getPersistentRDDs().values()
    return [str(r.name()) for r in rdds if "gradspark" in str(r.name())]


def wait_until(condition: Callable[[], object], seconds: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass: threads, servers and sockets
    close asynchronously, later on a loaded machine than on an idle one."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def transform_stream(spark, model, df, tmp_path, columns, rows: int = 40):
    """``model.transform`` on a Structured Streaming DataFrame (a Parquet directory of
    ``rows`` rows of ``df`` read with ``readStream``), written to a memory sink with
    ``trigger(availableNow=True)``; returns the sink's rows: ``x`` (the features as an
    array) and ``columns``."""
    from pyspark.ml.functions import array_to_vector, vector_to_array

    source = str(tmp_path / "stream")
    df.select(vector_to_array("features").alias("x")).limit(rows).write.parquet(source)
    stream = (spark.readStream.schema("x array<double>").parquet(source)
              .select(array_to_vector("x").alias("features")))
    assert stream.isStreaming
    name = f"scored_{abs(hash(str(tmp_path)))}"
    query = (model.transform(stream).select(vector_to_array("features").alias("x"), *columns)
             .writeStream.format("memory").queryName(name).trigger(availableNow=True)
             .start())
    query.awaitTermination(120)
    return spark.sql(f"select * from {name}").collect()
