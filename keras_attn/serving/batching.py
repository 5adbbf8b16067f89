"""Server-side dynamic batching, as TensorFlow Serving's `--enable_batching` does it.

Concurrent calls with the same key (the server's: model, version,
signature, the values of its scalar inputs and a length bucket) are queued
together. A key's queue is due when it holds `max_batch_size` rows or its
oldest call has waited `timeout_ms`; a due queue runs as soon as one of the
`workers` model threads is free, taking up to `max_batch_size` rows. While
every worker is busy, due queues keep filling, so under load the batches
grow to what the model can take (TensorFlow Serving's batch threads take
batches the same way). The rows of a batch are concatenated, the model runs
once, and each caller gets back exactly its own rows. A call larger than
`max_batch_size` by itself runs alone. A caller that has gone (its task
cancelled) before its batch runs is left out of it.
"""

import asyncio

import numpy as np


class DynamicBatcher:
    """Merges concurrent calls of `run` with the same key into one call.

    Args:
        run: callable. `(key, inputs) -> outputs`, blocking, run in `executor`;
            `inputs` and `outputs` are `{name: np.ndarray}` whose arrays
            of rank 1 or more have the batch as their first axis (arrays of rank 0 are taken
            from the batch's first call).
        executor: `concurrent.futures.Executor`. Where `run` runs.
        max_batch_size: int. The most rows of one call of `run` (a larger call runs alone).
            Defaults to 32.
        timeout_ms: float. How long, in milliseconds, the first call of a batch waits for
            others when a worker is free. Defaults to 5.0.
        workers: int. The calls of `run` that may be in flight at once. Defaults to 1.

    Example:

        >>> import concurrent.futures
        >>> def run(key, inputs):
        ...     return {"twice": inputs["x"] * 2}
        >>> pool = concurrent.futures.ThreadPoolExecutor(1)
        >>> batcher = DynamicBatcher(run, pool, max_batch_size=8, timeout_ms=5)
        >>> async def two_callers():
        ...     calls = (batcher("key", {"x": np.array(x)}, len(x)) for x in ([1, 2], [3]))
        ...     return await asyncio.gather(*calls)
        >>> [out["twice"].tolist() for out in asyncio.run(two_callers())]
        [[2, 4], [6]]
        >>> batcher.calls
        1
    """

    def __init__(self, run, executor, max_batch_size=32, timeout_ms=5.0, workers=1):
        self.run = run
        self.executor = executor
        self.max_batch_size = max_batch_size
        self.timeout = timeout_ms / 1000
        self.calls = 0  # calls of `run` so far
        self._free = workers
        self._queues = {}  # key -> [(inputs, rows, future)], oldest first
        # The keys ready to run, in the order they became due (a dict as an ordered set).
        self._due = {}
        self._timers = {}

    async def __call__(self, key, inputs, rows):
        """`run(key, inputs)` with others' rows beside these `rows`; this call's outputs.

        Args:
            key: hashable. What a call may be batched by: only calls of equal keys merge, and
                `run` gets it.
            inputs: dict. `{name: np.ndarray}`, the batch along the first axis of the arrays of
                rank 1 or more.
            rows: int. The rows of this call (the first axis of its arrays).

        Returns:
            A dict: `{name: np.ndarray}`, `run`'s outputs for this call's rows.

        Raises:
            Exception: what `run` raised for the batch, to every call of it.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queue = self._queues.setdefault(key, [])
        queue.append((inputs, rows, future))
        if sum(r for _, r, _ in queue) >= self.max_batch_size:
            self._make_due(key)
        elif key not in self._due and key not in self._timers:
            self._timers[key] = loop.call_later(self.timeout, self._make_due, key)
        return await future

    def _make_due(self, key):
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._due[key] = None
        self._dispatch()

    def _dispatch(self):
        """Starts due batches while a worker is free."""
        while self._free and self._due:
            key = next(iter(self._due))
            del self._due[key]
            callers = [item for item in self._queues.pop(key, []) if not item[2].done()]
            batch, rows = [], 0
            while callers and (not batch or rows + callers[0][1] <= self.max_batch_size):
                rows += callers[0][1]
                batch.append(callers.pop(0))
            if callers:  # the rest has waited too: the next batch of this key, due now
                self._queues[key] = callers
                self._due[key] = None
            if batch:
                self._free -= 1
                asyncio.get_running_loop().create_task(self._run_batch(key, batch))

    async def _run_batch(self, key, callers):
        first = callers[0][0]
        merged = {
            name: np.concatenate([inputs[name] for inputs, _, _ in callers])
            if np.ndim(value)
            else value
            for name, value in first.items()
        }
        self.calls += 1
        try:
            outputs = await asyncio.get_running_loop().run_in_executor(
                self.executor, self.run, key, merged
            )
        except Exception as error:  # noqa: BLE001  (every caller of the batch gets the model's error)
            for _, _, future in callers:
                if not future.done():
                    future.set_exception(error)
            return
        finally:
            self._free += 1
            self._dispatch()
        start = 0
        for _, rows, future in callers:
            if not future.done():
                future.set_result(
                    {name: value[start : start + rows] for name, value in outputs.items()}
                )
            start += rows
