"""Training across separate executor JVMs (local-cluster), not just threads of one JVM."""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(__file__)


def test_fit_on_local_cluster_matches_mllib():
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "cluster_fit_job.py"), "local-cluster[2,1,1024]"],
        capture_output=True, text=True, timeout=600,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["executors"] == 2
    assert result["worker_pids"] >= 2
    np.testing.assert_allclose(result["ours"], result["ref"], rtol=1e-4, atol=1e-5)
