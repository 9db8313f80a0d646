"""Code the benchmark scripts share: timing (CUDA events, graph capture, the copy and matmul ceilings), GEMV
weights and byte counts, end-to-end engine timing, and the merging of result files.

The scripts run as ``python benchmarks/NAME.py`` from the repository root, which puts ``benchmarks/`` first on
``sys.path``, so ``from common import timing`` resolves here without any path setup."""
