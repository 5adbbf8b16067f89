"""The benchmarks' one timing harness: several cases timed in turn in one process."""

import time


def alternate(cases, repeats=3, calls=15, warmup=0, seconds=None, cpu=False):
    """Milliseconds per call of each case, the cases interleaved `repeats` times.

    Interleaving spreads a machine's drift (a shared host slowing down)
    over every case instead of charging it to one; every other round runs
    the cases in reverse order.

    Args:
        cases: `{name: function}`; each call of `function()` runs one step
            and returns its tensors (a tensor, or a nest of them), which are
            read back after the last call of a round so that queued work is
            counted.
        repeats: rounds over all the cases.
        calls: calls per case and round.
        warmup: untimed calls of each case first (tracing, compilation).
        seconds: instead of `calls`, as many calls as last about this long
            (estimated from one more call of each case).
        cpu: also return the process CPU time per call.

    Returns:
        `{name: [ms per call in each round]}`, and with `cpu` a second such
        dict of process CPU ms (CPU / wall: the cores kept busy).

    Example:

    >>> times = alternate({"fused": fused_step, "explicit": explicit_step})
    >>> {name: sorted(values)[1] for name, values in times.items()}  # medians of 3
    """
    for function in cases.values():
        for _ in range(warmup):
            _read(function())
    counts = {name: calls for name in cases}
    if seconds is not None:
        for name, function in cases.items():
            started = time.perf_counter()
            _read(function())
            counts[name] = max(1, round(seconds / (time.perf_counter() - started)))
    wall = {name: [] for name in cases}
    process = {name: [] for name in cases}
    names = list(cases)
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            started, started_cpu = time.perf_counter(), time.process_time()
            for _ in range(counts[name]):
                result = cases[name]()
            _read(result)
            wall[name].append((time.perf_counter() - started) / counts[name] * 1000)
            process[name].append((time.process_time() - started_cpu) / counts[name] * 1000)
    return (wall, process) if cpu else wall


def _read(result):
    import tensorflow as tf

    for tensor in tf.nest.flatten(result):
        getattr(tensor, "numpy", lambda: None)()
