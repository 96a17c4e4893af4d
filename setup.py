"""Build hook: every wheel carries the JVM kernels jar (pyproject.toml holds the metadata).

``build_py`` compiles ``scala/`` into ``gradspark/jars/gradspark-kernels.jar``
with the Scala compiler pyspark ships (gradspark/jvm/build.py, the
same code ``make`` runs; skipped when the jar already matches the sources'
hash) before the package data is copied, and refuses to build a package
without it: a wheel without the jar would silently run the numpy kernels,
several times slower. Needs java (17+) and pyspark at build time, which is
why pyspark is also a build requirement.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUILDER = ROOT / "python" / "gradspark" / "jvm" / "build.py"


class BuildWithKernels(build_py):
    def run(self):
        # Loaded by path: importing the gradspark package would need its run-time
        # dependencies inside the build environment.
        spec = importlib.util.spec_from_file_location("gradspark_kernels_build", BUILDER)
        builder = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(builder)
        try:
            jar = builder.ensure_jar()
        except Exception as exc:
            raise SystemExit(f"refusing to build gradspark without its JVM kernels jar: "
                             f"{exc}") from exc
        hash_file = jar.parent / builder.HASH_NAME
        if not (jar.is_file() and hash_file.is_file()):
            raise SystemExit(f"refusing to build gradspark: {jar} or {hash_file} is missing")
        self.announce(f"gradspark: packaging {jar} ({jar.stat().st_size} bytes)", level=2)
        super().run()


setup(cmdclass={"build_py": BuildWithKernels})
