"""The JVM side seen from Python: building the kernels jar (:mod:`~gradspark.jvm.build`)
and loading and calling it (:mod:`~gradspark.jvm.loader`). The data and the engine that use
it live in :mod:`gradspark.data.jvm` and :mod:`gradspark.engine.jvm`."""
