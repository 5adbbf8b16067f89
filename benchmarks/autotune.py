"""Our pipelines with tf.data's autotuning on and off: throughput, the cost of dropping an iterator, and `fit`.

    python -m benchmarks.autotune pipelines [--repeats 5]
    python -m benchmarks.autotune fit --autotune off [--epochs 6]   # one process per setting, alternated

`pipelines`: in one process, for the translation, captioning and BERT
pretraining pipelines on the built-in corpora, alternating the two
settings: the seconds one full pass over the batches takes, and the
seconds `del iterator` takes after 5 batches (the iterator's destructor
joins the autotuning thread).

`fit`: Keras `fit` of `Seq2SeqLM.from_preset("tiny")` on the translation
pipeline (the example's 8,000 built-in pairs, batch 64): per epoch, the
seconds from its start to its first step, and the median step.
"""

import argparse
import statistics
import time

import keras
import tensorflow as tf

from benchmarks.epoch_starts import EpochClock
from pipelines import pretraining, scenes, synthetic, synthetic_documents, translation
from pipelines.captions import caption_dataset
from pipelines.preprocessors import BertPreprocessor, CaptionPreprocessor, TranslationPreprocessor
from pipelines.tokenizers import learn_wordpiece_vocabulary


def translation_batches(pairs=8000):
    train = synthetic.translation_corpus(seed=0, train_size=pairs, valid_size=64, test_size=8)["train"]
    preprocessor = TranslationPreprocessor(
        learn_wordpiece_vocabulary(train.sources, 1000), learn_wordpiece_vocabulary(train.targets, 1000),
        max_length=32,
    )
    batches = translation.translation_dataset(
        train.sources, train.targets, preprocessor.source_tokenizer, preprocessor.target_tokenizer,
        batch_size=64, max_length=preprocessor.max_length, drop_remainder=True,
    )
    return preprocessor, batches


def caption_batches():
    train = scenes.scenes_corpus(seed=0, train_size=4000)["train"]
    preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(train.captions, 100),
                                       image_size=scenes.IMAGE_SIZE, max_length=32)
    return caption_dataset(train.images, train.captions, preprocessor, 64)


def pretraining_batches():
    documents = synthetic_documents.document_corpus(3000, seed=0)
    sentences = [sentence for document in documents for sentence in document]
    preprocessor = BertPreprocessor(learn_wordpiece_vocabulary(sentences, 1000, lowercase=True), max_length=64,
                                    lowercase=True)
    corpus = pretraining.tokenize_documents(documents, preprocessor.tokenizer)
    return pretraining.pretraining_epochs(corpus, preprocessor, batch_size=32)(0)


def setting(dataset, autotune):
    options = tf.data.Options()
    options.autotune.enabled = autotune == "on"
    return dataset.with_options(options)


def full_pass(dataset):
    started = time.perf_counter()
    for _ in dataset:
        pass
    return time.perf_counter() - started


def drop_after(dataset, batches=5):
    iterator = iter(dataset)
    for _ in range(batches):
        next(iterator)
    started = time.perf_counter()
    del iterator
    return time.perf_counter() - started


def pipelines(repeats):
    datasets = {"translation": translation_batches()[1], "captions": caption_batches(),
                "pretraining": pretraining_batches()}
    for name, dataset in datasets.items():
        full_pass(dataset)  # warm: tokenizers' and maps' first traces
        passes, drops = {"on": [], "off": []}, {"on": [], "off": []}
        for _ in range(repeats):
            for autotune in ("on", "off"):
                passes[autotune].append(full_pass(setting(dataset, autotune)))
                drops[autotune].append(drop_after(setting(dataset, autotune)))
        for autotune in ("on", "off"):
            print(f"{name} autotune {autotune}: pass {_spread(passes[autotune])} s; "
                  f"del after 5 batches {_spread(drops[autotune])} s", flush=True)


def fit(autotune, epochs):
    from keras_attn.models import Seq2SeqLM

    keras.utils.set_random_seed(0)
    preprocessor, batches = translation_batches()
    model = Seq2SeqLM.from_preset("tiny", preprocessor)
    model.compile(warmup_steps=50)
    clock = EpochClock()
    started = time.perf_counter()
    model.fit(setting(batches, autotune), epochs=epochs, verbose=0, callbacks=[clock])
    waits = " ".join(f"{wait:.2f}" for wait in clock.waits)
    print(f"fit autotune {autotune}: {time.perf_counter() - started:.1f} s; first step after (s): {waits}; "
          f"median step {1000 * statistics.median(clock.steps):.1f} ms", flush=True)


def _spread(values):
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["pipelines", "fit"])
    parser.add_argument("--autotune", choices=["on", "off"], default="on", help="fit only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}", flush=True)
    pipelines(args.repeats) if args.part == "pipelines" else fit(args.autotune, args.epochs)


if __name__ == "__main__":
    main()
