"""Test support shipped with the package: fault injection (:mod:`~gradspark.testing.faults`)
and synthetic click-through data (:mod:`~gradspark.testing.ctr_data`)."""
