"""The package as users get it: a wheel built from the repository's tracked files,
installed into a fresh virtualenv outside the repository (issue 31, item 1).

The wheel is built the way ``make dist`` builds it (setup.py's ``build_py``
compiles the Scala kernels with the compiler pyspark ships), from a copy of
the tracked files, so no jar left over from ``make`` can slip in; without
build isolation, to reuse this environment's pyspark instead of downloading
it again. The fresh virtualenv sees this environment's dependencies (a path
entry, not a site directory, so the editable install's hook is not run) and
gets gradspark from the wheel only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(REPO, "tests", "installed_job.py")


def _tracked_copy(target: str) -> None:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for name in filter(None, files):
        source = os.path.join(REPO, name)
        if os.path.isfile(source):
            os.makedirs(os.path.join(target, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(source, os.path.join(target, name))


def _run_job(python: str, cwd: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    return subprocess.run([python, JOB, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _result(proc: subprocess.CompletedProcess) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if shutil.which("git") is None or not os.path.isdir(os.path.join(REPO, ".git")):
        pytest.skip("needs the repository's git checkout to list its tracked files")
    work = tmp_path_factory.mktemp("install")
    source, wheels, venv = work / "source", work / "wheels", work / "venv"
    _tracked_copy(str(source))
    assert not (source / "python" / "gradspark" / "jars" / "gradspark-kernels.jar").exists()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(source)], check=True,
                   timeout=600)
    (wheel,) = wheels.glob("gradspark-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with open(os.path.join(site, "parent_environment.pth"), "w") as pth:
        pth.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, timeout=300)
    return dict(python=python, site=site, wheel=wheel, work=str(work))


def test_the_wheel_carries_the_kernels_jar_and_its_hash(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert "gradspark/jars/gradspark-kernels.jar" in names
    assert "gradspark/jars/gradspark-kernels.sha256" in names


def test_an_installed_wheel_fits_with_the_jvm_kernels_and_warns_once_without_them(installed):
    python, work = installed["python"], installed["work"]
    fast = _result(_run_job(python, work))
    assert fast["module"].startswith(installed["site"])  # the wheel, not the repository
    assert fast["jar"] and fast["jar"].startswith(installed["site"])
    assert fast["engine"] == "jvm"
    # A broken install (the jar gone): the fit still runs, on the numpy kernels, and says
    # so once at WARNING with the reason, the cost and the remedy.
    os.remove(fast["jar"])
    proc = _run_job(python, work)
    slow = _result(proc)
    assert slow["engine"] == "python" and slow["jar"] is None
    assert slow["objective"] == pytest.approx(fast["objective"], rel=1e-6)
    warnings = [line for line in proc.stderr.splitlines()
                if "JVM kernels cannot load" in line]
    assert len(warnings) == 1, proc.stderr[-3000:]
    assert "no gradspark kernels jar" in warnings[0] and "15x" in warnings[0] \
        and "make dist" in warnings[0]
