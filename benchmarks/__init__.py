"""Benchmark scripts and the LoCoMo harness (`benchmarks.locomo`), outside the package.

Run from the source checkout: `PYTHONPATH=$PWD python benchmarks/bench_x.py`, or
`langmem-trpc bench locomo` from an editable install (`pip install -e .`)."""
