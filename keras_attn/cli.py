"""The `keras-attn` command line.

    keras-attn train transformer|seq2seq [--src F --tgt F | --data F.tsv] [options]
    keras-attn translate MODEL_DIR [TEXT ...]   (stdin when no TEXT; or an export-ct2 folder)
    keras-attn evaluate MODEL_DIR [--src F --ref F]   (default: its run's test split)
    keras-attn export-ct2 MODEL_DIR OUT [--quantization int8]   (a Transformer's run or export)
    keras-attn plot-attention MODEL_DIR TEXT --out runs/attention.png   (or an IMAGE: a captioner)
    keras-attn train captioner [--data FOLDER --captions FILE] [options]
    keras-attn caption MODEL_DIR IMAGE [IMAGE ...]
    keras-attn pretrain bert [--data FILES_OR_DIRS ...] [options]
    keras-attn fill-mask MODEL_DIR [TEXT ...]   (stdin when no TEXT)
    keras-attn finetune MODEL_DIR --train F.tsv [--valid F.tsv] [--test F.tsv]   (or a checkpoint)
    keras-attn classify MODEL_DIR [TEXT ...] [--top-k K]   (TEXT_A<TAB>TEXT_B for a pair)
    keras-attn import FOLDER OUT   (a Hugging Face BERT or Marian folder as our export)

Options and arguments may come in any order; options are never abbreviated.

User mistakes end in one line, `keras-attn: error: ...`, and exit code 2.
"""

import argparse
import difflib
import os
import pathlib
import shlex
import sys

from keras_attn import config, run_folder
from keras_attn.errors import UserError
from keras_attn.quiet import stderr_held

PROG = "keras-attn"
TRUNCATED = "input {number} was longer than the model accepts and was truncated"
BATCH = 64  # the texts a command sends to an export at once


def _quiet_tensorflow():
    """Imports TensorFlow without its start-up logging reaching the user."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    with stderr_held():
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
        import tensorflow_text  # noqa: F401


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


def _between(low, high):
    return _checked(int, lambda value: low <= value <= high, f"in [{low}, {high}]")


_fraction = _checked(float, lambda value: 0 <= value < 1, "in [0, 1)")
_positive = _checked(float, lambda value: value > 0, "> 0")
_non_negative = _checked(float, lambda value: value >= 0, ">= 0")
_rate = _checked(float, lambda value: 0 < value < 1, "in (0, 1)")


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` with no abbreviated options, whose errors are
    one line naming the command and pointing to its `--help`: `keras-attn:
    error: translate: ... (see keras-attn translate --help)`.

    (With abbreviations `--epoch 3` would be taken as `--epochs 3`.)
    """

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message):
        command = self.prog.removeprefix(PROG).strip()
        self.exit(_fail(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)"))


def _options(parser):
    return {option for action in parser._actions for option in action.option_strings}


class _CommandParser(_Parser):
    """A command's parser: options and positional arguments in any order.

    `translate MODEL --beam-width 1 "A cat sleeps."` as well as options last
    (argparse's intermixed parsing, which a parser holding commands cannot
    use itself: the command's parser does it for the rest). A command of
    several families, each with its flags (`train seq2seq --attention luong`),
    takes the family's name anywhere too (`_family_first`).
    """

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._subparsers is not None:
            return super().parse_known_args(self._family_first(args), namespace)
        if self._intermixing:  # parse_known_intermixed_args calls this method twice
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            namespace, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False
        if extras:  # refused here, so that the message points to this command's --help
            close = (
                difflib.get_close_matches(extras[0], _options(self), n=1)
                if extras[0].startswith("--")
                else []
            )
            hint = f"; did you mean {close[0]}?" if close else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace, extras

    def _family_first(self, args):
        """`args` with the family's name moved first (`train --epochs 2 seq2seq` is `train seq2seq
        --epochs 2`); refuses in one line the flags that belong to other families only."""
        families = self._subparsers._group_actions[0].choices
        with_values = {
            option
            for parser in families.values()
            for action in parser._actions
            if action.nargs != 0
            for option in action.option_strings
        }
        at = next(
            (
                at
                for at, word in enumerate(args)
                if word in families and (at == 0 or args[at - 1] not in with_values)
            ),
            None,
        )
        if at is None:
            return args
        family, rest = args[at], args[:at] + args[at + 1 :]
        given = dict.fromkeys(word.split("=")[0] for word in rest if word.startswith("--"))
        foreign = [
            flag
            for flag in given
            if flag not in _options(families[family])
            and any(flag in _options(parser) for parser in families.values())
        ]
        if foreign:
            owners = [name for name, parser in families.items() if _options(parser) & set(foreign)]
            command = self.prog.removeprefix(PROG).strip()
            families[family].error(f"{', '.join(foreign)}: for {command} {', '.join(owners)} only")
        return [family, *rest]


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it has none (None, off for a switch, no texts)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


_CHECKS = {
    config.FRACTION: _fraction,
    config.RATE: _rate,
    config.POSITIVE: _positive,
    config.NON_NEGATIVE: _non_negative,
}
# the constraints written as (kind, bounds...)
_WHOLE_NUMBERS = {
    "at_least": _at_least,
    "between": _between,
}


def _decay_parameter(text):
    """`NAME=X` → `(NAME, float X)`."""
    name, _, value = text.partition("=")
    try:
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}") from None


# How the command line spells a value that the config holds otherwise.
_PARSE = {"decay_parameters": _decay_parameter}


def _convert(name, value):
    if name == "mixed_precision":  # --precision auto|float32|mixed_bfloat16
        from keras_attn.training.precision import resolve_mixed_precision

        return resolve_mixed_precision(value)
    return dict(value) if name == "decay_parameters" else value


def add_config_flags(parser, config_class, only=None):
    """Adds to `parser` a flag for each field of `config_class` that
    has help (`only`: those of these names).

    Flags keep argparse's SUPPRESS as default: only what is given reaches
    the config, which supplies the rest (its defaults are shown in `--help`).
    """
    groups = {}
    order = lambda flag: {config.TRAINING: 1, config.OUTPUT: 2}.get(flag[1]["group"], 0)  # noqa: E731
    for field, metadata in sorted(config.flags(config_class), key=order):
        if only is not None and field.name not in only:
            continue
        group = metadata["group"]
        where = groups.get(group) or groups.setdefault(
            group, parser.add_argument_group(group) if group else parser
        )
        default = metadata.get("cli_default", field.default)
        help = (
            metadata["help"]
            if any(default is hidden for hidden in (None, False, True))
            else (f"{metadata['help']} (default: {default})")
        )
        options = dict(help=help.replace("%", "%%"), default=argparse.SUPPRESS)
        for key in ("choices", "nargs", "metavar", "required"):
            if key in metadata:
                options[key] = metadata[key]
        if metadata.get("positional"):
            where.add_argument(field.name, **options)
            continue
        flag = config.flag_name(field)
        if field.type is bool and "choices" not in metadata:
            options["action"] = "store_false" if flag.startswith("--no-") else "store_true"
        else:
            check = metadata["check"]
            if isinstance(check, tuple):
                options["type"] = _WHOLE_NUMBERS[check[0]](*check[1:])
            elif check:
                options["type"] = _CHECKS[check]
            elif field.name in _PARSE:
                options["type"] = _PARSE[field.name]
            elif field.type in (int, float):
                options["type"] = field.type
        where.add_argument(flag, dest=field.name, **options)


def config_from(args, config_class):
    """`config_class` with the flags given in `args` (the CLI's spellings converted)."""
    _refuse_export_flags_with_no_export(args, config_class)
    values = {}
    for field, metadata in config.flags(config_class):
        if field.name in vars(args):
            values[field.name] = _convert(field.name, getattr(args, field.name))
        elif "cli_default" in metadata:
            values[field.name] = _convert(field.name, metadata["cli_default"])
    return config_class(**values)


def _refuse_export_flags_with_no_export(args, config_class):
    """--export ROOT or --force-export beside --no-export: the job
    would export nothing and ignore them.

    Refused here, where only the flags given are in `args`: a config made in Python may keep its
    export settings while turning the export off.
    """
    if vars(args).get("export") is not False:
        return
    fields = {field.name: field for field, _ in config.flags(config_class)}
    ignored = [
        config.flag_name(fields[name])
        for name in ("export_root", "force_export")
        if name in vars(args)
    ]
    if ignored:
        raise UserError(
            f"{', '.join(ignored)}: not with {config.flag_name(fields['export'])}, which exports "
            "nothing"
        )


TRAIN_JOBS = {
    job.family: job
    for job in (config.TranslationConfig, config.Seq2SeqConfig, config.CaptionConfig)
}
TRAINS = {  # what `train FAMILY` trains
    "transformer": "the Transformer (Vaswani et al. 2017) to translate",
    "seq2seq": "an RNN encoder-decoder with attention (Bahdanau et al. 2015, Luong et al. 2015) "
    "to translate",
    "captioner": "an image captioner with visual attention (Show, Attend and Tell, Xu et al. 2015)",
}


def build_parser():
    from keras_attn import __version__

    parser = _Parser(
        prog=PROG,
        description="Attention models in TensorFlow/Keras: train, evaluate, export and serve.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"keras-attn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    def command(name, description):
        return commands.add_parser(
            name, help=description, description=description, formatter_class=_HelpFormatter
        )

    train = command("train", "train a model, evaluate it and export it")
    families = train.add_subparsers(
        dest="job",
        metavar="FAMILY",
        required=True,
        parser_class=_CommandParser,
        help="the model to train; keras-attn train FAMILY --help lists its flags",
    )
    for family, config_class in TRAIN_JOBS.items():
        add_config_flags(
            families.add_parser(
                family,
                help=TRAINS[family],
                formatter_class=_HelpFormatter,
                description=f"train {TRAINS[family]}, evaluate it and export it",
            ),
            config_class,
        )

    _add_translation_commands(command)
    _add_image_commands(command)
    _add_bert_commands(command)

    imported = command(
        "import",
        "export a Hugging Face folder as a keras-attn export: a BERT (config.json, "
        "safetensors weights, vocab.txt) with the heads its checkpoint has, or a Marian "
        "translator (OPUS-MT: also source.spm, target.spm, vocab.json)",
    )
    imported.add_argument(
        "folder", help="the Hugging Face model folder (what save_pretrained or hf download writes)"
    )
    imported.add_argument(
        "out",
        help="the model folder under an export root (saved_models/<name>): the export is "
        "its next version",
    )
    # (for a Marian translator)
    add_config_flags(imported, config.TranslationConfig, only={"compiled_search"})

    serve = command(
        "serve", "serve every export under a model root with TensorFlow Serving's REST API"
    )
    add_config_flags(serve, config.ServeConfig)
    return parser


def _add_translation_commands(command):
    """translate, export-ct2 and evaluate: `command(name, description)` makes each's parser."""
    translate = command("translate", "translate with an exported model")
    translate.add_argument(
        "model_dir", help="an export (saved_models/<name>/<version>) or a folder of export-ct2"
    )
    translate.add_argument(
        "text",
        nargs="*",
        default=[],
        help=(
            "sentences (default: one per line on standard input); an empty one translates to an "
            "empty line"
        ),
    )
    _add_beam_width(translate, default=4)

    ct2 = command(
        "export-ct2",
        "convert a Transformer's run folder or export into a CTranslate2 model folder (its "
        "fast decoding; keras-attn translate OUT tokenizes as the model did)",
    )
    ct2.add_argument(
        "model_dir",
        help="a run folder of keras-attn train transformer (runs/<name>: its best weights) "
        "or its export (saved_models/<name>/<version>)",
    )
    ct2.add_argument("out", help="the CTranslate2 model folder to write")
    ct2.add_argument(
        "--quantization",
        choices=config.CT2_QUANTIZATIONS,
        help="store the weights as this type (default: float32)",
    )
    ct2.add_argument("--force", action="store_true", help="replace an existing OUT")

    evaluate = command("evaluate", "exact match, BLEU and chrF of an exported model on a test set")
    evaluate.add_argument(
        "model_dir",
        help="an export (saved_models/<name>/<version>) or a folder of export-ct2 "
        "(with --src and --ref)",
    )
    evaluate.add_argument(
        "--src",
        help=(
            "source sentences, one a line (default: the test split its run wrote, "
            f"runs/<name>/{run_folder.TEST_SOURCE})"
        ),
    )
    evaluate.add_argument(
        "--ref",
        help=(
            "reference translations, line-aligned with --src (default: "
            f"runs/<name>/{run_folder.TEST_REFERENCE})"
        ),
    )
    _add_beam_width(evaluate, default=4)
    evaluate.add_argument(
        "--tokenized",
        action="store_true",
        help="also score the text as tokenized, words split at whitespace only, as multi-bleu.perl "
        "and fairseq do (for a model trained on tokenized text, e.g. Moses-tokenized Multi30k)",
    )


def _add_image_commands(command):
    """caption, and plot-attention (of a translation or a caption)."""
    caption = command("caption", "caption images with an exported captioner (one caption a line)")
    caption.add_argument(
        "model_dir", help="an export of keras-attn train captioner: saved_models/<name>/<version>"
    )
    caption.add_argument("images", nargs="+", metavar="IMAGE", help="PNG, JPEG, GIF or BMP files")
    _add_beam_width(caption, default=1)

    plot = command(
        "plot-attention",
        "cross-attention heat maps of one translation, or one caption's attention per "
        "word over the image, decoded greedily (a beam may decode otherwise)",
    )
    plot.add_argument("model_dir", help="an export: saved_models/<name>/<version>")
    plot.add_argument(
        "text", help="the sentence to translate and plot; for a captioning export, an image file"
    )
    plot.add_argument(
        "--out",
        default="attention.png",
        help="image to write (.png, .pdf, .svg, ...); missing folders are created",
    )


def _add_beam_width(parser, default):
    parser.add_argument(
        "--beam-width",
        type=_between(1, config.MAX_BEAM_WIDTH),
        default=default,
        help=f"beam search width (1: greedy; at most {config.MAX_BEAM_WIDTH})",
    )


def _add_bert_commands(command):
    pretrain = command("pretrain", "pretrain BERT (masked LM + next sentence) and export it")
    pretrain.add_argument("job", choices=["bert"], help="bert: BERT's two pretraining tasks")
    add_config_flags(pretrain, config.PretrainConfig)

    fill = command("fill-mask", "predict the [MASK] tokens of texts with a pretrained BERT export")
    fill.add_argument("model_dir", help="an export: saved_models/<name>/<version>")
    fill.add_argument(
        "text",
        nargs="*",
        default=[],
        help="texts with [MASK] in them (default: one per line on standard input)",
    )
    fill.add_argument(
        "--top-k",
        type=_between(1, config.MAX_TOP_K),
        default=5,
        help=f"candidates shown per mask (at most {config.MAX_TOP_K})",
    )

    finetune = command(
        "finetune",
        "fine-tune a pretrained BERT (export, run folder, or Hugging Face or keras-hub "
        "folder) as a classifier and export it",
    )
    add_config_flags(finetune, config.FinetuneConfig)

    classify = command("classify", "classify texts with a fine-tuned BERT export")
    classify.add_argument(
        "model_dir", help="an export of keras-attn finetune: saved_models/<name>/<version>"
    )
    classify.add_argument(
        "text",
        nargs="*",
        default=[],
        help="texts, TEXT_A<TAB>TEXT_B for a pair (default: one per line on standard input); "
        "pairs only for a model fine-tuned on pairs, single texts for one fine-tuned on those",
    )
    classify.add_argument(
        "--top-k",
        type=_at_least(1),
        default=1,
        help="labels shown per text, most probable first, each with its probability",
    )


def main(argv=None):
    """Runs one `keras-attn` command; returns the exit code.

    A mistake the user can fix (a bad flag, a missing, unreadable or
    wrong file, an output that cannot be written) is one line on standard
    error, `keras-attn: error: ...`, and exit code 2; never a traceback.
    """
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
        return _fail(error)
    except BrokenPipeError:  # the reader of the output left (`keras-attn translate ... | head -1`)
        _silence_stdout()
        return 141  # as a shell reports a process ended by SIGPIPE
    except OSError as error:  # a file or folder the command could not read or write
        where = f"{error.filename}: " if error.filename else ""
        return _fail(f"{where}{error.strerror or error}")
    except KeyboardInterrupt:
        again = (
            "; run the same command again to resume"
            if args.command in ("train", "pretrain", "finetune")
            else ""
        )
        print(f"keras-attn: interrupted{again}", file=sys.stderr)
        return 130


def _silence_stdout():
    """Points standard output at /dev/null, so that exiting does not write to a closed pipe."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor (e.g. captured by a test)
        pass


def _fail(message):
    """Says `message` as a user's mistake, in one line (`keras-attn:
    error: ...`); returns the exit code, 2.
    """
    print(f"{PROG}: error: {' '.join(str(message).splitlines())}", file=sys.stderr)
    return 2


def _train(args):
    job = config_from(args, TRAIN_JOBS[args.job])
    if args.job == "captioner":
        return _train_captioner(job)
    from keras_attn.jobs import translation

    result = translation.run(job)
    if not _report_samples(result, "translations"):
        return 0
    if result.export_path:
        print(f"try: keras-attn translate {result.export_path} {shlex.quote(result.samples[0][0])}")
        test_split = run_folder.path(job.run_dir, run_folder.TEST_SOURCE)
        print(
            f"     keras-attn evaluate {result.export_path}   (scores its test split, {test_split})"
        )
    return 0


def _report_samples(result, what):
    """Prints a job's sample outputs and where it exported; False on a worker that only trained."""
    if not result.samples:
        return False
    print(f"\nsample {what}:")
    for given, output in result.samples:
        print(f"  {given}\n  → {output}")
    _say_exported(result)
    return True


def _train_captioner(job):
    from keras_attn.jobs import captioning

    result = captioning.run(job)
    if not _report_samples(result, "captions"):
        return 0
    if result.export_path:
        print(
            f"try: keras-attn caption {result.export_path} IMAGE.png   (PNG, JPEG, GIF or BMP "
            "files)"
        )
    return 0


def load_translation_export(model_dir):
    """The translation export in `model_dir`, or a one-line
    `UserError` saying what it is instead.
    """
    loaded = _load_saved_model(model_dir)
    if not {"translate", "attention"} <= set(loaded.signatures):
        if "caption" in loaded.signatures:
            raise UserError(
                f"{model_dir}: a captioning export, not a translation one (keras-attn caption "
                f"{model_dir} IMAGE)"
            )
        if {"fill_mask", "classify"} & set(loaded.signatures):
            raise UserError(
                f"{model_dir}: a BERT export, not a translation one (keras-attn fill-mask or "
                "classify reads it)"
            )
        raise UserError(
            f"{model_dir}: not a keras-attn translation export (no translate/attention signatures)"
        )
    import tensorflow as tf

    # each signature's first call makes its tokenizers' kernels: SentencePiece's log a line
    with stderr_held():
        loaded.signatures["translate"](text=tf.constant([""]), beam_width=tf.constant(1))
        loaded.signatures["attention"](text=tf.constant([""]))
    return loaded


def _load_saved_model(model_dir):
    """The SavedModel in `model_dir`, or a one-line `UserError`."""
    _check_export_folder(model_dir)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    try:
        return tf.saved_model.load(model_dir)
    except Exception as error:  # corrupt, unreadable, or needs ops this process lacks
        message = getattr(error, "message", None) or str(error) or type(error).__name__
        raise UserError(
            f"{model_dir}: cannot be loaded as a SavedModel ({message.strip().splitlines()[0]})"
        ) from None


def _check_export_folder(model_dir, also=""):
    """Refuses, before loading anything, a `model_dir` that is no
    SavedModel folder (`also`: what else it is not).
    """
    if not os.path.exists(model_dir):
        raise UserError(f"{model_dir}: no such folder")
    if not os.path.isdir(model_dir):
        raise UserError(
            f"{model_dir}: is a file, not an export folder (saved_models/<name>/<version>)"
        )
    from keras_attn.serving.versions import SAVED_MODEL, is_saved_model_folder

    if not is_saved_model_folder(model_dir):
        versions = sorted((e for e in os.listdir(model_dir) if e.isdigit()), key=int)
        hint = f"; its versions: {', '.join(versions)}" if versions else ""
        raise UserError(
            f"{model_dir}: not a SavedModel folder (no "
            f"{SAVED_MODEL}){' ' + also if also else ''}{hint}"
        )


def _read_lines(path):
    from pipelines.text import read_lines

    return read_lines(path)


def translate_lines(translator, lines, beam_width, batch_size=BATCH):
    """Yields `(translation, truncated)` for each of `lines` (str or bytes), by an export (its
    signatures) or a `CTranslate2Translator`."""
    import tensorflow as tf

    for start in range(0, len(lines), batch_size):
        batch = lines[start : start + batch_size]
        if not hasattr(translator, "signatures"):
            yield from zip(*translator.translate(batch, beam_width))
            continue
        out = translator.signatures["translate"](
            text=tf.constant(batch, tf.string), beam_width=tf.constant(beam_width, tf.int32)
        )
        for translation, truncated in zip(out["translation"].numpy(), out["truncated"].numpy()):
            yield translation.decode("utf-8", "replace"), bool(truncated)


def _load_translator(model_dir):
    """An export, or the `CTranslate2Translator` of a folder
    `export-ct2` wrote (it holds CTranslate2's model.bin).
    """
    from keras_attn.serving.versions import is_ctranslate2_folder

    if not is_ctranslate2_folder(model_dir):
        return load_translation_export(model_dir)
    from keras_attn.serving.ctranslate2_translator import load_ctranslate2

    return load_ctranslate2(model_dir)


def _input_lines(texts):
    """The texts to translate, fill or classify as UTF-8 bytes: the arguments,
    else the lines of standard input (refused in one line, `<stdin>:N: invalid
    UTF-8 ...`, as `evaluate` refuses a file, where not UTF-8)."""
    from pipelines.text import decode_line, decode_text

    if texts:  # invalid UTF-8 in an argument reaches Python as surrogate escapes
        return [
            decode_text(text.encode("utf-8", "surrogateescape"), f"argument {number}").encode()
            for number, text in enumerate(texts, start=1)
        ]
    if sys.stdin is None:
        return []
    if sys.stdin.isatty():
        print(
            "keras-attn: reading sentences from standard input, one a line (Ctrl-D to end)",
            file=sys.stderr,
        )
    return [
        decode_line(line, "<stdin>", number).rstrip("\r\n").encode()
        for number, line in enumerate(sys.stdin.buffer, start=1)
    ]


def _translate(args):
    translator = _load_translator(args.model_dir)
    lines = _input_lines(args.text)
    for number, (translation, truncated) in enumerate(
        translate_lines(translator, lines, args.beam_width), start=1
    ):
        print(translation)
        if truncated:
            print(f"{PROG}: {TRUNCATED.format(number=number)}", file=sys.stderr)
    return 0


def _export_ct2(args):
    from keras_attn.jobs.common import check_writable_folder
    from keras_attn.jobs.translation import export_to_ctranslate2
    from keras_attn.serving.ctranslate2_export import check_output_folder

    # said before loading the model, with the flag's name
    check_output_folder(args.out, args.force, "--force")
    check_writable_folder(args.out, "OUT")
    export_to_ctranslate2(args.model_dir, args.out, args.quantization, args.force)
    print(
        f"{args.out}: a CTranslate2 model ({args.quantization or 'float32'}) of "
        f"{args.model_dir}'s weights (keras-attn translate {args.out} ... translates with it)"
    )
    return 0


def _import(args):
    from keras_attn import checkpoints, serving
    from keras_attn.checkpoints import bert, marian

    _check_import_out(args.out, args.folder)
    if not os.path.isdir(args.folder):
        raise UserError(f"{args.folder}: no such folder")
    kind = checkpoints.kind_of(args.folder)
    if kind == "keras-hub":
        raise UserError(
            f"{args.folder}: a keras-hub preset folder, which holds no masked-LM head to export; "
            f"keras-attn finetune {args.folder} fine-tunes its encoder"
        )
    if kind == "huggingface-bert":
        task = bert.pretrained_task(bert.read_checkpoint(args.folder))
        module, reads = serving.BertServer(task), "keras-attn fill-mask {} ... and finetune read it"
    elif kind == "huggingface-marian":
        task = marian.build_task(marian.read_checkpoint(args.folder))
        translator = serving.Translator(
            task,
            compiled_search=getattr(
                args, "compiled_search", config.TranslationConfig.compiled_search
            ),
        )
        module, reads = translator, "keras-attn translate {} ... translates with it"
    else:
        raise UserError(f"{args.folder}: already an export of keras-attn")
    out = os.path.normpath(args.out)
    path = serving.export(module, os.path.dirname(out) or ".", os.path.basename(out))
    print(f"{path}: {type(task).__name__} of {args.folder} ({reads.format(path)})")
    return 0


def _check_import_out(out, folder):
    """Refuses in one line an OUT that is not a model's folder under
    an export root, where versions go.
    """
    from keras_attn.jobs.common import check_writable_folder
    from keras_attn.serving.versions import is_saved_model_folder

    name = os.path.basename(os.path.normpath(out))
    if name.isdigit():  # as other commands write an export's path: the version is import's to pick
        parent = os.path.dirname(os.path.normpath(out)) or "."
        raise UserError(
            f"{out} (OUT): a version's folder; give the model's folder, {parent}: the export is "
            "its next version"
        )
    config.check_model_name(name, f"OUT {out!r}: its last part")
    check_writable_folder(out, "OUT")
    path = pathlib.Path(out).resolve()
    imported = pathlib.Path(folder).resolve()
    if imported == path or imported in path.parents or path in imported.parents:
        raise UserError(f"{out} (OUT): holds or lies in the imported folder {folder}")
    export = next((above for above in (path, *path.parents) if is_saved_model_folder(above)), None)
    if export is not None:
        raise UserError(
            f"{out} (OUT): lies in the export {export}; give the model's folder above its versions"
        )
    if os.path.isdir(path) and any(
        not name.isdigit() and not name.startswith(".") and os.path.isdir(os.path.join(path, name))
        for name in os.listdir(path)
    ):
        raise UserError(
            f"{out} (OUT): holds folders other than versions (an export root?); give ROOT/<name>"
        )


def _evaluate(args):
    from keras_attn.evaluation import format_scores, tokenized_bleu, translation_scores

    if bool(args.src) != bool(args.ref):
        raise UserError("--src and --ref must be given together")
    translator = _load_translator(args.model_dir)  # what the folder is, said first
    source_path, reference_path = _test_split(args)
    sources, references = _read_lines(source_path), _read_lines(reference_path)
    if len(sources) != len(references):
        raise UserError(
            f"{source_path} has {len(sources)} lines but {reference_path} has {len(references)}"
        )
    if not sources:
        raise UserError(f"{source_path}: no sentences to score")
    hypotheses = [t for t, _ in translate_lines(translator, sources, args.beam_width)]
    scores = translation_scores(hypotheses, references)
    print(format_scores(scores))
    print(f"BLEU signature: {scores['signature']}")
    print(f"tokenized lowercased BLEU signature: {scores['bleu_tok_lc_signature']}")
    print(f"chrF signature: {scores['chrf_signature']}")
    if args.tokenized:
        tokenized = tokenized_bleu(hypotheses, references)
        print(
            f"BLEU on the text as tokenized: {tokenized['bleu_tokenized']:.2f} "
            f"(signature: {tokenized['bleu_tokenized_signature']})"
        )
    return 0


def _test_split(args):
    """`(--src, --ref)`, by default the test split the export's run wrote."""
    from keras_attn.serving import read_metadata
    from keras_attn.serving.versions import is_ctranslate2_folder

    if args.src:
        return args.src, args.ref
    if is_ctranslate2_folder(args.model_dir):
        raise UserError(
            f"{args.model_dir}: a CTranslate2 model, which names no test split; give --src and "
            "--ref"
        )
    _check_export_folder(args.model_dir)
    metadata = read_metadata(args.model_dir)
    if "test_src" not in metadata:
        raise UserError(f"{args.model_dir}: names no test split of its run; give --src and --ref")
    return metadata["test_src"], metadata["test_ref"]


def _plot_attention(args):
    import tensorflow as tf

    from keras_attn.plots import check_image_path, plot_cross_attention

    try:
        check_image_path(args.out)
    except ValueError as error:
        raise UserError(str(error)) from None
    loaded = _load_saved_model(args.model_dir)
    if "caption" in loaded.signatures:
        return _plot_caption_attention(args, loaded)
    if not args.text.strip():
        raise UserError("nothing to plot: the text is empty")
    translator = load_translation_export(args.model_dir)
    out = translator.signatures["attention"](
        text=tf.constant([args.text.encode("utf-8", "surrogateescape")])
    )
    source = [t.decode() for t in out["source_tokens"].numpy()[0] if t not in (b"", b"[PAD]")]
    output = [t.decode() for t in out["output_tokens"].numpy()[0] if t not in (b"", b"[PAD]")]
    if not source:
        raise UserError("nothing to plot: the text has no tokens the model reads")
    if not output:
        raise UserError("nothing to plot: the translation is empty")
    translation = out["translation"].numpy()[0].decode("utf-8", "replace")
    weights = out["cross_attention"].numpy()[0][: len(output), :, :, : len(source)]
    try:
        plot_cross_attention(weights, source, output, args.out, title=translation)
    except OSError as error:
        raise UserError(f"{args.out}: cannot be written ({error.strerror or error})") from None
    print(
        f"{translation}\nwrote {args.out} (the attention of greedy decoding, as translate "
        "--beam-width 1)"
    )
    return 0


def _plot_caption_attention(args, loaded):
    from keras_attn.plots import caption_attention_figure, save_figure

    encoded = _read_image_file(args.text)
    out = next(_caption_images(loaded, [encoded], beam_width=1))
    if not out["readable"]:
        raise UserError(f"{args.text}: not a readable PNG, JPEG, GIF or BMP image")
    words = [token for token in out["output_tokens"] if token not in ("[EOS]", "[PAD]")]
    if not words:
        raise UserError("nothing to plot: the caption is empty")
    # attention weights sum to 1 a word: all zero only without attention
    if not out["attention"].any():
        raise UserError(
            f"{args.model_dir}: a captioner without attention (--attention none): nothing to plot"
        )
    image = _decoded_pixels(encoded)
    figure = caption_attention_figure(
        image,
        words,
        out["attention"][: len(words)].reshape(len(words), -1),
        out["attention"].shape[1:],
        title=out["caption"],
    )
    try:
        save_figure(figure, args.out)
    except OSError as error:
        raise UserError(f"{args.out}: cannot be written ({error.strerror or error})") from None
    print(
        f"{out['caption']}\nwrote {args.out} (the attention of greedy decoding, as caption "
        "--beam-width 1)"
    )
    return 0


def _decoded_pixels(encoded):
    """The image as the user sees it (RGB, first frame), for drawing under the attention."""
    import tensorflow as tf

    return tf.io.decode_image(encoded, channels=3, expand_animations=False).numpy()


def _pretrain(args):
    from keras_attn.jobs import bert

    job = config_from(args, config.PretrainConfig)
    result = bert.pretrain(job)
    _say_exported(result)
    if result.export_path:
        example = bert.FILL_MASK_EXAMPLES["data" if job.data else "builtin"]
        print(f"try: keras-attn fill-mask {result.export_path} {shlex.quote(example)}")
    return 0


def _finetune(args):
    from keras_attn.checkpoints.huggingface import CONFIG
    from keras_attn.checkpoints.pretrained_bert import is_checkpoint_folder
    from keras_attn.jobs import bert

    if not run_folder.is_run_folder(args.model_dir) and not is_checkpoint_folder(args.model_dir):
        _check_export_folder(
            args.model_dir,
            f"nor a pretraining run folder (no {run_folder.SETTINGS}) nor a "
            f"Hugging Face or keras-hub BERT folder (no {CONFIG})",
        )
    result = bert.finetune(config_from(args, config.FinetuneConfig))
    _say_exported(result)
    if result.export_path:
        print(f"try: keras-attn classify {result.export_path} {shlex.quote('a fine film.')}")
    return 0


def _say_exported(result):
    if result.export_path and result.new_export:
        print(f"\nexported to {result.export_path}")
    elif result.export_path:
        print(
            f"\nnot exported: {result.export_path} already holds this model (same weights and "
            "vocabulary)"
        )


def _load_bert(model_dir, signature, command):
    """The BERT export in `model_dir` with `signature`, or a one-line `UserError`."""
    loaded = _load_saved_model(model_dir)
    if signature not in loaded.signatures:
        kind = (
            "a fine-tuned BERT export (keras-attn finetune)"
            if signature == "classify"
            else "a BERT pretraining export"
        )
        raise UserError(f"{model_dir}: not {kind}; {command} needs its {signature} signature")
    return loaded


def _caption(args):
    images, unread = [], {}
    for path in args.images:  # a file that cannot be read is said after the others are captioned
        try:
            images.append(_read_image_file(path))
        except UserError as error:
            images.append(b"")
            unread[path] = str(error)
    loaded = _load_saved_model(args.model_dir)
    if "caption" not in loaded.signatures:
        raise UserError(
            f"{args.model_dir}: not a captioning export (keras-attn train captioner); it has no "
            "caption signature"
        )
    code = 0
    for path, out in zip(args.images, _caption_images(loaded, images, args.beam_width)):
        print(out["caption"])
        if path in unread:
            code = _fail(f"{unread[path]} (an empty line printed)")
        elif not out["readable"]:
            code = _fail(
                f"{path}: not a readable PNG, JPEG, GIF or BMP image (an empty line printed)"
            )
    return code


def _read_image_file(path):
    try:
        with open(path, "rb") as file:
            return file.read()
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not an image file") from None
    except OSError as error:
        raise UserError(f"{path}: {error.strerror}") from None


def _caption_images(loaded, images, beam_width, batch_size=16):
    """Yields, for each encoded image, its `caption` (str),
    `readable`, `output_tokens` and `attention` (NumPy).
    """
    import tensorflow as tf

    from keras_attn.quiet import stderr_held

    for start in range(0, len(images), batch_size):
        with stderr_held():  # libjpeg's own line on a damaged JPEG: ours says it
            out = loaded.signatures["caption"](
                image=tf.constant(images[start : start + batch_size], tf.string),
                beam_width=tf.constant(beam_width, tf.int32),
            )
        out = {key: value.numpy() for key, value in out.items()}
        for row in range(len(out["caption"])):
            yield {
                "caption": out["caption"][row].decode("utf-8", "replace"),
                "readable": bool(out["readable"][row]),
                "output_tokens": [t.decode() for t in out["output_tokens"][row]],
                "attention": out["attention"][row],
            }


def _fill_mask(args):
    import tensorflow as tf

    model = _load_bert(args.model_dir, "fill_mask", "fill-mask")
    lines = _input_lines(args.text)
    unanswered = 0
    for start in range(0, len(lines), BATCH):
        out = model.signatures["fill_mask"](
            text=tf.constant(lines[start : start + BATCH], tf.string),
            top_k=tf.constant(args.top_k, tf.int32),
        )
        tokens, scores = out["tokens"].numpy(), out["scores"].numpy()
        for row, filled in enumerate(out["filled"].numpy()):
            number, masks = start + row + 1, int(out["num_masks"].numpy()[row])
            answered = int((tokens[row, :, 0] != b"").sum()) if tokens.shape[1] else 0
            print(filled.decode("utf-8", "replace"))
            for index in range(answered):
                candidates = [
                    f"{token.decode('utf-8', 'replace')} {score:.3f}"
                    for token, score in zip(tokens[row, index], scores[row, index])
                ]
                print(f"  [MASK] {index + 1}: " + ", ".join(candidates))
            problem = _unanswered_masks(masks, answered, bool(out["truncated"].numpy()[row]))
            if problem:
                print(
                    f"{PROG}: {'error: ' if not answered else ''}input {number}: {problem}",
                    file=sys.stderr,
                )
                unanswered += not answered
    return 2 if unanswered else 0


def _unanswered_masks(masks, answered, truncated):
    """What keeps some of a text's `masks` unanswered, or None when all are answered."""
    if not masks:
        return "no [MASK] to fill"
    if answered == masks:
        return None
    if truncated:
        return (
            f"{masks - answered} of its {masks} [MASK]s lie past the model's length limit, "
            "where the text was cut"
        )
    return f"only its first {answered} of {masks} [MASK]s are answered (the most a text has)"


def _classify(args):
    import numpy as np
    import tensorflow as tf

    from keras_attn.serving.bert import read_classifier

    model = _load_bert(args.model_dir, "classify", "classify")
    known = read_classifier(args.model_dir)  # {} for an export of an older keras-attn
    if args.top_k > 1 and "labels" not in known:
        raise UserError(
            f"--top-k {args.top_k}: {args.model_dir} does not list its labels (exported by an "
            "older keras-attn)"
        )
    lines = _input_lines(args.text)
    _check_pairs(lines, known.get("pairs"), args.model_dir)
    empty = 0
    for number, line in enumerate(lines, start=1):
        if not line.replace(b"\t", b"").strip():
            print()  # a line for each input
            print(f"{PROG}: error: input {number}: empty text, not classified", file=sys.stderr)
            empty += 1
            continue
        if b"\t" in line:
            text_a, text_b = line.split(b"\t", 1)
            out = model.signatures["classify_pair"](
                text_a=tf.constant([text_a]), text_b=tf.constant([text_b])
            )
        else:
            out = model.signatures["classify"](text=tf.constant([line]))
        probabilities = out["probabilities"].numpy()[0]
        if args.top_k == 1:
            print(f"{out['label'].numpy()[0].decode()}\t{probabilities.max():.3f}")
        else:
            best = np.argsort(-probabilities, kind="stable")[: args.top_k]
            print("\t".join(f"{known['labels'][i]}\t{probabilities[i]:.3f}" for i in best))
        if "truncated" in out and out["truncated"].numpy()[0]:  # (exports before it said so)
            print(f"{PROG}: {TRUNCATED.format(number=number)}", file=sys.stderr)
    return 2 if empty else 0


def _check_pairs(lines, pairs, model_dir):
    """Refuses a TAB pair given to a model fine-tuned on single texts,
    or a single text to one fine-tuned on pairs.
    """
    if pairs is None:  # an export that does not say
        return
    for number, line in enumerate(lines, start=1):
        if line.strip() and (b"\t" in line) != pairs:
            given = "a TEXT_A<TAB>TEXT_B pair" if b"\t" in line else "a single text (no TAB)"
            wanted = "pairs, TEXT_A<TAB>TEXT_B" if pairs else "single texts (a TAB makes a pair)"
            raise UserError(
                f"input {number} is {given}, but {model_dir} was fine-tuned on {wanted}"
            )


def _serve(args):
    from keras_attn.serving.server import serve

    return serve(config_from(args, config.ServeConfig), log=lambda line: print(line, flush=True))


COMMANDS = {
    "serve": _serve,
    "pretrain": _pretrain,
    "fill-mask": _fill_mask,
    "finetune": _finetune,
    "classify": _classify,
    "train": _train,
    "translate": _translate,
    "export-ct2": _export_ct2,
    "import": _import,
    "evaluate": _evaluate,
    "plot-attention": _plot_attention,
    "caption": _caption,
}


if __name__ == "__main__":
    sys.exit(main())
