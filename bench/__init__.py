"""quotagate's benchmarks, run from the repository root as modules: `python -m bench.run`,
`python -m bench.soak`, ... (the Makefile's bench targets). Figures only: targets are reported,
never asserted. See bench/README.md."""
