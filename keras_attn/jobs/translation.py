"""The translation job: data → tokenizers → fit → evaluate → export.

`run(TranslationConfig(...))` is what `keras-attn train transformer` runs, `run(Seq2SeqConfig(...))`
what `keras-attn train seq2seq` runs (both configs: `keras_attn.config`). A config says which model
it trains (`build_task`), its width and callbacks and which of its fields bind a run folder
(`bound_settings`); everything else here is shared. What every job shares (flag checks, the setup
report, the run-folder binding) is `keras_attn.jobs.common`'s. Without data files the job trains on
the built-in generated corpus.
"""

import contextlib
import dataclasses
import os
import time

import keras
import numpy as np

from keras_attn import evaluation, run_folder, serving
from keras_attn.config import (
    STREAM_ABOVE_MB,
    STREAMED_VOCAB_SAMPLE,
    Seq2SeqConfig,
    TranslationConfig,
)
from keras_attn.errors import UserError
from keras_attn.jobs import common
from keras_attn.jobs.common import (  # noqa: F401  (also this module's API, as before)
    check_strategy_flags,
    check_writable_folder,
    describe_setup,
    wait_for_chief,
)
from keras_attn.models import Seq2SeqLM
from keras_attn.schedules import warmup_cosine
from keras_attn.training.runner import train
from pipelines import prepared, streaming, synthetic, text, tokenizers, translation
from pipelines.preprocessors import TranslationPreprocessor
from pipelines.sentencepiece_tokenizer import SentencePieceTokenizer, learn_sentencepiece_model
from pipelines.text import write_text_atomically


@dataclasses.dataclass
class TranslationResult:
    """What a run gives back.

    Attributes:
        export_path: the export holding the run's model (None without
            export, and on workers other than the chief).
        metrics: `evaluation.translation_scores` of the test split, with
            `hypotheses`, `parameters` and `train_seconds`.
        samples: `(source, translation)` pairs of the first test sentences.
        history: per-epoch logs of this process's training (`{}` when
            nothing was trained).
        model: the trained `Seq2SeqLM`, with its best validation weights.
        steps: optimizer steps of the whole run.
        new_export: whether `export_path` was written by this run (False
            when the newest export already held the same model).
        already_finished: the run folder's run had ended: nothing was trained.
    """

    export_path: str
    metrics: dict
    samples: list
    history: dict
    model: keras.Model = None
    steps: int = 0
    new_export: bool = False
    already_finished: bool = False


def load_corpora(config):
    """Returns `{"train", "valid", "test"}` → ParallelCorpus (test may
    be None), and `"train_pairs"`.

    Training data read as a stream (`_streamed_corpus`) is a
    `streaming.ShardedCorpus`, not read here: its `"train_pairs"` are
    estimated from its files' sizes (`ShardedCorpus.estimated_pairs`), and
    its lines are checked as training reads them.
    """
    _check_data_flags(config)
    streamed = _streamed_corpus(config)
    if streamed and not config.valid_src:
        raise text.DataError(
            f"{streamed}: a corpus read as a stream holds nothing out; give --valid-src/--valid-tgt"
        )
    if config.prepared and not streamed:
        raise UserError(
            "--prepared: the training data is read into memory and tokenized once already; "
            f"shards and files over {STREAM_ABOVE_MB} MB are read as a stream and can be prepared"
        )
    if streamed:
        train, pairs = streamed, streamed.estimated_pairs()
    elif config.data:
        train = _non_empty(text.read_tsv(config.data), config.data)
    elif config.src:
        train = _non_empty(text.read_parallel(config.src, config.tgt), config.src)
    else:
        corpora = synthetic.translation_corpus(
            seed=config.seed,
            train_size=config.builtin_size,
            valid_size=config.builtin_eval_size,
            test_size=config.builtin_eval_size,
        )
        return {**corpora, "train_pairs": len(corpora["train"])}
    if config.valid_src:
        valid = _non_empty(text.read_parallel(config.valid_src, config.valid_tgt), config.valid_src)
    elif len(train) < 2:
        raise text.DataError(
            f"{config.data or config.src}: one usable pair; give --valid-src/--valid-tgt or more "
            "pairs"
        )
    else:
        train, valid = hold_out(train, fraction=0.02, seed=config.seed)
    if not streamed:
        pairs = len(train)
    test = None
    if config.test_src:
        test = _non_empty(text.read_parallel(config.test_src, config.test_tgt), config.test_src)
    return {"train": train, "valid": valid, "test": test, "train_pairs": pairs}


def _streamed_corpus(config):
    """The training data as a `ShardedCorpus` when it is read as a stream (shards, or one file over
    `STREAM_ABOVE_MB`), else None."""
    spec = config.data or config.src
    if not spec:
        return None
    files = streaming.corpus_files(spec)
    if len(files) == 1 and os.path.getsize(files[0]) <= STREAM_ABOVE_MB * 2**20:
        return None
    return (
        streaming.ShardedCorpus.tsv(spec)
        if config.data
        else streaming.ShardedCorpus.parallel(spec, config.tgt)
    )


def _non_empty(corpus, origin):
    """`corpus`, refused when it has no usable pair."""
    if not len(corpus):
        raise text.DataError(
            f"{origin}: no usable pairs ({corpus.skipped_empty} empty ones skipped)"
        )
    return corpus


def _check_data_flags(config):
    """Refuses flags given without their partner, or data given twice."""
    for first, second in (("src", "tgt"), ("valid_src", "valid_tgt"), ("test_src", "test_tgt")):
        if bool(getattr(config, first)) != bool(getattr(config, second)):
            flags = f"--{first.replace('_', '-')} and --{second.replace('_', '-')}"
            raise text.DataError(f"{flags} must be given together")
    if config.data and config.src:
        raise text.DataError("give the training data either as --data or as --src/--tgt, not both")


def hold_out(corpus, fraction, seed):
    """Splits a deterministic random `fraction` of pairs off as validation (`text.hold_out`)."""
    kept, held = text.hold_out(len(corpus), fraction, seed)

    def subset(indices, origin):
        return text.ParallelCorpus(
            [corpus.sources[i] for i in indices],
            [corpus.targets[i] for i in indices],
            source_origin=f"{corpus.source_origin} ({origin})",
            target_origin=f"{corpus.target_origin} ({origin})",
        )

    train = subset(kept, "training part")
    train = dataclasses.replace(train, skipped_empty=corpus.skipped_empty)
    return train, subset(held, f"{fraction:.0%} held out")


def build_tokenizers(config, train, chief=True, wait_seconds=600):
    """Learns the subword vocabularies (`config.subword`), or reuses those of the run folder.

    With `shared_vocab`, one vocabulary learned over both languages serves
    both. Under several workers only the chief learns them; the others wait
    for the chief's files in the (shared) run folder (`common.wait_for_chief`).
    """
    kind = (
        SentencePieceTokenizer
        if config.subword in ("bpe", "unigram")
        else tokenizers.WordPieceTokenizer
    )
    paths = run_folder.vocabulary_paths(
        config.run_dir, ".model" if kind is SentencePieceTokenizer else ".txt"
    )
    if wait_for_chief(paths, chief, wait_seconds):
        return tuple(kind.load(path, lowercase=config.lowercase) for path in paths)

    def learn(texts):  # a WordPiece vocabulary or a SentencePiece model
        if kind is SentencePieceTokenizer:
            return learn_sentencepiece_model(
                texts, config.vocabulary_size, config.subword, config.lowercase
            )
        return tokenizers.learn_wordpiece_vocabulary(
            texts, config.vocabulary_size, config.lowercase
        )

    sample = vocabulary_sample(config, train)
    try:
        learned = (
            [learn(sample.sources + sample.targets)] * 2
            if config.shared_vocab
            else [learn(sample.sources), learn(sample.targets)]
        )
    except ValueError as error:  # a SentencePiece vocabulary too small for the text's characters
        raise UserError(f"--vocab-size: {error}") from None
    result = tuple(kind(one, lowercase=config.lowercase) for one in learned)
    for tokenizer, path in zip(result, paths):
        tokenizer.save(path)
    return result


def prepared_corpus(config, train, tokenizers, chief, log, wait_seconds=3 * 3600):
    """The streamed `train` tokenized into `config.prepared` (`pipelines.prepared`): by the chief;
    under several workers the others wait for its folder to be complete."""
    if chief:
        return prepared.prepare(train, *tokenizers, config.prepared, log)
    wait_for_chief(
        [os.path.join(config.prepared, prepared.PAIRS_FILE)],
        chief,
        wait_seconds,
        what="prepared shards",
    )
    return prepared.PreparedCorpus.load(config.prepared, prepared.binding(train, *tokenizers))


def vocabulary_sample(config, train):
    """The pairs a vocabulary is learned from: `--vocab-sample` of them, the first of each shard
    (default: all of a corpus in memory, `STREAMED_VOCAB_SAMPLE` of a streamed one)."""
    if isinstance(train, streaming.ShardedCorpus):
        return train.head(config.vocab_sample or STREAMED_VOCAB_SAMPLE)
    if config.vocab_sample is None:
        return train
    return text.ParallelCorpus(
        train.sources[: config.vocab_sample], train.targets[: config.vocab_sample]
    )


# With --jit-compile, batches are padded to lengths that are multiples of this.
XLA_LENGTH_MULTIPLE = 8


def bind_run_folder(config, train, chief=True):
    """`common.bind_run_folder` with the training pairs as `source<TAB>target` lines; a streamed
    corpus with its files' names and sizes instead."""
    if isinstance(train, streaming.ShardedCorpus):
        lines = [
            f"{os.path.basename(path)}\t{os.path.getsize(path)}"
            for shard in train.shards
            for path in shard
        ]
    else:
        lines = (f"{source}\t{target}" for source, target in zip(train.sources, train.targets))
    common.bind_run_folder(config, lines, chief)


def write_test_split(config, corpus):
    """Writes the sentences the job scores as `<run_dir>/test.src` and `test.ref`.

    They are what `keras-attn evaluate` scores an export of this run on
    when it is given no `--src`/`--ref`.

    Returns:
        The two paths.
    """
    paths = [
        run_folder.path(config.run_dir, name)
        for name in (run_folder.TEST_SOURCE, run_folder.TEST_REFERENCE)
    ]
    for path, lines in zip(paths, (corpus.sources, corpus.targets)):
        write_text_atomically(path, "".join(line + "\n" for line in lines))
    return paths


def run(config, log=print):
    """Trains, evaluates and exports; returns a `TranslationResult`.

    Under several workers (`strategy="multi_worker"`) every worker trains;
    only the chief evaluates and exports. A run folder whose run has
    already finished trains nothing, and an export is written only when
    the newest export under `<export_root>/<name>` holds another model
    (or `force_export`).
    """
    started = time.time()
    corpora = load_corpora(config)  # a data error stops the job before it names its run folder
    chief = common.start(config, log)
    train_corpus, valid_corpus = corpora["train"], corpora["valid"]
    test_corpus = valid_corpus if corpora.get("test") is None else corpora["test"]
    streamed, train_pairs = (
        isinstance(train_corpus, streaming.ShardedCorpus),
        corpora["train_pairs"],
    )
    log(_data_line(train_corpus, valid_corpus, train_pairs, streamed))
    os.makedirs(config.run_dir, exist_ok=True)
    bind_run_folder(config, train_corpus, chief)
    test_paths = write_test_split(config, test_corpus) if chief else None
    source_tokenizer, target_tokenizer = build_tokenizers(config, train_corpus, chief)
    log(_vocabulary_line(config, source_tokenizer, target_tokenizer))
    if config.prepared:
        train_corpus = prepared_corpus(
            config, train_corpus, (source_tokenizer, target_tokenizer), chief, log
        )
    length_multiple = XLA_LENGTH_MULTIPLE if config.jit_compile else 1
    if config.jit_compile:
        widths = translation.width_count(config.max_sequence_length, length_multiple)
        log(
            f"XLA: batch lengths rounded up to multiples of {length_multiple} ids: at most "
            f"{widths} x {widths} (source x target) shapes, XLA compiles a program for each"
        )
    make_datasets = _dataset_maker(
        config,
        (source_tokenizer, target_tokenizer),
        (train_corpus, train_pairs),
        valid_corpus,
        length_multiple,
        streamed,
    )
    builtin = not (config.data or config.src or config.tgt)
    dropout = config.dropout if config.dropout is not None else (0.0 if builtin else 0.1)
    preprocessor = TranslationPreprocessor(
        source_tokenizer, target_tokenizer, config.max_sequence_length
    )
    train_started = time.time()
    with train_corpus.reported() if streamed else contextlib.nullcontext():
        result = train(
            config,
            build_model=lambda: build_task(config, preprocessor, dropout),
            make_datasets=make_datasets,
            compile_model=lambda model, total_steps: compile_task(model, config, total_steps),
            callbacks=config.callbacks(),
        )
    train_seconds = time.time() - train_started
    log(common.describe_training(config, result, time.time() - started))
    if not result.is_chief:
        return TranslationResult(
            None,
            {},
            [],
            result.history,
            result.model,
            result.steps,
            already_finished=result.already_finished,
        )
    return _evaluate_and_export(config, result, test_corpus, test_paths, train_seconds, log)


def _data_line(train_corpus, valid_corpus, train_pairs, streamed):
    """What the job trains and validates on, in one line."""
    valid = common.counted(len(valid_corpus.sources), "validation pair")
    if streamed:
        return (
            f"data: about {common.counted(train_pairs, 'training pair')} (from the files' sizes) "
            f"read as a stream from {train_corpus}, {valid}, "
            f"{common.counted(valid_corpus.skipped_empty, 'empty one')} skipped; empty training "
            "pairs are skipped as they come"
        )
    skipped = train_corpus.skipped_empty + valid_corpus.skipped_empty
    return (
        f"data: {common.counted(train_pairs, 'training pair')}, {valid}, "
        f"{common.counted(skipped, 'empty pair')} skipped"
    )


def _vocabulary_line(config, source_tokenizer, target_tokenizer):
    """The vocabularies the job reads with, in one line."""
    pieces = (
        "WordPieces" if config.subword == "wordpiece" else f"SentencePiece {config.subword} pieces"
    )
    if config.shared_vocab:
        tables = "; the encoder's embedding its own" if config.separate_embeddings else ""
        return (
            f"vocabulary: {source_tokenizer.vocabulary_size} {pieces}, shared by both "
            f"languages{tables}"
        )
    return (
        f"vocabularies: {source_tokenizer.vocabulary_size} source, "
        f"{target_tokenizer.vocabulary_size} target {pieces}"
    )


def _dataset_maker(config, tokenizers, train, valid_corpus, length_multiple, streamed):
    """The runner's `make_datasets(global_batch_size)`: the epochs of the training pairs `train`,
    `(corpus, pairs)` (a stream when `streamed`, each worker then reading its own shards), and
    the validation pairs."""
    train_corpus, train_pairs = train
    source_tokenizer, target_tokenizer = tokenizers

    def make_datasets(global_batch_size):
        replicas = global_batch_size // config.batch_size
        pipeline = dict(
            source_tokenizer=source_tokenizer,
            target_tokenizer=target_tokenizer,
            batch_size=global_batch_size,
            max_length=config.max_sequence_length,
            seed=config.seed,
            length_multiple=length_multiple,
            batch_tokens=config.batch_tokens and config.batch_tokens * replicas,
        )
        if streamed:
            train_epochs = translation.streamed_translation_epochs(
                train_corpus, train_pairs, **pipeline
            )
            # Under several workers each reads its own shards, in batches of one replica's share.
            own = dict(pipeline, batch_size=config.batch_size, batch_tokens=config.batch_tokens)
            train_epochs.for_worker = lambda worker, workers: (
                translation.streamed_translation_epochs(
                    train_corpus, -(-train_pairs // workers), **own, worker=worker, workers=workers
                )
            )
        else:
            train_epochs = translation.translation_epochs(
                train_corpus.sources, train_corpus.targets, **pipeline
            )
        return (
            train_epochs,
            translation.translation_dataset(
                valid_corpus.sources, valid_corpus.targets, shuffle=False, **pipeline
            ),
        )

    return make_datasets


def _evaluate_and_export(config, result, test_corpus, test_paths, train_seconds, log):
    """The chief's end of the job: the test split's scores, the export, the samples."""
    model = result.model
    translator = serving.Translator(model, compiled_search=config.compiled_search)
    metrics = evaluate(translator, test_corpus, config.beam_width)
    metrics.update(parameters=model.count_params(), train_seconds=round(train_seconds))
    log(f"test: {evaluation.format_scores(metrics)} ({test_paths[0]}, {test_paths[1]})")
    path, new_export = None, False
    if config.export:
        metadata = {
            "test_src": os.path.abspath(test_paths[0]),
            "test_ref": os.path.abspath(test_paths[1]),
        }
        path, new_export = serving.export_if_changed(
            translator, config.export_root, config.name, metadata, force=config.force_export
        )
    samples = list(
        zip(test_corpus.sources[: config.samples], metrics["hypotheses"][: config.samples])
    )
    return TranslationResult(
        export_path=path,
        metrics=metrics,
        samples=samples,
        history=result.history,
        model=model,
        steps=result.steps,
        new_export=new_export,
        already_finished=result.already_finished,
    )


def load_run(run_dir, weights=None):
    """The task of a translation run folder as it trained: its
    settings, vocabularies and best weights.

    Args:
        run_dir: a run folder of `keras-attn train transformer` or `seq2seq`.
        weights: another weights file of the run (e.g. one epoch's) instead of its best weights.

    Returns:
        A `Seq2SeqLM` with its `TranslationPreprocessor`.

    Raises:
        UserError: not a translation run folder, or one without best weights yet.
    """
    settings = run_folder.read_settings(run_dir)
    if not settings or "subword" not in settings:
        raise UserError(f"{run_dir}: not a run folder of keras-attn train transformer or seq2seq")
    make = Seq2SeqConfig if "cell" in settings else TranslationConfig
    config = make(
        run_dir=run_dir, **{k: v for k, v in settings.items() if k in make.__dataclass_fields__}
    )
    # the folder's own
    source, target = build_tokenizers(config, train=None, chief=False, wait_seconds=0)
    preprocessor = TranslationPreprocessor(source, target, config.max_sequence_length)
    best = weights or run_folder.path(run_dir, run_folder.BEST_WEIGHTS)
    if not os.path.isfile(best):
        raise UserError(f"{best}: no such weights file (has the run finished an epoch?)")
    task = build_task(config, preprocessor, dropout=0.0)
    task.load_weights(best)
    return task


def export_to_ctranslate2(model_dir, output_dir, quantization=None, force=False):
    """Writes a Transformer's weights as a CTranslate2 model folder that translates strings.

    Args:
        model_dir: a run folder (its best weights) or a translation export
            (`saved_models/<name>/<version>`).
        output_dir: the folder to write (`load_ctranslate2` translates with it:
            the preprocessor's Keras config is kept beside CTranslate2's files).
        quantization: `None` (float32) or one of `config.CT2_QUANTIZATIONS`.
        force: replace an existing `output_dir`.

    Returns:
        `output_dir`.
    """
    from keras_attn.serving.ctranslate2_export import export_ctranslate2
    from keras_attn.serving.translator import load_task
    from keras_attn.serving.versions import SAVED_MODEL, is_saved_model_folder

    if is_saved_model_folder(model_dir):
        task = load_task(model_dir)
    elif run_folder.is_run_folder(model_dir):
        task = load_run(model_dir)
    else:
        raise UserError(
            f"{model_dir}: neither a run folder (no {run_folder.SETTINGS}) nor an export "
            f"(no {SAVED_MODEL})"
        )
    preprocessor = task.preprocessor
    return export_ctranslate2(
        task.backbone,
        preprocessor.source_tokenizer.vocabulary,
        preprocessor.target_tokenizer.vocabulary,
        output_dir,
        quantization,
        force,
        preprocessor=preprocessor,
    )


def build_task(config, preprocessor, dropout):
    """The `Seq2SeqLM` a translation config trains: its family's preset, sized by `preprocessor`."""
    return Seq2SeqLM.from_preset(
        config.preset, preprocessor, family=config.family, **config.backbone_arguments(dropout)
    )


def translate_all(translator, sentences, beam_width, batch_size=64):
    """Translates a list of strings with the in-process translator."""
    outputs = []
    for start in range(0, len(sentences), batch_size):
        batch = np.array(sentences[start : start + batch_size], dtype=object)
        result = translator.translate(batch, np.int32(beam_width))
        outputs.extend(t.decode("utf-8") for t in result["translation"].numpy())
    return outputs


def evaluate(translator, corpus, beam_width):
    """`evaluation.translation_scores` of translations of `corpus`, with the `hypotheses`."""
    hypotheses = translate_all(translator, corpus.sources, beam_width)
    return {**evaluation.translation_scores(hypotheses, corpus.targets), "hypotheses": hypotheses}


def compile_task(model, config, total_steps):
    """Compiles the job's `Seq2SeqLM` with its defaults and the
    config's schedule and label smoothing.

    `"cosine"`: warm-up to `learning_rate`, cosine decay to the run's end
    (`total_steps`). `"inverse_sqrt"`: `Seq2SeqLM.compile`'s own, the paper's
    schedule with its peak, `learning_rate`, after `warmup_steps`.
    """
    learning_rate = config.learning_rate
    if config.schedule == "cosine":
        learning_rate = warmup_cosine(config.learning_rate, config.warmup_steps, total_steps)
    model.compile(
        learning_rate=learning_rate,
        warmup_steps=config.warmup_steps,
        label_smoothing=config.label_smoothing,
    )
