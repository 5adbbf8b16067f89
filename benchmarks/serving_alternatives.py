"""Serving speed and quality of one Transformer run.

Our SavedModel as `keras-attn serve` runs it and in TensorFlow's graph alone, CTranslate2
float32 and int8.

    python -m benchmarks.serving_alternatives RUN_DIR --out /tmp/serving_alternatives \
        [--rounds 3] [--threads 2]

From a run folder of `keras-attn train transformer` (e.g. a `benchmarks.multi30k`
run) it writes the SavedModel export (as the jobs export it) and the
`keras-attn export-ct2` folders (float32 and int8) under `--out`, then times
each in its own fresh process, all interleaved `--rounds` times (so a host's
drift is spread over all):

- one sentence at a time (`--sentence`, 10 words): the first call, and p50
  and p99 latency of the next `--calls` calls, greedy and beam 4;
- batches of 32 and 256 sentences of the run's test split: sentences/s,
  greedy and beam 4.

`savedmodel` runs the export as `keras-attn serve` does: after loading, its
`warm_up` compiles one text's programs at both widths (`warm-up s`), then
one sentence runs `translate_compiled` and batches `translate`.
`savedmodel-graph` runs every call through `translate`.
Every call is strings in, strings out: the SavedModel in a process that
imports only `tensorflow` and `tensorflow_text`; CTranslate2 through
`CTranslate2Translator` (our tokenizers, as `tf.function`s, around its
search). `ct2-*-core` times CTranslate2's `translate_batch` alone, on tokens.
Both get `--threads` threads for their math (TensorFlow's intra-op pool,
CTranslate2's `intra_threads`; one batch at a time). Then the whole test
split in this process: the BLEU of each (`--bleu-beam`, 4; as tokenized,
`evaluation.tokenized_bleu`, the published Multi30k scoring for the `tok/`
runs), to check int8 against float32, and the share of the SavedModel's
translations each writes, greedy and at that beam (`savedmodel`'s: one line at a
time, compiled; `--rounds 0`: only these).
`--decode-loop SECONDS`: CTranslate2 float32 translating the sentence greedily
over and over (one thread, tokenized once) for a native profiler to sample:

    perf record -e cpu-clock -F 1000 -o ct2.perf -- \
        python -m benchmarks.serving_alternatives RUN_DIR --out OUT --decode-loop 10
    perf report -i ct2.perf --no-children --sort pid --stdio   # CTranslate2's worker: the busiest

`--probe-threads`: CTranslate2's latency at 1 and 2 threads alone (on a VM
whose idle vCPU wakes slowly, OpenMP's 2 threads lose).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = (
    "savedmodel",
    "savedmodel-graph",
    "ct2-float32",
    "ct2-int8",
    "ct2-float32-core",
    "ct2-int8-core",
)
BEAMS, BATCHES = (1, 4), (32, 256)


def measure(system, folder, sentence, lines, calls, threads):
    """In a fresh process: `{metric: value}` of one system (milliseconds, sentences/s)."""
    if system.startswith("savedmodel"):
        os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the tokenizer ops)

        signatures = tf.saved_model.load(folder).signatures
        result = {}
        if system == "savedmodel":
            started = time.perf_counter()
            for beam in BEAMS:
                signatures["warm_up"](beam_width=tf.constant(beam), rows=tf.constant(1))
            result["warm-up s"] = time.perf_counter() - started

        def translate(texts, beam):
            name = (
                "translate_compiled" if system == "savedmodel" and len(texts) == 1 else "translate"
            )
            return signatures[name](text=tf.constant(texts), beam_width=tf.constant(beam))[
                "translation"
            ].numpy()
    else:
        from keras_attn.serving.ctranslate2_export import SEARCH_OPTIONS
        from keras_attn.serving.ctranslate2_translator import load_ctranslate2

        translator, result = load_ctranslate2(folder, threads=threads), {}
        if system.endswith("-core"):
            cache = {}

            def translate(texts, beam):
                key = tuple(texts)
                if key not in cache:  # tokenized once: only CTranslate2's search is timed
                    cache[key] = translator.search_inputs(texts)[0]
                return translator.translator.translate_batch(
                    cache[key],
                    beam_size=beam,
                    max_decoding_length=translator.preprocessor.max_length,
                    **SEARCH_OPTIONS,
                )
        else:

            def translate(texts, beam):
                return translator.translate(texts, beam)[0]

    for beam in BEAMS:
        started = time.perf_counter()
        translate([sentence], beam)  # warm-up
        result[f"beam{beam} batch1 first ms"] = 1000 * (time.perf_counter() - started)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            translate([sentence], beam)
            times.append(time.perf_counter() - started)
        times.sort()
        result[f"beam{beam} batch1 p50 ms"] = 1000 * times[len(times) // 2]
        result[f"beam{beam} batch1 p99 ms"] = (
            1000 * times[min(len(times) - 1, int(0.99 * len(times)))]
        )
        for size in BATCHES:
            batch = (lines * (size // len(lines) + 1))[:size]
            translate(batch, beam)
            started = time.perf_counter()
            translate(batch, beam)
            result[f"beam{beam} batch{size} sentences/s"] = size / (time.perf_counter() - started)
    return result


def folders_of(out):
    """`{system: folder}` under `--out`."""
    folders = {"savedmodel": os.path.join(out, "saved_models", "translator", "1")}
    folders["savedmodel-graph"] = folders["savedmodel"]
    for quantization in ("float32", "int8"):
        folders[f"ct2-{quantization}"] = folders[f"ct2-{quantization}-core"] = os.path.join(
            out, f"ct2-{quantization}"
        )
    return folders


def export_all(run_dir, out):
    """Writes the SavedModel and the CTranslate2 folders of `run_dir` that `--out` lacks."""
    from keras_attn import serving
    from keras_attn.jobs.translation import export_to_ctranslate2, load_run

    folders = folders_of(out)
    if not os.path.isdir(folders["savedmodel"]):
        serving.export(
            serving.Translator(load_run(run_dir)), os.path.join(out, "saved_models"), "translator"
        )
    for quantization in ("float32", "int8"):
        if not os.path.isdir(folders[f"ct2-{quantization}"]):
            export_to_ctranslate2(
                run_dir,
                folders[f"ct2-{quantization}"],
                None if quantization == "float32" else quantization,
            )


def translations(system, folder, sources, beam):
    """The test split translated by one system (in this process)."""
    from keras_attn.cli import translate_lines
    from keras_attn.serving.ctranslate2_translator import load_ctranslate2

    if system.startswith("savedmodel"):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401

        translator = tf.saved_model.load(folder)
        if system == "savedmodel":  # as served: one text at a time, compiled
            translate = translator.signatures["translate_compiled"]
            return [
                translate(text=tf.constant([line]), beam_width=tf.constant(beam))["translation"]
                .numpy()[0]
                .decode("utf-8", "replace")
                for line in sources
            ]
    else:
        translator = load_ctranslate2(folder)
    return [t for t, _ in translate_lines(translator, sources, beam)]


def quality(folders, sources, references, beam):
    """Each system's tokenized BLEU at `beam`, and the share of the SavedModel's translations each
    writes (greedy and at `beam`)."""
    from keras_attn.evaluation import tokenized_bleu

    systems = [s for s in folders if not s.endswith("-core")]
    written = {(s, b): translations(s, folders[s], sources, b) for s in systems for b in (1, beam)}
    print(
        f"\ntest split ({len(sources)} sentences), BLEU as tokenized at beam {beam}; share of the "
        "SavedModel's translations written, greedy and at that beam:"
    )
    result = {}
    for system in systems:
        same = [
            sum(a == b for a, b in zip(written[system, b], written["savedmodel", b])) / len(sources)
            for b in (1, beam)
        ]
        result[system] = {
            "bleu": tokenized_bleu(written[system, beam], references)["bleu_tokenized"],
            "same_greedy": same[0],
            f"same_beam{beam}": same[1],
        }
        print(
            f"  {system:12} BLEU {result[system]['bleu']:.2f}, same greedy {same[0]:.1%}, "
            f"same at beam {beam} {same[1]:.1%}"
        )
    return result


def probe_threads(folder, sentence, calls):
    """CTranslate2's greedy p50 on `sentence` (tokens through the
    run's tokenizer) at 1 and 2 intra threads.
    """
    from keras_attn.serving.ctranslate2_translator import load_ctranslate2

    for threads in (1, 2, 1, 2):
        translator = load_ctranslate2(folder, threads=threads)
        source = translator.preprocessor.tokenize_source([sentence])[0].numpy()[0]
        tokens = [[translator.preprocessor.source_tokenizer.vocabulary[i] for i in source if i]]
        translator.translator.translate_batch(tokens, beam_size=1)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            translator.translator.translate_batch(tokens, beam_size=1)
            times.append(time.perf_counter() - started)
        print(
            f"CTranslate2 float32, {threads} thread(s): greedy p50 "
            f"{1000 * sorted(times)[len(times) // 2]:.1f} ms",
            flush=True,
        )


def decode_loop(folder, sentence, seconds):
    """CTranslate2 float32, one thread, greedy on `sentence`
    (tokenized once) for `seconds`; prints what it did.
    """
    from keras_attn.serving.ctranslate2_export import SEARCH_OPTIONS
    from keras_attn.serving.ctranslate2_translator import load_ctranslate2

    translator = load_ctranslate2(folder, compute_type="float32", threads=1)
    (tokens,), budgets, _, _ = translator.search_inputs([sentence])
    count, steps, end = 0, 0, time.time() + seconds
    while time.time() < end:
        result = translator.translator.translate_batch(
            [tokens], beam_size=1, max_decoding_length=int(budgets[0]), **SEARCH_OPTIONS
        )
        count, steps = count + 1, steps + len(result[0].hypotheses[0]) + 1  # + [EOS]
    print(
        f"{count} translations, {steps / count:.1f} decode steps each, "
        f"{seconds / count * 1000:.2f} ms each"
    )


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--sentence", default="a man in a red shirt is riding a bike down the street ."
    )
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--bleu-beam", type=int, default=4)
    parser.add_argument("--child", nargs=2, metavar=("SYSTEM", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--export-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--decode-loop",
        type=float,
        metavar="SECONDS",
        help=(
            "only CTranslate2 float32 translating the sentence over and over for SECONDS (for perf)"
        ),
    )
    parser.add_argument(
        "--probe-threads",
        action="store_true",
        help="only CTranslate2 float32's greedy p50 of the sentence at 1 and 2 threads (its folder "
        "under --out), alternated twice",
    )
    args = parser.parse_args()
    with open(os.path.join(args.run_dir, "test.src"), encoding="utf-8") as f:
        sources = f.read().splitlines()
    if args.child:
        print(
            json.dumps(measure(*args.child, args.sentence, sources[:256], args.calls, args.threads))
        )
        return
    if args.export_only:
        return export_all(args.run_dir, args.out)
    if args.probe_threads:
        return probe_threads(folders_of(args.out)["ct2-float32"], args.sentence, args.calls)
    if args.decode_loop:
        if not os.path.isdir(folders_of(args.out)["ct2-float32"]):
            sys.exit(
                f"{args.out}: no CTranslate2 export yet (run the benchmark once with --rounds 0)"
            )
        return decode_loop(folders_of(args.out)["ct2-float32"], args.sentence, args.decode_loop)
    # In a process of its own: TensorFlow's threads, once started,
    # would share the cores with the timed ones.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.serving_alternatives",
            args.run_dir,
            "--out",
            args.out,
            "--export-only",
        ],
        check=True,
    )
    folders = folders_of(args.out)
    with open(os.path.join(args.run_dir, "test.ref"), encoding="utf-8") as f:
        references = f.read().splitlines()
    runs = {system: [] for system in args.systems}
    for round_ in range(args.rounds):
        order = args.systems if round_ % 2 == 0 else args.systems[::-1]
        for system in order:
            child = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.serving_alternatives",
                    args.run_dir,
                    "--out",
                    args.out,
                    "--child",
                    system,
                    folders[system],
                    "--calls",
                    str(args.calls),
                    "--threads",
                    str(args.threads),
                    "--sentence",
                    args.sentence,
                ],
                capture_output=True,
                text=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
            )
            if child.returncode:
                sys.exit(f"{system}: {child.stderr[-2000:]}")
            runs[system].append(json.loads(child.stdout.splitlines()[-1]))
            print(f"round {round_ + 1} {system}: {runs[system][-1]}", flush=True)
    if args.rounds:
        print(
            f"\nsentence ({len(args.sentence.split())} tokens): {args.sentence}; {args.threads} "
            f"threads; medians of {args.rounds} rounds (min-max)"
        )
        print(f"{'metric':28}" + "".join(f"{s:>24}" for s in args.systems))
        metrics = dict.fromkeys(metric for system in args.systems for metric in runs[system][0])
        for metric in metrics:  # ("warm-up s": the SavedModel as served only)
            cells = []
            for system in args.systems:
                values = [run[metric] for run in runs[system] if metric in run]
                cells.append(
                    f"{statistics.median(values):9.1f} ({min(values):.1f}-{max(values):.1f})"
                    if values
                    else ""
                )
            print(f"{metric:28}" + "".join(f"{c:>24}" for c in cells))
    scores = quality({s: folders[s] for s in args.systems}, sources, references, args.bleu_beam)
    print(json.dumps({"runs": runs, "quality": scores}))


if __name__ == "__main__":
    main()
