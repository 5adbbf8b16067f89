"""Timing helper of the benchmarks: several cases timed in turn in one process."""

import time


def alternate(cases, repeats=3, calls=15):
    """Milliseconds per call of each case, the cases interleaved `repeats` times.

    Interleaving spreads a machine's drift (a shared host slowing down)
    over every case instead of charging it to one.

    Args:
        cases: `{name: function}`; each call of `function()` runs one step
            and returns its tensors (a tensor, or a nest of them), which are
            read back after the last call so that queued work is counted.
        repeats: rounds over all the cases.
        calls: calls per case and round.

    Returns:
        `{name: [ms per call in each round]}`.

    Example:

    >>> times = alternate({"fused": fused_step, "explicit": explicit_step})
    >>> {name: sorted(values)[1] for name, values in times.items()}  # medians of 3
    """
    import tensorflow as tf

    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, function in cases.items():
            started = time.perf_counter()
            for _ in range(calls):
                result = function()
            for tensor in tf.nest.flatten(result):
                getattr(tensor, "numpy", lambda: None)()
            times[name].append((time.perf_counter() - started) / calls * 1000)
    return times
