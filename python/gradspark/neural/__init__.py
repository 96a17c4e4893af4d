"""The neural wing: ``TorchEstimator``'s training loop on a barrier stage (rank loop,
process groups, parallelism strategies, progress reports)."""
