"""Gradient engines: one distributed pass over the cached blocks per call."""

from gradspark.engine.sums import GradientSums
from gradspark.engine.python import PythonGradientEngine

__all__ = ["GradientSums", "PythonGradientEngine"]
