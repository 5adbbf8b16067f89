"""Serving latency and throughput of an export, in a fresh TensorFlow-only process.

    python -m benchmarks.serving saved_models/transformer/1 [--repeats 50]

The export is loaded with only `tensorflow` and `tensorflow_text` imported
(as a server would), warmed up once per batch shape, then timed:
- one 10-word sentence, greedy and beam 4: p50 and p99 latency over
  `--repeats` calls;
- batches of 32 and 256 sentences (the test split beside the export when it
  has one, else copies of the sentence), greedy and beam 4: sentences/s.
The signatures are the export's concrete functions: fixed shapes and
dtypes, so they never trace again after loading (nothing to warm up but
TensorFlow's own kernels).
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

model_dir, repeats, sentence = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = json.loads(sys.argv[4])
translate = tf.saved_model.load(model_dir).signatures["translate"]

def call(texts, beam):
    out = translate(text=tf.constant(texts), beam_width=tf.constant(beam))
    return out["translation"].numpy()

result = {"modules": sorted({m.split(".")[0] for m in sys.modules} & {"keras_attn", "keras_hub", "keras_nlp"})}
for beam in (1, 4):
    call([sentence], beam)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); call([sentence], beam); times.append(time.perf_counter() - start)
    result[f"beam{beam}_p50_ms"] = 1000 * float(np.percentile(times, 50))
    result[f"beam{beam}_p99_ms"] = 1000 * float(np.percentile(times, 99))
    for size in (32, 256):
        batch = (lines * (size // max(len(lines), 1) + 1))[:size]
        call(batch, beam)
        start = time.perf_counter(); call(batch, beam); call(batch, beam)
        result[f"beam{beam}_batch{size}_sentences_per_s"] = 2 * size / (time.perf_counter() - start)
print(json.dumps(result))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--sentence", default="Ein Mann mit einem roten Hut fährt auf der Straße.")
    args = parser.parse_args()
    lines = [args.sentence]
    metadata = os.path.join(args.model_dir, "assets.extra", "keras_attn.json")
    if os.path.exists(metadata):
        with open(metadata) as f:
            test_src = json.load(f).get("test_src")
        if test_src and os.path.exists(test_src):
            with open(test_src, encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f][:256]
    result = subprocess.run(
        [sys.executable, "-c", CHILD, args.model_dir, str(args.repeats), args.sentence, json.dumps(lines)],
        capture_output=True, text=True, timeout=3600,
    )
    if result.returncode != 0:
        sys.exit(result.stderr[-2000:])
    numbers = json.loads(result.stdout.splitlines()[-1])
    modules = numbers.pop("modules")
    # (`keras` itself is always there: `import tensorflow` imports it.)
    print(f"fresh process; keras_attn, keras_hub or keras_nlp loaded: {', '.join(modules) or 'none'}")
    print(f"sentence ({len(args.sentence.split())} words): {args.sentence}")
    for name, value in numbers.items():
        print(f"{name:32} {value:10.1f}")


if __name__ == "__main__":
    main()
