"""Gradient engines: one distributed pass over the cached blocks per call.

``PythonGradientEngine`` runs numpy kernels in Python workers; ``JvmGradientEngine``
runs Scala kernels over blocks cached in the JVM (``gradspark.data.jvm``). Importing
this package starts no JVM and builds nothing: the kernels jar is built and
loaded by :func:`gradspark.jvm.loader.load_kernels` on first use.
"""

from gradspark.engine.sums import GradientSums
from gradspark.engine.python import PythonGradientEngine
from gradspark.engine.jvm import JvmGradientEngine

__all__ = [
    "GradientSums", "PythonGradientEngine", "JvmGradientEngine",
]
