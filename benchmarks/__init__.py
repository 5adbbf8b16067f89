"""Speed and quality measurements: run each from the repository root as `python -m benchmarks.NAME`.

Their numbers, the commands that made them and the machines are on the benchmark pages of
the documentation (`docs/benchmarks/`); each page names the scripts its figures come from, and the
published figures they are compared with in
`benchmarks/REFERENCES.md`. Timings alternate the cases in one process
(`benchmarks.alternate`), as the machines' speed moves from run to run.
"""
