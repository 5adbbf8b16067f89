"""Helpers of the streaming tests: a generated corpus written as
shards, and the memory a drain adds.
"""

import os
import threading
import time


def write_shards(folder, corpus, shards):
    """`corpus`'s (`synthetic.translation_corpus`) training pairs as `shards` TSV files
    `folder/shards/train-N.tsv`, its validation pairs as `folder/valid.src` and `valid.tgt`; returns
    them as the job's data settings."""
    (folder / "shards").mkdir()
    for shard in range(shards):
        pairs = zip(corpus["train"].sources[shard::shards], corpus["train"].targets[shard::shards])
        (folder / "shards" / f"train-{shard}.tsv").write_text(
            "".join(f"{s}\t{t}\n" for s, t in pairs)
        )
    for side, lines in (("src", corpus["valid"].sources), ("tgt", corpus["valid"].targets)):
        (folder / f"valid.{side}").write_text("".join(line + "\n" for line in lines))
    return dict(
        data=str(folder / "shards"),
        valid_src=str(folder / "valid.src"),
        valid_tgt=str(folder / "valid.tgt"),
    )


def peak_growth_mb(drain):
    """The most the process's resident memory rose above its level
    before while `drain()` ran (every 5 ms).
    """
    before, peak, done = _resident_mb(), [0.0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _resident_mb())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        drain()
    finally:
        done.set()
        sampler.join()
    return peak[0] - before


def _resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
