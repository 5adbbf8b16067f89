"""Training-step time of one checkout of the code, for before/after comparisons.

    git worktree add /tmp/before d5a0b9a
    for repo in /tmp/before . /tmp/before . ; do
        (cd $repo && python -m benchmarks.step_time bahdanau,128,0,float32 bahdanau,128,0,mixed_bfloat16)
    done

Imports `keras_attn` from the checkout it runs in, builds each case
`MODEL,BATCH,JIT,PRECISION` (MODEL: a Seq2Seq attention, `bahdanau`, `luong`
or `none`, with preset "small", `-bi` appended for a bidirectional encoder, or
`transformer`, preset "small"; JIT 1 or 0)
on random ids (8,000-token vocabularies, source and target 24 tokens), runs two
warm-up `train_on_batch` steps and prints the mean wall and process-CPU time of
15 more. Alternate the checkouts in one shell, as above: the machine's speed
moves between runs. Both checkouts need this form of the script (`benchmarks/`
a package, the backbone classes): d5a0b9a or later. Older checkouts have an
older step_time.py, which takes the checkout as its first argument (the
RESULTS rows measured before d5a0b9a ran that one).
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.models import Seq2SeqBackbone, TransformerBackbone  # noqa: E402
from keras_attn.training import MaskedSparseCrossEntropy  # noqa: E402

VOCAB, LENGTH, STEPS = 8000, 24, 15


def step_time(model_name, batch, jit, precision):
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    if model_name == "transformer":
        model = TransformerBackbone(VOCAB, VOCAB, max_sequence_length=64, preset="small", dropout=0.1)
    else:
        attention, _, bidirectional = model_name.partition("-")
        model = Seq2SeqBackbone(VOCAB, VOCAB, preset="small", attention=attention, bidirectional=bidirectional == "bi",
                        dropout=0.1)
    model.compile(optimizer="adam", loss=MaskedSparseCrossEntropy(0.1), jit_compile=jit)
    rng = np.random.default_rng(0)
    inputs = {side: rng.integers(4, VOCAB, (batch, LENGTH)).astype("int32") for side in ("source", "target_in")}
    targets = rng.integers(4, VOCAB, (batch, LENGTH)).astype("int32")
    for _ in range(2):
        model.train_on_batch(inputs, targets)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(STEPS):
        model.train_on_batch(inputs, targets)
    wall, cpu = (time.perf_counter() - wall) / STEPS, (time.process_time() - cpu) / STEPS
    keras.mixed_precision.set_global_policy("float32")
    return wall, cpu


def main():
    for case in sys.argv[1:]:
        model_name, batch, jit, precision = case.split(",")
        wall, cpu = step_time(model_name, int(batch), jit == "1", precision)
        print(f"{model_name:11} batch {batch:>4} xla {jit} {precision:15} {wall * 1000:7.0f} ms/step "
              f"{cpu * 1000:7.0f} cpu-ms/step", flush=True)


if __name__ == "__main__":
    main()
