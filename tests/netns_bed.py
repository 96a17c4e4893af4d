"""A multi-host test bed on one machine: network namespaces on one bridge.

    with NetnsBed(work_dir) as bed:
        bed.start_spark(secret)                 # master + two workers, Spark RPC encrypted
        job = bed.popen("driver", [python, "tests/netns_job.py", ...])

Five namespaces on a bridge, addresses from 198.51.100.0/24 (TEST-NET-2, routed
nowhere): ``master`` (the standalone master and the driver, as on a cluster's
edge node), ``w1`` and ``w2`` (one worker each, with its executor), and
``attacker``. Every namespace's link is capped at ``rate`` (``tbf``) and, where
the kernel has ``sch_netem``, delayed by ``delay_ms`` each way. The bridge
forgets MAC addresses at once (``ageing_time 0``), so it floods every frame to
every port, as a hub or a mirrored switch port would: the attacker sees all
traffic, the worst case for a sniffer.

Everything is removed on exit (processes by session, then links and
namespaces), also after a failure; names carry the process id, so two runs
cannot collide. :func:`unavailable` says why a bed cannot be made here
(not root, no ``ip``, namespaces refused), for a skip with that reason.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from standalone_cluster import SPARK_CLASS, SPARK_HOME, stop_sessions

SUBNET = "198.51.100"
ADDRESSES = {"master": f"{SUBNET}.1", "w1": f"{SUBNET}.11", "w2": f"{SUBNET}.12",
             "attacker": f"{SUBNET}.66"}
SPARK_PORT = 7077


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30)


def unavailable() -> Optional[str]:
    """Why namespaces cannot be made here; None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc", "ss") if shutil.which(tool) is None]
    if missing:
        return f"iproute2's {', '.join(missing)} not installed"
    # Everything the bed does, in miniature: a namespace, a bridge, a veth pair into the
    # namespace, a command run inside it. Any refusal is the reason to skip.
    tag = os.getpid() % 100000
    probe, bridge, veth = f"gsprobe{tag}", f"gspb{tag}", f"gspv{tag}"
    steps = [("netns", "add", probe), ("link", "add", bridge, "type", "bridge"),
             ("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", probe),
             ("link", "set", veth, "master", bridge),
             ("netns", "exec", probe, "ip", "link", "set", "lo", "up")]
    try:
        for step in steps:
            done = _ip(*step, check=False)
            if done.returncode != 0:
                return f"`ip {' '.join(step)}` failed: {done.stderr.strip()}"
    finally:
        for step in (("link", "del", veth), ("link", "del", bridge), ("netns", "del", probe)):
            _ip(*step, check=False)
    return None


def netem_available() -> bool:
    probe = f"gsn{os.getpid() % 100000}"
    _ip("link", "add", probe, "type", "dummy", check=False)
    try:
        return subprocess.run(["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay",
                               "1ms"], capture_output=True).returncode == 0
    finally:
        _ip("link", "del", probe, check=False)


class NetnsBed:
    def __init__(self, work_dir: str, rate: str = "1gbit", delay_ms: float = 1.0) -> None:
        self.work_dir, self.rate, self.delay_ms = work_dir, rate, delay_ms
        tag = f"{os.getpid() % 100000}"
        self.bridge = f"gsbr{tag}"
        self.namespaces = {role: f"gs{role}{tag}" for role in ADDRESSES}
        self.netem = False
        self.processes: List[subprocess.Popen] = []
        self._links: List[str] = []

    # -- the network ------------------------------------------------------
    def __enter__(self) -> "NetnsBed":
        os.makedirs(self.work_dir, exist_ok=True)
        try:
            self.netem = netem_available()
            _ip("link", "add", self.bridge, "type", "bridge", "ageing_time", "0")
            self._links.append(self.bridge)
            _ip("link", "set", self.bridge, "up")
            for index, (role, ns) in enumerate(self.namespaces.items()):
                _ip("netns", "add", ns)
                outside = f"{self.bridge[:9]}v{index}"
                _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
                self._links.append(outside)
                _ip("link", "set", outside, "master", self.bridge)
                _ip("link", "set", outside, "up")
                self.exec(role, ["ip", "addr", "add", f"{ADDRESSES[role]}/24", "dev", "eth0"])
                self.exec(role, ["ip", "link", "set", "eth0", "up"])
                self.exec(role, ["ip", "link", "set", "lo", "up"])
                if role == "attacker":  # a sniffer keeps every frame it is handed
                    self.exec(role, ["ip", "link", "set", "eth0", "promisc", "on"])
                shape = (["netem", "delay", f"{self.delay_ms}ms", "rate", self.rate]
                         if self.netem else
                         ["tbf", "rate", self.rate, "burst", "256kb", "latency", "50ms"])
                self.exec(role, ["tc", "qdisc", "add", "dev", "eth0", "root", *shape])
        except BaseException:
            self.close()
            raise
        return self

    def exec(self, role: str, command: List[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.namespaces[role], *command],
                              capture_output=True, text=True, check=True, timeout=60, **kwargs)

    def popen(self, role: str, command: List[str], log: str, env: Optional[Dict] = None,
              **kwargs) -> subprocess.Popen:
        """A process in ``role``'s namespace, in its own session (stopped with the bed)."""
        out = open(os.path.join(self.work_dir, log), "w")
        process = subprocess.Popen(["ip", "netns", "exec", self.namespaces[role], *command],
                                   stdout=out, stderr=subprocess.STDOUT,
                                   env=env or dict(os.environ), start_new_session=True,
                                   **kwargs)
        self.processes.append(process)
        return process

    def listeners(self, role: str) -> List[str]:
        """``address:port process`` of every listening TCP socket in ``role``'s namespace."""
        out = self.exec(role, ["ss", "-ltnpH"]).stdout
        found = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 4:  # a JVM's IPv4 sockets show as [::ffff:a.b.c.d]:port
                address = re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", fields[3])
                found.append(f"{address} {fields[-1] if 'users:' in fields[-1] else ''}")
        return found

    # -- Spark ------------------------------------------------------------
    def spark_env(self, role: str, secret: str) -> Dict[str, str]:
        """Environment of a Spark process in ``role``: its address, Spark RPC authenticated
        and encrypted with ``secret`` (the master's and workers' too)."""
        options = (f"-Dspark.authenticate=true -Dspark.authenticate.secret={secret} "
                   "-Dspark.network.crypto.enabled=true")
        return dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP=ADDRESSES[role],
                    SPARK_MASTER_OPTS=options, SPARK_WORKER_OPTS=options,
                    PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)

    @property
    def master_url(self) -> str:
        return f"spark://{ADDRESSES['master']}:{SPARK_PORT}"

    def start_spark(self, secret: str, memory: str = "2g", timeout: float = 90) -> None:
        self.popen("master", [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host",
                              ADDRESSES["master"], "--port", str(SPARK_PORT),
                              "--webui-port", "18080"], "master.log",
                   self.spark_env("master", secret))
        self._wait_listening("master", f"{ADDRESSES['master']}:{SPARK_PORT}", timeout)
        for role in ("w1", "w2"):
            work = os.path.join(self.work_dir, role)
            os.makedirs(work, exist_ok=True)
            self.popen(role, [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker",
                              self.master_url, "--host", ADDRESSES[role], "--cores", "1",
                              "--memory", memory, "--work-dir", work, "--webui-port", "18081"],
                       f"{role}.log", self.spark_env(role, secret))
        deadline = time.monotonic() + timeout
        log = os.path.join(self.work_dir, "master.log")
        while open(log).read().count("Registering worker") < 2:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not register in {timeout} s; see {log}")
            time.sleep(0.5)

    def _wait_listening(self, role: str, address: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(entry.startswith(address) for entry in self.listeners(role)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {address} in {role} after {timeout} s")
            time.sleep(0.5)

    # -- teardown ---------------------------------------------------------
    def close(self) -> None:
        stop_sessions(self.processes, grace=20)
        for ns in self.namespaces.values():  # anything still running inside (executors)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for link in self._links:
            _ip("link", "del", link, check=False)
        self._links.clear()
        for ns in self.namespaces.values():
            _ip("netns", "del", ns, check=False)

    def __exit__(self, *exc) -> None:
        self.close()
