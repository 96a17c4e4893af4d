"""Test support shipped with the package: fault injection (:mod:`~gradspark.testing.faults`)."""
