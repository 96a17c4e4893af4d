"""The batch jobs behind the ``gradspark`` command (:mod:`gradspark.cli`): checks, session, pipeline."""
