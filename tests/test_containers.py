"""docker/: the image builds and a containerized standalone cluster trains (issue 31, item 4).

With podman (``--runtime runc``: crun fails on this kernel's cgroups) and no
image registry: the base image is Debian bookworm from ``debootstrap
--variant=minbase``, imported with ``podman import`` and passed as the
Dockerfile's ``BASE_IMAGE``; the wheels (gradspark's, built from this checkout
with its kernels jar, and every dependency's) are prepared outside and
installed with ``--no-index``. Then the compose file's topology on a podman
network: a master, two workers and a submit container running
``examples/spark_submit_job.py``; the model it saves (on a bind mount shared by
the workers) is loaded on the host and reproduces the job's own test AUC.

Skipped, with the reason, where no container engine runs (no podman, not
root, no debootstrap). The base image and the dependency wheels are cached
between runs (``/var/tmp/gradspark-containers``); containers and the network
are removed on exit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = "/var/tmp/gradspark-containers"
BASE = "localhost/gradspark-debian-minbase:bookworm"
IMAGE = "localhost/gradspark:test"
ENGINE = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
LABEL = "io.gradspark.test=containers"
FREE_GB = 5
with open(os.path.join(REPO, "pyproject.toml"), "rb") as _pyproject:
    # The wheel's own requirements: the image installs it with --no-index.
    DEPENDENCIES = tomllib.load(_pyproject)["project"]["dependencies"]


def _unavailable():
    if shutil.which("podman") is None or shutil.which("runc") is None:
        return "no container engine (podman with runc) on this machine"
    if os.geteuid() != 0:
        return "podman runs containers here as root only"
    have_base = subprocess.run([*ENGINE, "image", "exists", BASE]).returncode == 0
    if not have_base and shutil.which("debootstrap") is None:
        return "no base image and no debootstrap to make one (no registry is reachable)"
    return None


REASON = _unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"containers: {REASON}")


def _run(command, timeout=900, **kwargs):
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{command[:6]} failed:\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-3000:]}"
    return proc


def _base_image() -> None:
    if subprocess.run([*ENGINE, "image", "exists", BASE]).returncode == 0:
        return
    rootfs = os.path.join(CACHE, "rootfs")
    shutil.rmtree(rootfs, ignore_errors=True)
    _run(["debootstrap", "--variant=minbase", "bookworm", rootfs,
          "http://deb.debian.org/debian"])
    tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
    _run([*ENGINE, "import", "-", BASE], stdin=tar.stdout)
    tar.wait()


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the wheels are ~0.5 GB: no second copy on one disk
    except OSError:
        shutil.copy2(source, target)


def _free_gb(path: str) -> float:
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free / 2**30


def _check_disk() -> None:
    """Fail up front, by name, where podman would fail half-way with a closed pipe.

    podman stages a layer in TMPDIR (twice its size) before it stores it under
    /var/lib/containers; the install layer is ~1.5 GB.
    """
    staging = os.environ.get("TMPDIR", "/var/tmp")
    short = {path: _free_gb(path) for path in (staging, "/var/lib/containers", CACHE)}
    short = {path: free for path, free in short.items() if free < FREE_GB}
    assert not short, (f"a container build needs {FREE_GB} GB free on each of these: "
                       + ", ".join(f"{p} has {f:.1f} GB" for p, f in short.items()))


def _context(work: str) -> str:
    """A build context: docker/ and examples/ as tracked, and the wheels."""
    context = os.path.join(work, "context")
    files = _run(["git", "ls-files", "docker", "examples"], cwd=REPO).stdout.split()
    for name in files:
        os.makedirs(os.path.join(context, os.path.dirname(name)), exist_ok=True)
        shutil.copy2(os.path.join(REPO, name), os.path.join(context, name))
    wheels = os.path.join(context, "docker", "wheels")
    os.makedirs(wheels, exist_ok=True)
    cached = os.path.join(CACHE, "wheels")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "-w", cached, *DEPENDENCIES])
    for name in os.listdir(cached):
        _link_or_copy(os.path.join(cached, name), os.path.join(wheels, name))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "-w", wheels, REPO])
    return context


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("containers"))
    os.makedirs(CACHE, exist_ok=True)
    # What a killed earlier run left behind (its finally did not run): only ours, by label.
    leftovers = _run([*ENGINE, "images", "-q", "--filter", f"label={LABEL}"]).stdout.split()
    if leftovers:
        subprocess.run([*ENGINE, "rmi", "-f", *set(leftovers)], capture_output=True)
    _check_disk()
    _base_image()
    _run([*ENGINE, "build", "--network", "host", *LIMITS, "--label", LABEL, "--build-arg",
          f"BASE_IMAGE={BASE}", "--build-arg", "TORCH_SPEC=", "--build-arg",
          "PIP_ARGS=--no-index", "-f", "docker/Dockerfile", "-t", IMAGE, _context(work)])
    tag = uuid.uuid4().hex[:8]
    network, names = f"gradspark-{tag}", {r: f"gs-{r}-{tag}" for r in
                                          ("master", "worker1", "worker2", "submit")}
    data = os.path.join(work, "data")
    os.makedirs(data)
    os.chmod(data, 0o777)
    run = [*ENGINE, "run", "--rm", *LIMITS, "--network", network]
    master = f"spark://{names['master']}:7077"
    try:
        _run([*ENGINE, "network", "create", network])
        _run([*run, "-d", "--name", names["master"], "-e",
              "SPARK_MASTER_OPTS=-Dspark.master.rest.enabled=false", IMAGE, "spark-class",
              "org.apache.spark.deploy.master.Master", "--host", names["master"],
              "--port", "7077"])
        for worker in ("worker1", "worker2"):
            _run([*run, "-d", "--name", names[worker], "-v", f"{data}:/data", IMAGE,
                  "spark-class", "org.apache.spark.deploy.worker.Worker", master, "--host",
                  names[worker], "--cores", "1", "--memory", "1g"])
        submitted = _run([*run, "--name", names["submit"], "-v", f"{data}:/data", IMAGE,
                          "spark-submit", "--master", master, "--conf",
                          "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false",
                          "examples/spark_submit_job.py", "--rows", "5000", "--output",
                          "/data/model"], timeout=600)
        lines = [line for line in submitted.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, submitted.stdout[-3000:] + submitted.stderr[-3000:]
        yield dict(result=json.loads(lines[-1][len("RESULT "):]), data=data,
                   master_log=subprocess.run([*ENGINE, "logs", names["master"]],
                                             capture_output=True, text=True).stderr)
    finally:
        subprocess.run([*ENGINE, "rm", "-f", *names.values()], capture_output=True)
        subprocess.run([*ENGINE, "network", "rm", "-f", network], capture_output=True)
        # Each checkout's wheel makes a new install layer (~1.5 GB): left behind, they
        # fill the disk run after run. Only the base image stays (the build's layers go
        # with the image, so the apt step runs again next time).
        subprocess.run([*ENGINE, "rmi", "-f", IMAGE], capture_output=True)


def test_a_containerized_cluster_trains_and_the_host_loads_its_model(cluster, spark):
    sys.path.insert(0, os.path.join(REPO, "examples"))
    from example_data import synthetic
    from pyspark.ml import PipelineModel
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    from gradspark import SGDLogisticRegressionModel

    # two worker containers; on a loaded machine a worker may time out and register again
    registered = set(re.findall(r"Registering worker ([^\s:]+):", cluster["master_log"]))
    assert len(registered) == 2, cluster["master_log"][-3000:]
    assert cluster["result"]["master"].startswith("spark://gs-master-")
    model = PipelineModel.load(os.path.join(cluster["data"], "model"))
    assert isinstance(model.stages[-1], SGDLogisticRegressionModel)
    # The job's own held-out rows (the generator and split do not depend on the cluster):
    # the loaded model scores them exactly as the containers did.
    _, test = synthetic(spark, 5000).randomSplit([0.9, 0.1], seed=3)
    auc = BinaryClassificationEvaluator().evaluate(model.transform(test))
    assert auc == pytest.approx(cluster["result"]["test_auc"], abs=1e-9)
    assert auc > 0.9
