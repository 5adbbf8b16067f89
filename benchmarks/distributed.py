"""Training steps/s on 1 vs 2 replicas: one device, MirroredStrategy, two workers.

Run from the repository root:

    python -m benchmarks.distributed            # about 4 minutes
    python -m benchmarks.distributed --quick    # fewer steps

The Transformer job's model (preset "small", vocabularies of 4,000 pieces)
trains on the built-in corpus through `keras_attn.training.runner.train`
at a global batch of 64 pairs, in float32:

- fit, one device: Keras's `model.fit` on the same model and data, the
  reference for the runner's own loop;
- runner, one device;
- runner, MirroredStrategy over 2 logical CPU devices (this process splits
  the CPU in two before TensorFlow starts), 32 pairs per replica;
- runner, two worker processes (MultiWorkerMirroredStrategy over gRPC on
  127.0.0.1), 32 pairs per replica, started after the in-process runs.

The steps after the first `--warmup` (tracing, first pass of the data
pipeline) are timed; steps/s is reported with the ratio to one device.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _parse():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=6400)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.pairs = 3200
    return args


def _timed_run(args, strategy, batch_size, devices=None, use_fit=False):
    """Steps/s of one training epoch after `args.warmup` steps."""
    import keras

    from keras_attn.config import RunConfig
    from keras_attn.losses import MaskedSparseCrossEntropy
    from keras_attn.metrics import MaskedTokenAccuracy
    from keras_attn.models import TransformerBackbone
    from keras_attn.training.runner import prepare, train
    from pipelines import synthetic, tokenizers
    from pipelines.translation import translation_epochs

    config = RunConfig(
        run_dir=tempfile.mkdtemp(),
        epochs=1,
        batch_size=batch_size,
        strategy=strategy,
        devices=devices,
        verbose=0,
    )
    prepare(config)
    corpus = synthetic.translation_corpus(seed=0, train_size=args.pairs, valid_size=0, test_size=0)[
        "train"
    ]
    vocab = tokenizers.learn_wordpiece_vocabulary(corpus.sources + corpus.targets, 4000)
    tokenizer = tokenizers.WordPieceTokenizer(vocab)

    times = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    def data(global_batch):
        return translation_epochs(
            corpus.sources,
            corpus.targets,
            tokenizer,
            tokenizer,
            batch_size=global_batch,
            max_length=64,
            seed=0,
        )

    def build():
        return TransformerBackbone(
            len(vocab), len(vocab), max_sequence_length=64, preset="small", dropout=0.1
        )

    def compile_model(model, total_steps=None):
        model.compile(
            keras.optimizers.Adam(1e-4),
            MaskedSparseCrossEntropy(0.1),
            metrics=[MaskedTokenAccuracy()],
        )

    if use_fit:
        model = build()
        compile_model(model)
        model.fit(data(batch_size)(0), epochs=1, verbose=0, callbacks=[Clock()])
    else:
        train(
            config,
            build_model=build,
            make_datasets=lambda global_batch: (data(global_batch), None),
            compile_model=compile_model,
            callbacks=[Clock()],
        )
    timed = times[args.warmup :]
    return (len(timed) - 1) / (timed[-1] - timed[0])


def _two_workers(args):
    from keras_attn.training.strategy import local_cluster

    processes = []
    for index, tf_config in enumerate(local_cluster(2)):
        env = dict(os.environ, TF_CONFIG=tf_config)
        out = f"/tmp/keras_attn_distributed_{os.getpid()}_{index}.json"
        command = [
            sys.executable,
            "-m",
            "benchmarks.distributed",
            "--worker",
            str(index),
            "--out",
            out,
            "--pairs",
            str(args.pairs),
            "--warmup",
            str(args.warmup),
        ]
        processes.append(
            (subprocess.Popen(command, env=env, cwd=Path(__file__).resolve().parent.parent), out)
        )
    rates = []
    for process, out in processes:
        if process.wait(timeout=1800) != 0:
            sys.exit("a worker failed")
        with open(out) as f:
            rates.append(json.load(f)["steps_per_second"])
        os.remove(out)
    return rates[0]


def main():
    args = _parse()
    if args.worker is not None:
        rate = _timed_run(args, "multi_worker", 32)
        with open(args.out, "w") as f:
            json.dump({"steps_per_second": rate}, f)
        return

    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    results = {
        "fit, one device": _timed_run(args, "one_device", 64, use_fit=True),
        "runner, one device": _timed_run(args, "one_device", 64),
        "runner, mirrored 2 logical CPUs": _timed_run(
            args, "mirrored", 32, devices=["/cpu:0", "/cpu:1"]
        ),
    }
    results["runner, two workers (2 processes)"] = _two_workers(args)
    base = results["runner, one device"]
    print("\n| global batch 64, preset small, float32 | steps/s | vs one device |\n|---|---|---|")
    for name, rate in results.items():
        print(f"| {name} | {rate:.2f} | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
