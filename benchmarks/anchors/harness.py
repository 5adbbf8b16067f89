"""What the PyTorch anchors share: the job's batches written once, our step timed apart, A/B/A/B.

    python -m benchmarks.anchors.harness --write --model transformer  # the anchors do it if missing
    python -m benchmarks.anchors.harness --run mixed_bfloat16 --model transformer  # one of ours

Both frameworks train on the same batches: the translation job's (`keras_attn.jobs.translation`) on
Multi30k en→de, the Moses-tokenized lowercased text of ../shared/data/multi30k/tok with one
10,000-piece SentencePiece BPE vocabulary for both languages, as

    python -m benchmarks.multi30k --direction en-de --tokenized --subword bpe --shared-vocab \
        --vocab-size 10000

trains on them, at preset "small" in batches of the job's 64 pairs. The first `BATCHES`
batches of the job's epoch 0 are written once to an .npz (in `--cache`, default
/tmp/keras_attn_anchors, with the run folder that holds the vocabulary), with what the other
framework needs to build the same model and optimizer: each backbone layer's `get_config`,
the loss's and the optimizer's, and the learning rate of each of those steps under the job's
schedule. Our side trains as the job does: the runner's `TrainingSteps` (loss, metrics,
`FusedAdam`) on the task of `jobs.translation.build_task`, compiled by `compile_task`.

Each framework is timed in a process of its own, which imports only its own framework (TensorFlow
alone takes about 700 MB of RSS), with the same number of intra-op threads. TensorFlow keeps its
default inter-op threads, one a core, as the jobs do (`--inter-op`): its graph executor runs
independent ops side by side, which PyTorch's eager mode, issuing its ops one at a time, cannot;
`--inter-op 1` runs ours one op at a time too. The processes alternate A/B/A/B (every other round in
reverse order), so only ratios of interleaved repeats count; each reports its target tokens/s
(padding excluded), its process CPU time over wall time (the cores it kept busy) and its RSS: once
built (framework, model and optimizer), after the steps, and at its peak.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

# pipelines/special_tokens.py imports nothing: a PyTorch process must not hold TensorFlow.
from pipelines.special_tokens import PAD_ID

CACHE = os.path.join(tempfile.gettempdir(), "keras_attn_anchors")
BATCHES = 48  # the first batches of the job's epoch 0: warm-up and timed steps
THREADS = 2
INTER_OP = 0  # TensorFlow's inter-op threads: 0, its default (one a core), which the jobs keep
OURS = "keras"  # our variants are "keras:float32" and "keras:mixed_bfloat16"


def cache_file(family, cache=CACHE):
    return os.path.join(cache, f"multi30k-en-de-{family}.npz")


def job_config(family, cache=CACHE, **settings):
    """The job's config for Multi30k en→de
    (`benchmarks.multi30k.job_config`) as the anchors train it.
    """
    from benchmarks import multi30k

    settings = {"dropout": 0.1, "run_dir": os.path.join(cache, family), **settings}
    return multi30k.job_config(
        "en-de",
        argparse.Namespace(model=family),
        tokenized=True,
        subword="bpe",
        shared_vocab=True,
        vocabulary_size=10000,
        preset="small",
        **settings,
    )


def write(family, cache=CACHE):
    """Writes the first `BATCHES` batches of the job's epoch 0 and
    what builds the same model elsewhere.
    """
    from keras_attn.jobs import translation
    from keras_attn.training.runner import prepare
    from pipelines import translation as pipeline

    config = job_config(family, cache)
    train = translation.load_corpora(config)["train"]
    os.makedirs(config.run_dir, exist_ok=True)
    tokenizers = translation.build_tokenizers(config, train)
    # As the job's `make_datasets` on one replica.
    epochs = pipeline.translation_epochs(
        train.sources,
        train.targets,
        *tokenizers,
        batch_size=config.batch_size,
        max_length=config.max_sequence_length,
        seed=config.seed,
    )
    batches = [
        {
            "source": inputs["source"].numpy(),
            "target_in": inputs["target_in"].numpy(),
            "target_out": targets.numpy(),
        }
        for inputs, targets in epochs(0).take(BATCHES)
    ]
    total_steps = len(epochs(0)) * config.epochs  # the runner's (without --max-updates)
    with prepare(config).scope():
        task = build_task(config)
        translation.compile_task(task, config, total_steps)
    optimizer, rates = task.optimizer, []
    for step in range(BATCHES):  # the schedule's rate at each step, read as Keras reads it
        optimizer.iterations.assign(step)
        rates.append(float(optimizer.learning_rate))
    spec = dict(
        backbone=task.backbone.get_config(),
        layers={layer.name: layer.get_config() for layer in task.backbone.layers},
        loss=task.loss.get_config(),
        optimizer=optimizer.get_config(),
        rates=rates,
        total_steps=total_steps,
        steps_per_epoch=len(epochs(0)),
    )
    arrays = {
        f"{key}_{i}": value for i, batch in enumerate(batches) for key, value in batch.items()
    }
    np.savez(cache_file(family, cache), spec=json.dumps(spec, default=str), **arrays)


def load(family, cache=CACHE):
    """`(batches, spec)`: the batches as dicts of int32 arrays and
    what `write` recorded; written first if missing.
    """
    path = cache_file(family, cache)
    if not os.path.exists(path):  # in a process of its own: the caller may be a PyTorch process
        subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.anchors.harness",
                "--write",
                "--model",
                family,
                "--cache",
                cache,
            ],
            check=True,
        )
    with np.load(path) as arrays:
        spec = json.loads(str(arrays["spec"]))
        keys = ("source", "target_in", "target_out")
        batches = [{key: arrays[f"{key}_{i}"] for key in keys} for i in range(len(spec["rates"]))]
    return batches, spec


def build_task(config):
    """The job's `Seq2SeqLM` for `config`
    (`jobs.translation.build_task`), with its run folder's vocabulary.
    """
    from keras_attn.jobs import translation
    from pipelines.preprocessors import TranslationPreprocessor

    tokenizers = translation.build_tokenizers(config, train=None, chief=False, wait_seconds=0)
    return translation.build_task(
        config, TranslationPreprocessor(*tokenizers, config.max_sequence_length), config.dropout
    )


def job_steps(config, spec, batches):
    """The job's compiled task and the runner's `TrainingSteps` on it,
    as `runner.train` builds them.
    """
    from keras_attn.jobs import translation
    from keras_attn.training.runner import prepare
    from keras_attn.training.steps import TrainingSteps, build_metrics

    strategy = prepare(config)
    with strategy.scope():
        task = build_task(config)
        translation.compile_task(task, config, spec["total_steps"])
        task.optimizer.build(task.trainable_variables)
        build_metrics(task, as_keras_batch(batches[0]))
        return TrainingSteps(task, strategy)


def as_keras_batch(batch):
    return {"source": batch["source"], "target_in": batch["target_in"]}, batch["target_out"]


def held(batches):
    """The batches as the job's dataset gives them (`(None, None)` shapes: one trace for all)."""
    import tensorflow as tf

    ids = tf.TensorSpec((None, None), tf.int32)
    return tf.data.Dataset.from_generator(
        lambda: map(as_keras_batch, batches),
        output_signature=({"source": ids, "target_in": ids}, ids),
    ).prefetch(2)


def measure(train_step, batches, warmup, steps, warm_pass=False):
    """Tokens/s of `train_step(i)` over batches `warmup ... warmup +
    steps - 1` (target tokens, padding excluded).

    `train_step(i)` trains on batch `i` and returns a value `float` reads once
    the step is done. With `warm_pass`, those batches are trained on once
    more, untimed, first: every batch shape's compilation (XLA's in our loss,
    `torch.compile`'s recompiles) is then out of the timing, as in a long run.
    """
    if warmup + steps > len(batches):
        raise SystemExit(
            f"--warmup {warmup} + --steps {steps}: only {len(batches)} batches are written"
        )
    built_rss_mb = resident_mb()  # the framework imported, the model and its optimizer built
    for i in [*range(warmup), *(range(warmup, warmup + steps) if warm_pass else [])]:
        float(train_step(i))
    started, started_cpu = time.perf_counter(), time.process_time()
    for i in range(warmup, warmup + steps):
        last = train_step(i)
    float(last)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
    tokens = sum(
        int(np.count_nonzero(batch["target_out"] != PAD_ID))
        for batch in batches[warmup : warmup + steps]
    )
    return dict(
        tokens_per_second=tokens / seconds,
        step_ms=seconds / steps * 1000,
        cores=cpu_seconds / seconds,
        built_rss_mb=built_rss_mb,
        end_rss_mb=resident_mb(),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def resident_mb():
    """This process's resident memory now (VmRSS), in MB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def time_ours(
    family,
    precision,
    threads=THREADS,
    warmup=5,
    steps=30,
    cache=CACHE,
    inter_op=INTER_OP,
    warm_pass=False,
):
    """Our training tokens/s on the written batches (`measure`), the job's step in `precision`.

    `threads` intra-op threads and `inter_op` threads that run independent ops side by side (0:
    TensorFlow's default, one a core; 1: one op at a time, as PyTorch's eager mode issues them).
    """
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    batches, spec = load(family, cache)
    train = job_steps(
        job_config(family, cache, mixed_precision=precision == "mixed_bfloat16"), spec, batches
    )
    timed = batches[warmup : warmup + steps]
    # in `measure`'s order
    iterator = iter(held(batches[:warmup] + (timed if warm_pass else []) + timed))
    return measure(lambda i: train.train(iterator)["loss"], batches, warmup, steps, warm_pass)


# ----------------------------------------------------------------------
# Processes in turn, and their table.


def alternate_processes(commands, rounds, log=print):
    """Runs each command once a round, in turn (every other round in reverse order).

    Each command prints one JSON object (`measure`'s) as its last line of output.

    Returns:
        `{name: [that object, with the 1-minute load average at its start, per round]}`;
        a failed process gives `{"error": its last line of errors}`.
    """
    results = {name: [] for name in commands}
    names = list(commands)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            load_average = os.getloadavg()[0]
            process = subprocess.run(commands[name], capture_output=True, text=True)
            if process.returncode:
                errors = [line for line in process.stderr.splitlines() if line.strip()]
                result = {"error": errors[-1] if errors else f"exit status {process.returncode}"}
            else:
                result = json.loads(process.stdout.strip().splitlines()[-1])
            result["load"] = load_average
            results[name].append(result)
            shown = result.get("error") or (
                f"{result['tokens_per_second']:.0f} tokens/s, {result['step_ms']:.0f} "
                f"ms/step, {result['cores']:.2f} cores busy"
            )
            log(f"round {round_ + 1}: {name:24} {shown} (load {load_average:.2f})", flush=True)
    return results


def ours_for(variant):
    """The variant of ours that `variant` (`"torch:bfloat16"`,
    `"torch.compile:float32"`) is compared with.
    """
    return f"{OURS}:{'mixed_bfloat16' if variant.endswith('bfloat16') else 'float32'}"


def table(results):
    """A Markdown table of `alternate_processes`'s results: medians,
    spreads, and ours over each PyTorch variant.
    """
    rows = [
        "| variant | tokens/s, median (min-max) | ms/step | cores busy | RSS built / after the "
        "steps / peak | ours / it: median ratio (per round) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rates = {name: [r.get("tokens_per_second") for r in runs] for name, runs in results.items()}
    for name, runs in results.items():
        good = [rate for rate in rates[name] if rate is not None]
        if not good:
            rows.append(f"| {name} | failed: {runs[0]['error']} | | | | |")
            continue
        median = statistics.median(good)
        step = statistics.median(r["step_ms"] for r in runs if "step_ms" in r)
        cores = statistics.median(r["cores"] for r in runs if "cores" in r)
        rss = " / ".join(
            f"{max(r[key] for r in runs if key in r):,.0f}"
            for key in ("built_rss_mb", "end_rss_mb", "peak_rss_mb")
        )
        ratio = ""
        ours = [rate for rate in rates.get(ours_for(name), []) if rate is not None]
        if not name.startswith(OURS + ":") and ours:
            rounds = [
                a / b
                for a, b in zip(rates[ours_for(name)], rates[name])
                if a is not None and b is not None
            ]
            ratio = (
                f"{statistics.median(ours) / median:.2f}x ({', '.join(f'{r:.2f}' for r in rounds)})"
            )
        rows.append(
            f"| {name} | {median:.0f} ({min(good):.0f}-{max(good):.0f}) | {step:.0f} | "
            f"{cores:.2f} | {rss} MB | {ratio} |"
        )
    return "\n".join(rows)


def describe_machine(threads):
    """The CPU (`benchmarks.measures.describe_cpu`), the load average
    and the frameworks' versions, in one line.
    """
    from importlib.metadata import version

    from benchmarks.measures import describe_cpu

    loads = " ".join(f"{load:.2f}" for load in os.getloadavg())
    versions = ", ".join(f"{name} {version(name)}" for name in ("tensorflow", "keras", "torch"))
    return f"{describe_cpu()}; load average {loads}; {threads} intra-op threads each; {versions}"


def ours_command(family, precision, args):
    return [
        sys.executable,
        "-m",
        "benchmarks.anchors.harness",
        "--run",
        precision,
        "--model",
        family,
        *process_flags(args),
    ]


def process_flags(args):
    """The flags a timing process takes from the driver's."""
    return [
        "--threads",
        str(args.threads),
        "--warmup",
        str(args.warmup),
        "--steps",
        str(args.steps),
        "--cache",
        args.cache,
        "--inter-op",
        str(args.inter_op),
        *(["--warm-pass"] if args.warm_pass else []),
    ]


def add_timing_flags(parser):
    parser.add_argument(
        "--threads", type=int, default=THREADS, help="intra-op threads of both frameworks"
    )
    parser.add_argument(
        "--warmup", type=int, default=5, help="untimed steps first (traces, compilations)"
    )
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument(
        "--cache", default=CACHE, help="where the batches and the vocabulary are kept"
    )
    parser.add_argument(
        "--warm-pass",
        action="store_true",
        help="train on the timed batches once, untimed, first (per-shape compilations out)",
    )
    parser.add_argument(
        "--inter-op",
        type=int,
        default=INTER_OP,
        help=(
            "our side: TensorFlow's inter-op threads (0: its default, one a core, as the jobs run)"
        ),
    )


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=["transformer", "seq2seq"], default="transformer")
    parser.add_argument("--write", action="store_true", help="write the batches")
    parser.add_argument(
        "--run", choices=["float32", "mixed_bfloat16"], help="time our step in this precision"
    )
    add_timing_flags(parser)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.write:
        write(args.model, args.cache)
    if args.run:
        print(
            json.dumps(
                time_ours(
                    args.model,
                    args.run,
                    args.threads,
                    args.warmup,
                    args.steps,
                    args.cache,
                    args.inter_op,
                    args.warm_pass,
                )
            )
        )


if __name__ == "__main__":
    main()
