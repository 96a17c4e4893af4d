"""Build the JVM gradient kernels jar without sbt: ``python -m gradspark.jvm.build``.

The Scala sources (``<repo>/scala/src/main/scala``) are compiled with the
Scala compiler that pyspark ships (``scala.tools.nsc.Main`` in
``pyspark/jars``) and zipped into ``gradspark/jars/gradspark-kernels.jar``.
The jar is rebuilt only when the sources' SHA-256 (plus the pyspark version)
changes; the hash is kept next to it in ``gradspark-kernels.sha256``. In an
installed package without the sources, the packaged jar is used as is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, List, Optional

JAR_NAME = "gradspark-kernels.jar"
HASH_NAME = "gradspark-kernels.sha256"

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # python/gradspark
JAR_DIR = PACKAGE_DIR / "jars"
SOURCE_DIR = PACKAGE_DIR.parent.parent / "scala" / "src" / "main" / "scala"


def jar_path() -> Path:
    return JAR_DIR / JAR_NAME


def scala_sources(source_dir: Path = SOURCE_DIR) -> List[Path]:
    return sorted(source_dir.rglob("*.scala")) if source_dir.is_dir() else []


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def source_hash(sources: List[Path], source_dir: Path = SOURCE_DIR) -> str:
    import pyspark

    digest = hashlib.sha256(f"pyspark {pyspark.__version__}\n".encode())
    for path in sources:
        digest.update(str(path.relative_to(source_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("cannot build the gradspark kernels: no java on PATH (set JAVA_HOME)")
    return found


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    JAR_DIR.mkdir(parents=True, exist_ok=True)
    with open(JAR_DIR / ".build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compile(sources: List[Path], jar: Path) -> None:
    classpath = str(pyspark_jars_dir() / "*")
    with tempfile.TemporaryDirectory(prefix="gradspark-kernels-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        command = [
            _java(), "-Xss8m", "-cp", classpath, "scala.tools.nsc.Main", "-usejavacp",
            "-release", "17", "-deprecation", "-feature", "-d", str(classes),
            *map(str, sources),
        ]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                "compiling the gradspark Scala kernels failed:\n" + proc.stdout + proc.stderr
            )
        partial = jar.with_suffix(".jar.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: gradspark\r\n\r\n")
            for path in sorted(classes.rglob("*")):
                if path.is_file():
                    out.write(path, str(path.relative_to(classes)))
        os.replace(partial, jar)


def ensure_jar(force: bool = False) -> Path:
    """The kernels jar, (re)built if the Scala sources changed since the last build."""
    jar = jar_path()
    sources = scala_sources()
    if not sources:  # installed package: use what was packaged
        if jar.exists():
            return jar
        raise RuntimeError(
            f"no gradspark kernels jar at {jar} and no Scala sources at {SOURCE_DIR} to build it"
        )
    wanted = source_hash(sources)
    hash_file = JAR_DIR / HASH_NAME

    def fresh() -> bool:
        return (not force and jar.exists() and hash_file.exists()
                and hash_file.read_text().strip() == wanted)

    if fresh():
        return jar
    with _build_lock():
        if fresh():  # built by another process meanwhile
            return jar
        _compile(sources, jar)
        hash_file.write_text(wanted + "\n")
    return jar


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    jar = ensure_jar(force="--force" in args)
    print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
