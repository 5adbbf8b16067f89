"""The `keras-attn` command line.

    keras-attn train transformer [--src F --tgt F | --data F.tsv] [options]
    keras-attn translate MODEL_DIR [TEXT ...]        (stdin when no TEXT)
    keras-attn evaluate MODEL_DIR --src F --ref F
    keras-attn plot-attention MODEL_DIR TEXT --out attn.png
"""

import argparse
import os
import sys
import tempfile

from keras_attn.errors import UserError


def _quiet_tensorflow():
    """Imports TensorFlow without its start-up logging reaching the user.

    TF_CPP_MIN_LOG_LEVEL silences TensorFlow's own logging, but a few lines
    (oneDNN, CUDA stubs, absl) are printed by native libraries while they
    load, so standard error is captured during the import and replayed only
    if the import fails.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
            import tensorflow_text  # noqa: F401
            import keras  # noqa: F401
        except BaseException:
            capture.seek(0)
            os.write(saved, capture.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _checked(convert, holds, requirement):
    """An argparse `type`: `convert(text)`, refused in one line unless `holds(value)`."""

    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            kind = "whole number" if convert is int else "number"
            raise argparse.ArgumentTypeError(f"not a {kind}: {text!r}") from None
        if not holds(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {value}")
        return value

    return parse


def _at_least(minimum):
    return _checked(int, lambda value: value >= minimum, f">= {minimum}")


_fraction = _checked(float, lambda value: 0 <= value < 1, "in [0, 1)")
_positive = _checked(float, lambda value: value > 0, "> 0")


def build_parser():
    from keras_attn import __version__

    parser = argparse.ArgumentParser(
        prog="keras-attn",
        description="Attention models in TensorFlow/Keras: train, evaluate, export and serve.",
    )
    parser.add_argument("--version", action="version", version=f"keras-attn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = commands.add_parser("train", help="train a model, evaluate it and export it")
    train.add_argument("job", choices=["transformer"], help="what to train")
    data = train.add_argument_group("data (default: the built-in generated corpus)")
    data.add_argument("--src", help="training source text, one sentence a line (.gz allowed)")
    data.add_argument("--tgt", help="training target text, line-aligned with --src")
    data.add_argument("--data", help="training pairs as one TSV file: source<TAB>target")
    data.add_argument("--builtin-size", type=_at_least(10), default=20000, help="training pairs of the built-in corpus")
    data.add_argument("--valid-src", help="validation source (default: 2%% of training)")
    data.add_argument("--valid-tgt", help="validation target")
    data.add_argument("--test-src", help="test source, scored at the end")
    data.add_argument("--test-tgt", help="test target")
    data.add_argument("--vocab-size", type=_at_least(10), default=8000, help="WordPiece vocabulary size")
    data.add_argument("--shared-vocab", action="store_true", help="one vocabulary and embedding for both languages")
    data.add_argument("--lowercase", action="store_true", help="lowercase before tokenizing")
    data.add_argument("--max-length", type=_at_least(2), default=64, help="longest sequence in tokens")
    model = train.add_argument_group("model and training")
    model.add_argument("--preset", choices=["tiny", "small", "base"], default="tiny")
    model.add_argument("--epochs", type=_at_least(1), default=8)
    model.add_argument("--batch-size", type=_at_least(1), default=64, help="examples per replica")
    model.add_argument("--dropout", type=_fraction, default=None,
                       help="default 0.1, or 0 on the noise-free built-in corpus")
    model.add_argument("--label-smoothing", type=_fraction, default=0.1)
    model.add_argument("--schedule", choices=["cosine", "noam"], default="cosine",
                       help="cosine: warm-up, then cosine decay to the end of the run; noam: the paper's")
    model.add_argument("--learning-rate", type=_positive, default=2e-3, help="peak learning rate")
    model.add_argument("--warmup-steps", type=_at_least(1), default=200)
    model.add_argument("--strategy", choices=["auto", "one_device", "mirrored", "multi_worker"], default="auto")
    model.add_argument("--devices", nargs="+", help="devices for one_device/mirrored, e.g. /gpu:0 /gpu:1")
    model.add_argument("--precision", choices=["auto", "float32", "mixed_bfloat16"], default="auto",
                       help="auto: mixed_bfloat16 where the hardware runs bfloat16 natively")
    model.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    model.add_argument("--seed", type=int, default=0)
    output = train.add_argument_group("output")
    output.add_argument("--run-dir", default=None, help="checkpoints and logs (default: runs/<name>); rerun to resume")
    output.add_argument("--backup-every", type=_at_least(0), default=500, metavar="STEPS",
                        help="back up every STEPS steps as well as after each epoch (0: epochs only)")
    output.add_argument("--export", default="saved_models", metavar="ROOT", help="export root (saved_models/<name>/<version>/)")
    output.add_argument("--no-export", action="store_true", help="do not export")
    output.add_argument("--name", default="transformer", help="model name under the export root")
    output.add_argument("--beam-width", type=_at_least(1), default=4)

    translate = commands.add_parser("translate", help="translate with an exported model")
    translate.add_argument("model_dir", help="saved_models/<name>/<version>")
    translate.add_argument("text", nargs="*", help="sentences (default: one per line on stdin)")
    translate.add_argument("--beam-width", type=_at_least(1), default=4)

    evaluate = commands.add_parser("evaluate", help="BLEU of an exported model on a test set")
    evaluate.add_argument("model_dir")
    evaluate.add_argument("--src", required=True, help="source sentences")
    evaluate.add_argument("--ref", required=True, help="reference translations, line-aligned")
    evaluate.add_argument("--beam-width", type=_at_least(1), default=4)

    plot = commands.add_parser("plot-attention", help="cross-attention heat maps of one translation")
    plot.add_argument("model_dir")
    plot.add_argument("text")
    plot.add_argument("--out", default="attention.png", help="image path")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _quiet_tensorflow()
    from pipelines.text import DataError

    try:
        return COMMANDS[args.command](args)
    except (UserError, DataError) as error:
        print(f"keras-attn: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("keras-attn: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _train(args):
    from keras_attn.jobs import translation
    from keras_attn.training.precision import resolve_mixed_precision

    config = translation.TranslationConfig(
        src=args.src, tgt=args.tgt, data=args.data, builtin_size=args.builtin_size,
        valid_src=args.valid_src, valid_tgt=args.valid_tgt,
        test_src=args.test_src, test_tgt=args.test_tgt,
        preset=args.preset, epochs=args.epochs, batch_size=args.batch_size,
        max_length=args.max_length, vocab_size=args.vocab_size,
        shared_vocab=args.shared_vocab, lowercase=args.lowercase,
        dropout=args.dropout, label_smoothing=args.label_smoothing,
        schedule=args.schedule, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        strategy=args.strategy, devices=args.devices,
        mixed_precision=resolve_mixed_precision(args.precision), jit_compile=args.jit_compile,
        beam_width=args.beam_width, run_dir=args.run_dir or os.path.join("runs", args.name),
        export_root=args.export, name=args.name, export=not args.no_export, seed=args.seed,
        backup_every=args.backup_every,
    )
    result = translation.run(config)
    if not result.samples:  # a worker other than the chief: it only trains
        return 0
    print("\nsample translations:")
    for source, hypothesis in result.samples:
        print(f"  {source}\n  → {hypothesis}")
    if result.export_path:
        print(f"\nexported to {result.export_path}")
        print(f"try: keras-attn translate {result.export_path} \"{result.samples[0][0]}\"")
    return 0


def _load(model_dir):
    if not os.path.isfile(os.path.join(model_dir, "saved_model.pb")):
        raise UserError(f"{model_dir}: not a SavedModel folder (no saved_model.pb)")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    loaded = tf.saved_model.load(model_dir)
    if not {"translate", "attention"} <= set(loaded.signatures):
        raise UserError(f"{model_dir}: not a keras-attn translation export (no translate/attention signatures)")
    return loaded


def _read_lines(path):
    from pipelines.text import read_lines

    return read_lines(path)


def _translate_lines(translator, lines, beam_width, batch_size=64):
    import tensorflow as tf

    for start in range(0, len(lines), batch_size):
        batch = lines[start : start + batch_size]
        out = translator.signatures["translate"](
            text=tf.constant(batch, tf.string), beam_width=tf.constant(beam_width, tf.int32)
        )
        for translation, truncated in zip(out["translation"].numpy(), out["truncated"].numpy()):
            yield translation.decode("utf-8", "replace"), bool(truncated)


def _translate(args):
    translator = _load(args.model_dir)
    lines = args.text or [line.rstrip("\n") for line in sys.stdin]
    for number, (translation, truncated) in enumerate(
        _translate_lines(translator, lines, args.beam_width), start=1
    ):
        print(translation)
        if truncated:
            print(f"keras-attn: input {number} was longer than the model accepts and was truncated", file=sys.stderr)
    return 0


def _evaluate(args):
    from keras_attn.evaluation import bleu

    translator = _load(args.model_dir)
    sources, references = _read_lines(args.src), _read_lines(args.ref)
    if len(sources) != len(references):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
    hypotheses = [t for t, _ in _translate_lines(translator, sources, args.beam_width)]
    scores = bleu(hypotheses, references)
    print(f"BLEU {scores['bleu']:.2f}  (tokenized lowercased {scores['bleu_tok_lc']:.2f})  {scores['signature']}")
    return 0


def _plot_attention(args):
    import tensorflow as tf

    from keras_attn.plots import plot_cross_attention

    translator = _load(args.model_dir)
    out = translator.signatures["attention"](text=tf.constant([args.text]))
    source = [t.decode() for t in out["source_tokens"].numpy()[0] if t not in (b"", b"[PAD]")]
    output = [t.decode() for t in out["output_tokens"].numpy()[0] if t not in (b"", b"[PAD]")]
    weights = out["cross_attention"].numpy()[0][: len(output), :, :, : len(source)]
    plot_cross_attention(weights, source, output, args.out, title=out["translation"].numpy()[0].decode())
    print(f"{out['translation'].numpy()[0].decode()}\nwrote {args.out}")
    return 0


COMMANDS = {
    "train": _train,
    "translate": _translate,
    "evaluate": _evaluate,
    "plot-attention": _plot_attention,
}


if __name__ == "__main__":
    sys.exit(main())
