"""DynamicBatcher's scheduling, with a stand-in model whose calls we hold and release."""

import asyncio
import concurrent.futures
import threading

import numpy as np

from keras_attn.serving.batching import DynamicBatcher


def test_while_the_model_is_busy_waiting_calls_fill_one_batch():
    release, sizes = threading.Event(), []

    def run(key, inputs):
        sizes.append(len(inputs["x"]))
        release.wait(10)
        return {"twice": inputs["x"] * 2}

    batcher = DynamicBatcher(
        run, concurrent.futures.ThreadPoolExecutor(1), max_batch_size=4, timeout_ms=1
    )

    async def callers():
        first = asyncio.ensure_future(batcher("key", {"x": np.array([0])}, 1))
        later = []
        for x in range(1, 7):  # each waits out its timeout while the first call holds the model
            await asyncio.sleep(0.02)
            later.append(asyncio.ensure_future(batcher("key", {"x": np.array([x])}, 1)))
        release.set()
        return await asyncio.gather(first, *later)

    answers = asyncio.run(callers())
    assert [answer["twice"].tolist() for answer in answers] == [[2 * x] for x in range(7)]
    # the six waiting calls in batches of at most max_batch_size, oldest first
    assert sizes == [
        1,
        4,
        2,
    ]


def test_a_caller_that_has_gone_is_left_out_of_its_batch():
    release, seen = threading.Event(), []

    def run(key, inputs):
        seen.append(inputs["x"].tolist())
        release.wait(10)
        return {"same": inputs["x"]}

    batcher = DynamicBatcher(
        run, concurrent.futures.ThreadPoolExecutor(1), max_batch_size=8, timeout_ms=1
    )

    async def callers():
        first = asyncio.ensure_future(batcher("key", {"x": np.array([0])}, 1))
        await asyncio.sleep(0.02)
        gone = asyncio.ensure_future(batcher("key", {"x": np.array([1])}, 1))
        stays = asyncio.ensure_future(batcher("key", {"x": np.array([2])}, 1))
        await asyncio.sleep(0.02)
        gone.cancel()
        release.set()
        return await asyncio.gather(first, stays)

    answers = asyncio.run(callers())
    assert [answer["same"].tolist() for answer in answers] == [[0], [2]]
    assert seen == [[0], [2]]
