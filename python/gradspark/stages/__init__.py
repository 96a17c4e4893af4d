"""Spark stages beneath the trainers: where blocks come from for long-running workers
(:mod:`~gradspark.stages.sources`) and how many tasks can run at once
(:mod:`~gradspark.stages.slots`)."""
