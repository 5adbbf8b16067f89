"""BERT-mini pretraining on real text against keras-hub's BertMaskedLM, then SST-2 fine-tuning.

    python -m benchmarks.bert_pretraining                    # about 65 minutes: all of the below
    python -m benchmarks.bert_pretraining --only speed       # about 5 minutes
    python -m benchmarks.bert_pretraining --minutes 2 --sst2-train 500   # a quick look
    python -m benchmarks.bert_pretraining --only pretrain --models keras-attn --steps 500 \
        --minutes 10
        # a fixed number of steps (no speed section), e.g. to compare two versions of the code
    python -m benchmarks.bert_pretraining --only sst2 --pretrained runs/b/ours/export/bert/1 \
        --run-dir runs/sst2-b
        # SST-2 only, from an earlier pretraining's export and from scratch

1. Speed: training tokens/s of our `BertPretrainer` (MLM + NSP) and of
   keras-hub's `BertMaskedLM` (MLM only), both preset mini (L4/H256/A4),
   sequence 128, batch 32, in float32 and mixed_bfloat16, the same
   `tf.function` training step for both, alternated twice in this process.
2. Quality at a time budget: our `keras-attn pretrain bert` job
   (`keras_attn.jobs.bert.pretrain`) and keras-hub's `BertMaskedLM`
   (`fit`), each given `--minutes` of training. Each model's schedule
   (linear warm-up over `--warmup-fraction`, 10%, of its steps, then
   linear decay; ours sums MLM and `--nsp-weight` times NSP) spans the
   steps its measured step time fits in 90% of the budget, and a callback
   stops either at the budget. Both train on the same masked pairs (our
   tf.data pipeline: dynamic masks of `--mask-rate` (15%), 80/10/10, a new
   mask each epoch),
   with the same vocabulary, optimizer (AdamW) and peak learning rate.
   Scored on the WikiText-2 test articles: masked-token accuracy and
   perplexity over the same three draws of 15% masks for both, and our
   next-sentence accuracy (keras-hub has no NSP).
3. SST-2: our classifier fine-tuned (`keras_attn.jobs.bert.finetune`) from
   that pretraining and from the same architecture and vocabulary with
   random weights; a random sample of `--sst2-train` training rows, dev for
   the best epoch, the labelled test split reported once.

Data, read from ../shared/data and never copied into the project (temporary
files only): training documents are the WikiText-2 validation articles
(tokens version; `@-@`, `@,@`, `@.@` joined, `<unk>` dropped) and the 65 State
of the Union addresses (one document each; six files are Latin-1, read as
such), or a folder of one document a file (`--train-data`); the job holds 5%
of them out for validation. WikiText-2's test split
(raw version, its articles as documents) is only scored.
"""

import argparse
import gzip
import json
import os
import random
import re
import sys
import tempfile
import time
import zipfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.measures import describe_cpu  # noqa: E402
from keras_attn.config import FinetuneConfig, PretrainConfig  # noqa: E402
from keras_attn.jobs import bert as bert_job  # noqa: E402
from keras_attn.losses import PretrainingLoss, token_cross_entropy  # noqa: E402
from keras_attn.metrics import PretrainingMetrics  # noqa: E402
from keras_attn.models import BertBackbone, BertMaskedLM, BertPretrainer  # noqa: E402
from keras_attn.models.bert import PRESETS  # noqa: E402
from keras_attn.optimizers import adamw  # noqa: E402
from keras_attn.schedules import WarmupLinearDecay  # noqa: E402
from keras_attn.serving import export  # noqa: E402
from keras_attn.serving.bert import BertServer  # noqa: E402
from pipelines import documents, pretraining  # noqa: E402
from pipelines.preprocessors import BertPreprocessor  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SST2_BATCH = 32
_TITLE = re.compile(r"^ = [^=].* =$")  # a WikiText article's title line


# --- data ------------------------------------------------------------------


def wikitext_articles(path):
    """WikiText lines grouped by article (a top-level ` = Title = ` starts one)."""
    articles = []
    with gzip.open(path, "rt", encoding="utf-8") as file:
        for line in file.read().splitlines():
            line = line.rstrip()
            if _TITLE.match(line):
                articles.append([])
            if articles and line.strip():
                articles[-1].append(line)
    return articles


def clean_wikitext(line):
    line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    return re.sub(r" ?<unk>", "", line)


def write_training_documents(folder):
    """Writes the default training documents as files, one document
    each: WikiText-2 valid and the addresses.
    """
    train = Path(folder, "train")
    train.mkdir()
    for index, article in enumerate(
        wikitext_articles(DATA / "wikitext-2" / "tokens" / "valid.txt.gz")
    ):
        (train / f"wikitext-{index:03d}.txt").write_text(
            "\n".join(map(clean_wikitext, article)) + "\n"
        )
    with zipfile.ZipFile(DATA / "state-union" / "state_union.zip") as archive:
        for name in archive.namelist():
            if name.endswith(".txt"):
                raw = archive.read(name)
                try:
                    content = raw.decode("utf-8")
                except UnicodeDecodeError:
                    content = raw.decode("latin-1")
                (train / f"sotu-{Path(name).name}").write_text(content)
    return train


def write_test_documents(folder):
    """Writes the WikiText-2 test articles as files, one document each."""
    test = Path(folder, "test")
    test.mkdir()
    for index, article in enumerate(
        wikitext_articles(DATA / "wikitext-2" / "raw" / "wiki.test.raw.gz")
    ):
        (test / f"wikitext-{index:03d}.txt").write_text(
            "\n".join(line.strip() for line in article) + "\n"
        )
    return test


def write_sst2(folder, train_rows, seed):
    """SST-2 as headerless TSVs: a random sample of the training rows, dev and test whole."""

    def rows(path):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as file:
            return [line for line in file.read().splitlines()[1:] if line.strip()]

    train = rows(DATA / "sst2" / "train.tsv.gz")
    random.Random(seed).shuffle(train)
    paths = {}
    for split, lines in (
        ("train", train[:train_rows]),
        ("dev", rows(DATA / "sst2" / "dev.tsv")),
        ("test", rows(DATA / "sst2" / "test.tsv")),
    ):
        paths[split] = Path(folder, f"sst2-{split}.tsv")
        paths[split].write_text("\n".join(lines) + "\n")
    return paths


# --- models ------------------------------------------------------------------


def keras_hub_model(vocabulary_size, preset, max_length, dropout=0.1):
    import keras_hub

    settings = PRESETS[preset]
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size,
        settings["num_layers"],
        settings["num_heads"],
        settings["hidden_dim"],
        4 * settings["hidden_dim"],
        dropout=dropout,
        max_sequence_length=max_length,
    )
    return keras_hub.models.BertMaskedLM(backbone)


def keras_hub_inputs(features):
    return {**features, "padding_mask": tf.not_equal(features["token_ids"], 0)}


def masked_lm_loss(targets, logits):
    """Mean cross-entropy over the masked tokens (keras-hub's MLM objective)."""
    weights = tf.cast(targets["mlm_weights"], tf.float32)
    losses = token_cross_entropy(targets["mlm_labels"], logits)
    return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


# --- 1. speed ------------------------------------------------------------------


def training_step(model, loss, adapt=lambda x: x, jit_compile=False):
    optimizer = adamw(1e-4)

    @tf.function(jit_compile=jit_compile)
    def step(features, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(adapt(features), training=True))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(value, variables), variables))
        return value

    return step


def measure_speed(batch, vocabulary_size, preset, max_length, xla_precision, repeats=2, steps=8):
    """Tokens/s of both models' training steps, float32 and mixed_bfloat16, alternated.

    Under `xla_precision`, each model's step is also timed compiled with XLA.
    """
    features, labels = batch
    tokens = int(np.prod(features["token_ids"].shape))
    real = int(np.count_nonzero(features["token_ids"]))
    results = {}
    for precision in ("float32", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(precision)
        ours = BertPretrainer(BertBackbone(vocabulary_size, preset, max_sequence_length=max_length))
        theirs = keras_hub_model(vocabulary_size, preset, max_length)
        cases = {
            "keras-attn": training_step(ours, PretrainingLoss()),
            "keras-hub": training_step(theirs, masked_lm_loss, keras_hub_inputs),
        }
        if precision == xla_precision:
            cases["keras-attn XLA"] = training_step(ours, PretrainingLoss(), jit_compile=True)
            cases["keras-hub XLA"] = training_step(
                theirs, masked_lm_loss, keras_hub_inputs, jit_compile=True
            )
        for step in cases.values():
            for _ in range(2):
                step(features, labels)  # trace, warm up
        times = {name: [] for name in cases}
        for _ in range(repeats):
            for name, step in cases.items():
                started = time.perf_counter()
                for _ in range(steps):
                    float(step(features, labels))
                times[name].append((time.perf_counter() - started) / steps)
        for name, values in times.items():
            seconds = min(values)
            model, _, compiled = name.partition(" ")
            results[f"{model} {precision}" + (" XLA" if compiled else "")] = {
                "ms_per_step": [round(1000 * v, 1) for v in values],
                "tokens_per_s": round(tokens / seconds),
                "real_tokens_per_s": round(real / seconds),
            }
            print(
                f"speed {name:14s} {precision:15s} {1000 * seconds:7.1f} ms/step "
                f"{tokens / seconds:8.0f} tokens/s ({real / seconds:.0f} real)",
                flush=True,
            )
    keras.mixed_precision.set_global_policy("float32")
    return results


# --- 2. pretraining at a time budget -----------------------------------------------


class TimeBudget(keras.callbacks.Callback):
    """Stops training once `seconds` have passed since training began."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.started = None

    def on_train_begin(self, logs=None):
        self.started = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if time.time() - self.started > self.seconds:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self.elapsed = time.time() - self.started


def plan_steps(seconds_per_step, budget_seconds, pairs_per_epoch, batch_size):
    """Epochs and pairs per epoch so that the schedule fills 90% of the budget (as many epochs as it
    takes, each of the same number of steps)."""
    steps = max(1, int(0.9 * budget_seconds / seconds_per_step))
    epochs = -(-steps // max(1, min(steps, pairs_per_epoch // batch_size)))
    return epochs, round(steps / epochs) * batch_size


def warmup_steps(args, steps):
    """Both models warm up over `--warmup-fraction` of their planned steps."""
    return max(1, round(steps * args.warmup_fraction))


TEST_MAX_PREDICTIONS = 20  # 15% of 128 tokens, BERT's setting


def test_batches(corpus, preprocessor, args, draws=3):
    """The test articles' pairs with `draws` different 15% masks (fixed: epochs -1, -2, ...).

    Whatever `--mask-rate` and `--max-predictions` the models trained with,
    they are scored on the same masks: 15%, at most `TEST_MAX_PREDICTIONS`.
    """
    settings = dict(
        batch_size=64, max_predictions=TEST_MAX_PREDICTIONS, seed=1234, drop_remainder=False
    )
    return [
        pretraining.pretraining_dataset(corpus, preprocessor, epoch=-1 - draw, **settings)
        for draw in range(draws)
    ]


def score(predict, batches):
    """MLM loss, accuracy and perplexity (and NSP accuracy when `predict` gives it)."""
    metrics = PretrainingMetrics()
    has_nsp = True
    for dataset in batches:
        for features, labels in dataset:
            outputs = predict(features)
            if not isinstance(outputs, dict):
                has_nsp = False
                outputs = {"mlm": outputs, "nsp": tf.zeros([tf.shape(outputs)[0], 2])}
            metrics.update_state(labels, outputs)
    result = {name: float(value) for name, value in metrics.result().items()}
    if not has_nsp:
        result.pop("nsp_loss"), result.pop("nsp_accuracy")
    result["masked_tokens"] = int(metrics.sums["mlm_count"].numpy())
    return result


def pretrain_ours(args, train_folder, run_dir, seconds_per_step, pairs_per_epoch, jit_compile):
    epochs, pairs = plan_steps(
        seconds_per_step, 60 * args.minutes, pairs_per_epoch, args.batch_size
    )
    steps = epochs * (pairs // args.batch_size)
    budget = TimeBudget(60 * args.minutes)
    config = PretrainConfig(
        run_dir=str(run_dir),
        data=[str(train_folder)],
        one_document_per_file=True,
        preset=args.preset,
        max_sequence_length=args.max_length,
        max_predictions=args.max_predictions,
        vocabulary_size=args.vocab_size,
        pairs_per_epoch=pairs,
        epochs=epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=warmup_steps(args, steps),
        nsp_weight=args.nsp_weight,
        dropout=args.dropout,
        norm_first=args.norm_first,
        mask_rate=args.mask_rate,
        mixed_precision=args.precision == "mixed_bfloat16",
        export_root=str(run_dir / "export"),
        verbose=2,
        backup_every=0,
        seed=args.seed,
        jit_compile=jit_compile,
    )
    print(f"keras-attn: {epochs} epochs of {pairs} pairs ({steps} steps) planned", flush=True)
    result = bert_job.pretrain(
        config, log=lambda line: print("  " + line, flush=True), callbacks=[budget]
    )
    keras.mixed_precision.set_global_policy("float32")
    return result, {
        "planned_steps": steps,
        "steps": result.steps,
        "train_seconds": round(budget.elapsed),
        "history": result.history,
    }


def pretrain_keras_hub(
    args, corpus, valid_corpus, preprocessor, seconds_per_step, pairs_per_epoch, jit_compile
):
    epochs, pairs = plan_steps(
        seconds_per_step, 60 * args.minutes, pairs_per_epoch, args.batch_size
    )
    steps_per_epoch = pairs // args.batch_size
    steps = epochs * steps_per_epoch
    keras.mixed_precision.set_global_policy(args.precision)
    keras.utils.set_random_seed(args.seed)
    model = keras_hub_model(
        preprocessor.tokenizer.vocabulary_size, args.preset, args.max_length, dropout=args.dropout
    )
    model.compile(
        optimizer=adamw(WarmupLinearDecay(args.learning_rate, warmup_steps(args, steps), steps)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    settings = dict(
        batch_size=args.batch_size,
        max_predictions=args.max_predictions,
        mask_rate=args.mask_rate,
        seed=args.seed,
    )

    def for_keras_hub(features, labels):
        return keras_hub_inputs(features), labels["mlm_labels"], labels["mlm_weights"]

    train = None
    for epoch in range(epochs):  # the same pairs and masks as our job's epochs
        data = pretraining.pretraining_dataset(
            corpus, preprocessor, num_pairs=pairs, epoch=epoch, **settings
        )
        train = data if train is None else train.concatenate(data)
    valid = pretraining.pretraining_dataset(
        valid_corpus,
        preprocessor,
        num_pairs=max(args.batch_size, pretraining.pairs_per_epoch(valid_corpus, args.max_length)),
        epoch=-1,
        **settings,
    )
    budget = TimeBudget(60 * args.minutes)
    print(f"keras-hub: {epochs} epochs of {pairs} pairs ({steps} steps) planned", flush=True)
    history = model.fit(
        train.map(for_keras_hub).repeat(),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        validation_data=valid.map(for_keras_hub),
        callbacks=[budget],
        verbose=2,
    )
    return model, {
        "planned_steps": steps,
        "steps": int(model.optimizer.iterations.numpy()),
        "train_seconds": round(budget.elapsed),
        "history": history.history,
    }


# --- 3. SST-2 ------------------------------------------------------------------------


def sst2_epochs(args):
    if args.sst2_steps is None:
        return args.sst2_epochs
    return max(1, round(args.sst2_steps * SST2_BATCH / args.sst2_train))


def finetune(args, model_dir, sst2, run_dir, name):
    keras.mixed_precision.set_global_policy("float32")
    config = FinetuneConfig(
        model_dir=str(model_dir),
        train=str(sst2["train"]),
        valid=str(sst2["dev"]),
        test=str(sst2["test"]),
        run_dir=str(run_dir / name),
        epochs=sst2_epochs(args),
        batch_size=SST2_BATCH,
        max_sequence_length=64,
        learning_rate=args.sst2_learning_rate,
        mixed_precision=args.precision == "mixed_bfloat16",
        export_root=str(run_dir / "export"),
        name=name,
        verbose=2,
        seed=args.seed,
    )
    started = time.time()
    result = bert_job.finetune(config, log=lambda line: print("  " + line, flush=True))
    keras.mixed_precision.set_global_policy("float32")
    return {
        "test_accuracy": result.metrics["test_accuracy"],
        "seconds": round(time.time() - started),
        "val_accuracy": result.history.get("val_accuracy"),
    }


def export_reinitialized(pretrained_dir, run_dir, keep_blocks=None):
    """The pretrained export's architecture and vocabulary with new random weights, exported.

    The random weights are the same in every call (seeded). `keep_blocks=k`
    keeps the pretrained embeddings and bottom `k` encoder blocks instead
    (the blocks above them and the pooler random): the re-initialization of
    the top layers for few-sample fine-tuning (Zhang et al. 2021, "Revisiting
    few-sample BERT fine-tuning").
    """
    from keras_attn.checkpoints.pretrained_bert import load_backbone, read_pretrained
    from keras_attn.models.bert import backbone_arguments

    tokenizer, settings = read_pretrained(pretrained_dir)
    built = backbone_arguments(settings)
    keras.utils.set_random_seed(1)
    backbone = BertBackbone(**built)
    name = "bert-untrained"
    if keep_blocks is not None:
        pretrained = load_backbone(pretrained_dir)
        for part, trained in [
            (backbone.embedding, pretrained.embedding),
            *zip(backbone.encoder_blocks[:keep_blocks], pretrained.encoder_blocks),
        ]:
            part.set_weights(trained.get_weights())
        name = f"bert-pretrained-{keep_blocks}-blocks"
    # An MLM head of its own (untrained): the export's encode and its
    # assets are what fine-tuning reads.
    server = BertServer(
        BertMaskedLM(backbone, preprocessor=BertPreprocessor(tokenizer, settings["max_length"]))
    )
    return export(server, str(run_dir / "export"), name)


# --- main --------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        choices=["speed", "pretrain", "sst2", "all"],
        default="all",
        help="sst2: fine-tune from --pretrained and from scratch, no pretraining",
    )
    parser.add_argument(
        "--pretrained",
        help="with --only sst2: a pretraining export (e.g. RUN_DIR/ours/export/bert/1)",
    )
    parser.add_argument(
        "--minutes", type=float, default=25.0, help="training budget of each pretraining"
    )
    parser.add_argument(
        "--steps", type=int, help="plan this many steps instead of timing the models"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=["keras-attn", "keras-hub"],
        default=["keras-attn", "keras-hub"],
    )
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument(
        "--max-predictions",
        type=int,
        help="in training (default: as our job's, "
        "--mask-rate of --max-length rounded up: 20 at 15%%)",
    )
    parser.add_argument(
        "--mask-rate",
        type=float,
        default=0.15,
        help="of the tokens masked in training (both models); the test masks stay at 15%%",
    )
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--warmup-fraction", type=float, default=0.1, help="of the planned steps, both models"
    )
    parser.add_argument(
        "--dropout", type=float, default=0.1, help="pretraining dropout, both models"
    )
    parser.add_argument(
        "--nsp-weight", type=float, default=1.0, help="ours: the NSP loss's weight (0: MLM alone)"
    )
    parser.add_argument(
        "--norm-first", action="store_true", help="ours: pre-norm blocks and a final LayerNorm"
    )
    parser.add_argument(
        "--precision", choices=["float32", "mixed_bfloat16"], default="mixed_bfloat16"
    )
    parser.add_argument("--sst2-train", type=int, default=8000, help="SST-2 training rows sampled")
    parser.add_argument("--sst2-epochs", type=int, default=3)
    parser.add_argument(
        "--sst2-steps",
        type=int,
        help="instead of --sst2-epochs: as many epochs as make about this many steps",
    )
    parser.add_argument("--sst2-learning-rate", type=float, default=1e-4)
    parser.add_argument(
        "--keep-pretrained-blocks",
        type=int,
        help="SST-2 from the pretrained embeddings and this many "
        "bottom blocks only, the rest re-initialized (default: the whole pretrained backbone)",
    )
    parser.add_argument(
        "--train-data",
        help="a folder of training documents, one a file (default: WikiText-2 "
        "valid and the State of the Union addresses)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default="runs/bert-benchmark")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    args.max_predictions = args.max_predictions or pretraining.default_max_predictions(
        args.mask_rate, args.max_length
    )
    if not (DATA / "wikitext-2").is_dir():
        sys.exit(f"{DATA}: no WikiText-2 here (this benchmark needs ../shared/data)")
    run_dir = Path(args.run_dir)
    if run_dir.exists():
        sys.exit(f"{run_dir} exists: give a new --run-dir (this benchmark trains from scratch)")
    run_dir.mkdir(parents=True)
    results = {"cpu": describe_cpu(), "args": vars(args)}
    print(
        f"CPU: {results['cpu']}; TensorFlow {tf.__version__}, Keras {keras.__version__}", flush=True
    )
    if args.only == "sst2":
        if not args.pretrained:
            sys.exit("--only sst2 needs --pretrained EXPORT_DIR")
        with tempfile.TemporaryDirectory() as folder:
            results["sst2"] = fine_tune_both(
                args, args.pretrained, write_sst2(folder, args.sst2_train, args.seed), run_dir
            )
        return finish(results, args)

    with tempfile.TemporaryDirectory() as folder:
        train_folder = (
            Path(args.train_data) if args.train_data else write_training_documents(folder)
        )
        test_folder = write_test_documents(folder)
        read = documents.read_documents(str(train_folder), one_document_per_file=True)
        print(f"training documents: {read.summary()}", flush=True)
        keras.mixed_precision.set_global_policy("float32")
        keras.utils.set_random_seed(args.seed)
        (run_dir / "ours").mkdir()
        # The vocabulary our job will learn (same documents, same held-out split, same seed).
        train_docs, valid_docs = documents.hold_out_documents(
            read.documents, 0.05, seed=args.seed, minimum=2
        )
        tokenizer = bert_job.build_tokenizer(
            PretrainConfig(run_dir=str(run_dir / "ours"), vocabulary_size=args.vocab_size),
            [s for d in train_docs for s in d],
        )
        vocabulary = tokenizer.vocabulary
        preprocessor = BertPreprocessor(tokenizer, args.max_length)
        corpus = pretraining.tokenize_documents(train_docs, tokenizer)
        valid_corpus = pretraining.tokenize_documents(valid_docs, tokenizer)
        test_docs = documents.read_documents(str(test_folder), one_document_per_file=True)
        test_corpus = pretraining.tokenize_documents(test_docs.documents, tokenizer)
        pairs_per_epoch = pretraining.pairs_per_epoch(corpus, args.max_length)
        print(
            f"{corpus.num_tokens} training tokens ({pairs_per_epoch} pairs an epoch), "
            f"{test_corpus.num_tokens} test tokens; {len(vocabulary)} WordPieces",
            flush=True,
        )
        batch = next(
            iter(
                pretraining.pretraining_dataset(
                    corpus, preprocessor, args.batch_size, args.max_predictions, seed=args.seed
                )
            )
        )

        if args.steps:
            step_seconds = {
                name: 0.9 * 60 * args.minutes / args.steps for name in ("keras-attn", "keras-hub")
            }
            xla = {"keras-attn": False, "keras-hub": False}
        else:
            results["speed"] = measure_speed(
                batch, len(vocabulary), args.preset, args.max_length, args.precision
            )
            if args.only == "speed":
                return finish(results, args)
            # Each model trains in its faster mode here, with or without XLA.
            step_seconds, xla = {}, {}
            for name in ("keras-attn", "keras-hub"):
                plain, compiled = (
                    min(results["speed"][f"{name} {args.precision}{suffix}"]["ms_per_step"]) / 1000
                    for suffix in ("", " XLA")
                )
                xla[name] = compiled < plain
                step_seconds[name] = min(plain, compiled)
            results["xla"] = xla
            print(f"XLA where faster: {xla}", flush=True)
        tests = test_batches(test_corpus, preprocessor, args)
        if "keras-attn" in args.models:
            ours, results["keras-attn"] = pretrain_ours(
                args,
                train_folder,
                run_dir / "ours",
                step_seconds["keras-attn"],
                pairs_per_epoch,
                xla["keras-attn"],
            )
            results["keras-attn"]["test"] = score(
                tf.function(lambda f: ours.model(f, training=False), autograph=False), tests
            )
            print(f"keras-attn test: {results['keras-attn']['test']}", flush=True)
        if "keras-hub" in args.models:
            theirs, results["keras-hub"] = pretrain_keras_hub(
                args,
                corpus,
                valid_corpus,
                preprocessor,
                step_seconds["keras-hub"],
                pairs_per_epoch,
                xla["keras-hub"],
            )
            # In a tf.function: keras-hub's bfloat16 MLM head fails
            # when called eagerly (a float32 bias).
            results["keras-hub"]["test"] = score(
                tf.function(lambda f: theirs(keras_hub_inputs(f), training=False), autograph=False),
                tests,
            )
            print(f"keras-hub test: {results['keras-hub']['test']}", flush=True)
        keras.mixed_precision.set_global_policy("float32")
        if args.only == "pretrain" or "keras-attn" not in args.models:
            return finish(results, args)

        results["sst2"] = fine_tune_both(
            args, ours.export_path, write_sst2(folder, args.sst2_train, args.seed), run_dir
        )
    return finish(results, args)


def fine_tune_both(args, pretrained, sst2, run_dir):
    """SST-2 from the pretrained export and from the same architecture with random weights."""
    untrained = export_reinitialized(pretrained, run_dir)
    if args.keep_pretrained_blocks is not None:
        pretrained = export_reinitialized(pretrained, run_dir, args.keep_pretrained_blocks)
    results = {
        "pretrained": finetune(args, pretrained, sst2, run_dir, "sst2-pretrained"),
        "from_scratch": finetune(args, untrained, sst2, run_dir, "sst2-from-scratch"),
    }
    print(f"SST-2: {results}", flush=True)
    return results


def finish(results, args):
    text = json.dumps(results, indent=1, default=float)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
