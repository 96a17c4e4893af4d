"""Optional integrations with the tools Spark ML pipelines are run with (MLflow)."""
