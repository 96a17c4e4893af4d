"""A Spark standalone cluster on loopback, from the pyspark package's own classes.

    with StandaloneCluster(workers=2, work_dir=tmp) as cluster:
        subprocess.run([spark_submit, "--master", cluster.url, ...])

One master and ``workers`` workers (1 core, 1 GiB each) are started with
``bin/spark-class`` (no Docker, no Spark download), each in its own process
group so that stopping the cluster also stops their executors.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import List

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")
SPARK_SUBMIT = os.path.join(SPARK_HOME, "bin", "spark-submit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def stop_sessions(processes: List[subprocess.Popen], grace: float = 30) -> None:
    """SIGTERM each process's session (newest first, so workers before their master),
    SIGKILL what is left after ``grace`` seconds; empties ``processes``."""
    for process in reversed(processes):
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for process in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    processes.clear()


class StandaloneCluster:
    def __init__(self, workers: int, work_dir: str, cores: int = 1, memory: str = "1g"):
        self.workers, self.work_dir, self.cores, self.memory = workers, work_dir, cores, memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: List[subprocess.Popen] = []
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=SPARK_HOME,
                        PYSPARK_PYTHON=sys.executable)

    def _start(self, name: str, *args: str) -> None:
        log = open(os.path.join(self.work_dir, f"{name}.log"), "w")
        self.processes.append(subprocess.Popen(
            [SPARK_CLASS, *args], stdout=log, stderr=subprocess.STDOUT, env=self.env,
            start_new_session=True))

    def __enter__(self) -> "StandaloneCluster":
        os.makedirs(self.work_dir, exist_ok=True)
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(free_port()))
        try:
            wait_for_port(self.port, 60)
            for i in range(self.workers):
                work = os.path.join(self.work_dir, f"worker{i}")
                os.makedirs(work, exist_ok=True)
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", "127.0.0.1", "--cores", str(self.cores), "--memory",
                            self.memory, "--work-dir", work, "--webui-port", str(free_port()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_sessions(self.processes)

    def __exit__(self, *exc) -> None:
        self.stop()

    def executor_dirs(self) -> List[str]:
        """Application directories the workers created: one per executor they ran."""
        found = []
        for i in range(self.workers):
            work = os.path.join(self.work_dir, f"worker{i}")
            found += [os.path.join(work, d) for d in os.listdir(work) if d.startswith("app-")]
        return found
