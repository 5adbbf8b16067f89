"""The BERT jobs: pretraining (MLM + NSP) and fine-tuning a classifier.

`pretrain(PretrainConfig(...))` is what `keras-attn pretrain bert` runs:
documents (files, or the built-in generated corpus) → an uncased
WordPiece vocabulary → pairs and dynamic masks in tf.data → the runner
(every strategy, backups, resume) → an export with `fill_mask` and
`encode`. `finetune(FinetuneConfig(...))` is what `keras-attn finetune`
runs: a pretrained export's backbone → a classifier trained on TSV files →
test accuracy → an export with `classify` as well.
"""

import dataclasses
import itertools
import os
import time

from keras_attn import run_folder, serving
from keras_attn.checkpoints.pretrained_bert import load_backbone, read_pretrained
from keras_attn.config import STREAM_ABOVE_MB, STREAMED_VALID_DOCUMENTS, STREAMED_VOCAB_SAMPLE
from keras_attn.errors import UserError
from keras_attn.jobs import common
from keras_attn.jobs.common import bind_run_folder, wait_for_chief
from keras_attn.models import BertClassifier, BertPretrainer
from keras_attn.presets import PRESETS
from keras_attn.schedules import WarmupLinearDecay
from keras_attn.serving.bert import BertServer
from keras_attn.training.runner import train
from pipelines import (
    classification,
    document_stream,
    documents,
    pretraining,
    synthetic_documents,
    text,
    tokenizers,
)
from pipelines.preprocessors import BertPreprocessor


def finetune_learning_rate(pretrained):
    """The default peak learning rate to fine-tune a backbone (`read_pretrained`'s settings).

    1e-3 for one as narrow as the tiny preset (the default pretraining's): 1e-4, BERT's
    order of magnitude, left it near chance on an 8-label task of 450 rows after 3 epochs
    (12.0% against 52.0% with 1e-3; 1,800 rows: 63.0% against 100%; single runs).
    1e-4 for the wider ones.
    """
    return 1e-3 if pretrained["hidden_dim"] <= PRESETS["bert"]["tiny"]["hidden_dim"] else 1e-4


@dataclasses.dataclass
class BertResult:
    """What a BERT job gives back.

    Attributes:
        export_path: the export holding the model (None without export,
            and on workers other than the chief).
        metrics: pretraining: the validation `PretrainingMetrics`;
            fine-tuning: `test_accuracy` (or `valid_accuracy` without a
            test file) and `test_examples`.
        history: per-epoch logs of this process's training.
        model: the Keras model with its best validation weights.
        steps: optimizer steps of the whole run.
        new_export: whether `export_path` was written by this run.
        already_finished: the run folder's run had ended: nothing trained.
        server: the `BertServer` exported (chief only).
    """

    export_path: str
    metrics: dict
    history: dict
    model: object = None
    steps: int = 0
    new_export: bool = False
    already_finished: bool = False
    server: object = None


# What `pretrain bert` suggests trying on its export. On the built-in corpus, a sentence of it
# whose masked word its neighbours decide, which the default pretraining learns to answer (the
# words its nouns decide, such as "the [MASK] knife", it leaves at chance).
FILL_MASK_EXAMPLES = {
    "builtin": "The sharp knife is [MASK] to the heavy pan.",
    "data": "the [MASK] sat on the mat.",
}


def load_documents(config):
    """The `documents.Documents` of the run: `config.data`, or the built-in corpus."""
    if config.data:
        return documents.read_documents(config.data, config.one_document_per_file)
    generated = synthetic_documents.document_corpus(config.builtin_documents, seed=config.seed)
    return documents.Documents(
        generated, origin=f"built-in corpus ({config.builtin_documents} documents)"
    )


def streamed_files(config):
    """The document files when they are read as a stream (over
    `STREAM_ABOVE_MB` of text in all), else None.
    """
    if not config.data:
        return None
    files = documents.document_files(
        config.data if isinstance(config.data, list) else [config.data]
    )
    try:
        size = sum(text.text_bytes(path) for path in files)
    except OSError:
        return None  # reading them says what is wrong, in one line
    return files if size > STREAM_ABOVE_MB * 2**20 else None


def held_out_documents(config, files):
    """The validation documents of a streamed corpus: the first
    `STREAMED_VALID_DOCUMENTS` of its first file.
    """
    counts = documents.Documents([])
    valid = list(
        itertools.islice(
            documents.file_documents(files[0], counts, config.one_document_per_file),
            STREAMED_VALID_DOCUMENTS,
        )
    )
    if len(valid) < 2:
        raise text.DataError(
            f"{files[0]}: {len(valid)} documents; the first file of a streamed corpus gives the "
            f"{STREAMED_VALID_DOCUMENTS} validation documents"
        )
    return valid


def vocabulary_sample(config, files, held_out):
    """Yields the sentences a streamed corpus's vocabulary is learned from, as they are read: the
    first of every file, `STREAMED_VOCAB_SAMPLE` in all (the held-out documents left out)."""
    each = -(-STREAMED_VOCAB_SAMPLE // len(files))
    for path in files:
        found = documents.file_documents(
            path, documents.Documents([]), config.one_document_per_file
        )
        skipped = held_out[1] if path == held_out[0] else 0
        yield from itertools.islice(
            (
                sentence
                for document in itertools.islice(found, skipped, None)
                for sentence in document
            ),
            each,
        )


def build_tokenizer(config, sentences, chief=True):
    """Learns the uncased WordPiece vocabulary, or reuses the run folder's (`vocab.txt`)."""
    path = run_folder.path(config.run_dir, run_folder.VOCABULARY)
    if wait_for_chief([path], chief):
        return tokenizers.WordPieceTokenizer.load(path, lowercase=True)
    vocabulary = tokenizers.learn_wordpiece_vocabulary(
        sentences, config.vocabulary_size, lowercase=True
    )
    tokenizer = tokenizers.WordPieceTokenizer(vocabulary, lowercase=True)
    tokenizer.save(path)
    return tokenizer


def _document_lines(docs):
    """Documents as lines for the run folder's data hash: sentences, a
    blank line after each document.
    """
    for document in docs:
        yield from document
        yield ""


def with_lengths(config):
    """`config` with its defaults for `max_sequence_length` and `max_predictions` filled in.

    `max_sequence_length`: 128 on given documents, 64 on the built-in ones (short);
    `max_predictions`: `pipelines.pretraining.default_max_predictions`.
    """
    max_length = config.max_sequence_length or (128 if config.data else 64)
    max_predictions = config.max_predictions or pretraining.default_max_predictions(
        config.mask_rate, max_length
    )
    return dataclasses.replace(
        config, max_sequence_length=max_length, max_predictions=max_predictions
    )


def pretrain(config, log=print, callbacks=()):
    """Pretrains BERT (MLM + NSP), evaluates on held-out documents, exports; returns a `BertResult`.

    `callbacks` are Keras callbacks for the training loop (one that sets
    `model.stop_training` ends the run early, e.g. at a time budget).
    """
    started = time.time()
    config = with_lengths(config)
    files = streamed_files(config)
    if files:  # documents read as a stream, validation held out of the first file
        chief, tokenizer, corpus, valid_docs = _streamed_documents(config, files, log)
    else:
        chief, tokenizer, corpus, valid_docs = _read_documents(config, log)
    valid_corpus = pretraining.tokenize_documents(valid_docs, tokenizer)
    # the pipeline's, the model's and the export's
    preprocessor = BertPreprocessor(tokenizer, config.max_sequence_length)

    def build_model():
        return BertPretrainer.from_preset(
            config.preset, preprocessor, norm_first=config.norm_first, dropout=config.dropout
        )

    def compile_model(model, total_steps):
        schedule = WarmupLinearDecay(
            config.learning_rate, min(config.warmup_steps, total_steps // 2), total_steps
        )
        model.compile(
            learning_rate=schedule, weight_decay=config.weight_decay, nsp_weight=config.nsp_weight
        )

    with document_stream.reported():
        result = train(
            config,
            build_model=build_model,
            make_datasets=_pretraining_datasets(config, corpus, valid_corpus, preprocessor),
            compile_model=compile_model,
            callbacks=callbacks,
        )
    model = result.model
    log(common.describe_training(config, result, time.time() - started))
    # As every epoch was validated (every worker takes part): the best epoch's numbers.
    metrics = {name: value for name, value in result.evaluate().items() if name != "loss"}
    if not result.is_chief:
        return BertResult(
            None, {}, result.history, model, result.steps, already_finished=result.already_finished
        )
    log("validation: " + ", ".join(f"{name} {value:.4f}" for name, value in metrics.items()))
    server = BertServer(model, max_predictions=config.max_predictions)
    path, new_export = _export(config, server)
    return BertResult(
        path,
        metrics,
        result.history,
        model,
        result.steps,
        new_export,
        result.already_finished,
        server,
    )


def _streamed_documents(config, files, log):
    """`(chief, tokenizer, (files, held out), validation documents)` of documents read as a
    stream, the first ones of the first file held out to validate."""
    valid_docs = held_out_documents(config, files)
    held_out = (files[0], len(valid_docs))
    chief = common.start(config, log)
    log(
        f"data: {len(files)} files, "
        f"{sum(text.text_bytes(path) for path in files) / 2**20:.0f} MB of text, read as a "
        f"stream; the first {len(valid_docs)} documents of {files[0]} validate"
    )
    os.makedirs(config.run_dir, exist_ok=True)
    bind_run_folder(
        config, (f"{os.path.basename(path)}\t{os.path.getsize(path)}" for path in files), chief
    )
    with document_stream.reported():
        tokenizer = build_tokenizer(config, vocabulary_sample(config, files, held_out), chief)
    log(
        f"vocabulary: {len(tokenizer.vocabulary)} uncased WordPieces (from the first "
        "sentences of every file)"
    )
    return chief, tokenizer, (files, held_out), valid_docs


def _read_documents(config, log):
    """`(chief, tokenizer, the tokenized training corpus, validation documents)` of documents
    read whole (a data error stops the job before it names its run folder)."""
    read = load_documents(config)
    train_docs, valid_docs = documents.hold_out_documents(
        read.documents, config.valid_fraction, seed=config.seed, minimum=2
    )
    chief = common.start(config, log)
    log(
        f"data: {read.summary()}; {len(train_docs)} training, {len(valid_docs)} validation "
        "documents"
    )
    os.makedirs(config.run_dir, exist_ok=True)
    bind_run_folder(config, _document_lines(train_docs), chief)
    tokenizer = build_tokenizer(config, [s for d in train_docs for s in d], chief)
    train_corpus = pretraining.tokenize_documents(train_docs, tokenizer)
    dropped = train_corpus.dropped_sentences
    log(
        f"vocabulary: {len(tokenizer.vocabulary)} uncased WordPieces; "
        f"{train_corpus.num_tokens} training tokens"
        + (f", {dropped} sentences without tokens dropped" if dropped else "")
    )
    return chief, tokenizer, train_corpus, valid_docs


def _pretraining_datasets(config, train, valid_corpus, preprocessor):
    """The runner's `make_datasets(global_batch_size)`: epochs of NSP pairs with masks from
    `train` (a tokenized corpus, or `(files, held out)` read as a stream) and fixed validation
    pairs and masks (epoch -1: every epoch is scored on the same)."""
    settings = dict(
        max_predictions=config.max_predictions,
        seed=config.seed,
        mask_rate=config.mask_rate,
        whole_word=config.whole_word,
        short_sequence_probability=config.short_sequence_probability,
    )
    length = config.max_sequence_length
    streamed = isinstance(train, tuple)

    def make_datasets(global_batch_size):
        if streamed:
            files, held_out = train
            pairs = config.pairs_per_epoch or document_stream.estimated_pairs(
                files, preprocessor.tokenizer, length
            )
        else:
            pairs = config.pairs_per_epoch or pretraining.pairs_per_epoch(train, length)
        if pairs < global_batch_size:
            raise UserError(
                f"an epoch has {pairs} pairs, fewer than the global batch {global_batch_size}: "
                "give more data, --pairs-per-epoch or a smaller --batch-size"
            )
        valid_pairs = max(global_batch_size, pretraining.pairs_per_epoch(valid_corpus, length))
        try:
            if streamed:
                train_epochs = document_stream.streamed_pretraining_epochs(
                    files,
                    preprocessor,
                    global_batch_size,
                    pairs,
                    held_out=held_out,
                    one_document_per_file=config.one_document_per_file,
                    **settings,
                )
            else:
                train_epochs = pretraining.pretraining_epochs(
                    train, preprocessor, batch_size=global_batch_size, num_pairs=pairs, **settings
                )
            valid = pretraining.pretraining_dataset(
                valid_corpus,
                preprocessor,
                batch_size=global_batch_size,
                num_pairs=valid_pairs,
                epoch=-1,
                **settings,
            )
        except ValueError as error:  # too few documents, or none of two sentences
            raise text.DataError(str(error)) from None
        return train_epochs, valid

    return make_datasets


def finetune(config, log=print):
    """Fine-tunes a pretrained BERT (export or run folder) as a
    classifier; returns a `BertResult`.
    """
    started = time.time()
    if not config.model_dir or not config.train:
        raise UserError("finetune needs a pretrained export or run folder (MODEL_DIR) and --train")
    try:
        tokenizer, pretrained = read_pretrained(config.model_dir)  # checked before any training
    except ValueError as error:
        raise UserError(str(error)) from None
    max_length = config.max_sequence_length or pretrained["max_length"]
    if max_length > pretrained["max_sequence_length"]:
        raise UserError(
            f"--max-length {max_length}: the pretrained model has "
            f"{pretrained['max_sequence_length']} positions"
        )
    learning_rate = config.learning_rate or finetune_learning_rate(pretrained)
    config = dataclasses.replace(
        config, max_sequence_length=max_length, learning_rate=learning_rate
    )
    # The data first: an error in it stops the job before it names its run folder.
    train_data, valid_data, test_data, label_names, data_line = _labelled_data(config)
    chief = common.start(config, log)
    log(data_line)
    os.makedirs(config.run_dir, exist_ok=True)
    lines = (
        f"{label}\t{a}\t{b}"
        for label, a, b in zip(
            train_data.labels, train_data.texts_a, train_data.texts_b or [""] * len(train_data)
        )
    )
    bind_run_folder(config, lines, chief)
    label_ids = {label: index for index, label in enumerate(label_names)}
    preprocessor = BertPreprocessor(tokenizer, max_length)

    def dataset(data, batch_size, shuffle):
        return classification.classification_dataset(
            data,
            label_ids,
            preprocessor,
            batch_size,
            shuffle=shuffle,
            seed=config.seed,
            drop_remainder=shuffle,
        )

    def make_datasets(global_batch_size):
        if len(train_data) < global_batch_size:
            raise UserError(
                f"{config.train}: {len(train_data)} examples, fewer than the global batch "
                f"{global_batch_size}: give more examples or a smaller --batch-size"
            )
        return dataset(train_data, global_batch_size, True), dataset(
            valid_data, global_batch_size, False
        )

    def build_model():
        backbone = load_backbone(config.model_dir, dropout=config.dropout)
        return BertClassifier(
            backbone, len(label_names), dropout=config.dropout, preprocessor=preprocessor
        )

    def compile_model(model, total_steps):
        schedule = WarmupLinearDecay(
            config.learning_rate, int(config.warmup_fraction * total_steps), total_steps
        )
        model.compile(learning_rate=schedule, weight_decay=config.weight_decay)

    result = train(
        config, build_model=build_model, make_datasets=make_datasets, compile_model=compile_model
    )
    model = result.model
    log(common.describe_training(config, result, time.time() - started))
    # Scored as every epoch was validated (every worker takes part):
    # valid gives the best epoch's accuracy.
    scored, split = (test_data, "test") if test_data else (valid_data, "valid")
    accuracy = result.evaluate(
        dataset(test_data, result.global_batch_size, False) if test_data else None
    )["accuracy"]
    if not result.is_chief:
        return BertResult(
            None, {}, result.history, model, result.steps, already_finished=result.already_finished
        )
    metrics = {f"{split}_accuracy": accuracy, f"{split}_examples": len(scored)}
    log(f"{split}: accuracy {accuracy:.4f} on {len(scored)} examples")
    server = BertServer(model, label_names=label_names, pairs=train_data.texts_b is not None)
    path, new_export = _export(config, server)
    return BertResult(
        path,
        metrics,
        result.history,
        model,
        result.steps,
        new_export,
        result.already_finished,
        server,
    )


def _labelled_data(config):
    """`(train, valid, test, label names, what they are in one line)` of the config's labelled
    files: valid held out of train without `--valid`; test None without `--test`; each split
    scored after training checked against training's labels before it."""
    train_data, valid_data, test_data = (
        classification.read_labelled_tsv(path) if path else None
        for path in (config.train, config.valid, config.test)
    )
    # as the files hold them
    read = [data for data in (train_data, valid_data, test_data) if data is not None]
    if valid_data is None:
        train_data, valid_data = hold_out_examples(train_data, config.seed)
    label_names = sorted(set(train_data.labels))
    if len(label_names) < 2:
        raise text.DataError(
            f"{config.train}: one label only ({label_names[0]}); a classifier needs two or more"
        )
    label_ids = {label: index for index, label in enumerate(label_names)}
    for data in (valid_data, test_data):
        if data is not None:
            classification.check_like_training(data, label_ids, train_data)
    line = (
        f"data: {len(train_data)} training, {len(valid_data)} validation"
        + (f", {len(test_data)} test" if test_data else "")
        + f" examples; labels {', '.join(label_names)}"
        + "".join(
            f"; {data.origin}: {data.skipped_empty} blank or empty-text line(s) skipped"
            for data in read
            if data.skipped_empty
        )
    )
    return train_data, valid_data, test_data, label_names, line


def hold_out_examples(data, seed, fraction=0.1):
    """Splits a seeded random `fraction` of labelled examples off as validation (`text.hold_out`):
    what `finetune` validates on without `--valid`.

    Returns:
        `(kept, held_out)`: two `classification.LabelledTexts`.

    Raises:
        DataError: fewer than 10 examples.
    """
    if len(data) < 10:
        raise text.DataError(
            f"{data.origin}: {len(data)} examples; give --valid or 10 examples or more"
        )
    kept, held = text.hold_out(len(data), fraction, seed)

    def subset(indices, origin):
        pick = lambda values: None if values is None else [values[i] for i in indices]  # noqa: E731
        return classification.LabelledTexts(
            pick(data.labels), pick(data.texts_a), pick(data.texts_b), 0, origin
        )

    return subset(kept, data.origin), subset(held, f"{data.origin} ({fraction:.0%} held out)")


def _export(config, server):
    if not config.export:
        return None, False
    return serving.export_if_changed(
        server, config.export_root, config.name, force=config.force_export
    )
