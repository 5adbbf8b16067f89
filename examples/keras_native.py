"""The Keras-native way: presets, `fit` under MirroredStrategy,
`generate` and `fill_mask`, `.keras` files.

A Transformer translator for the built-in corpus and a BERT for the
built-in documents, built with the library's classes instead of the
`keras-attn train` and `pretrain` jobs:

1. a `TranslationPreprocessor` (WordPiece vocabularies learned on the
   training sentences; tokenizing, truncating and [BOS]/[EOS] in one layer);
2. `Seq2SeqLM.from_preset("tiny", preprocessor)` under
   `tf.distribute.MirroredStrategy`, `compile()` with its defaults (label
   smoothing 0.1, Adam with the paper's warm-up schedule) and plain `fit`
   on the tf.data pipeline's batches;
3. `generate` with greedy and beam search (each compiled once, whatever the
   batch);
4. `save("....keras")` and `keras.saving.load_model`: the same translations;
5. a TF-Serving-shaped SavedModel (strings in, strings out), which
   translates as `generate` does;
6. BERT: a `BertPreprocessor` (an uncased vocabulary, `[CLS] A [SEP] B
   [SEP]` rows), `BertPretrainer.from_preset("tiny", preprocessor)`,
   `compile()` (AdamW, masked-LM plus next-sentence loss) and `fit` on
   `pipelines.pretraining`'s masked pairs, then `fill_mask` on a sentence
   with `[MASK]` in it, the same after a `.keras` round trip.

    python examples/keras_native.py                 # a few minutes on a laptop CPU
    python examples/keras_native.py --tiny          # seconds (the test suite's setting)
    python examples/keras_native.py --devices /cpu:0 /cpu:1   # needs 2 logical CPUs

`KERAS_ATTN_EXAMPLES_TINY=1` in the environment is the same as `--tiny`.
"""

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn import serving  # noqa: E402
from keras_attn.models import BertPretrainer, Seq2SeqLM  # noqa: E402
from pipelines import pretraining, synthetic, synthetic_documents, translation  # noqa: E402
from pipelines.preprocessors import BertPreprocessor, TranslationPreprocessor  # noqa: E402
from pipelines.tokenizers import learn_wordpiece_vocabulary  # noqa: E402

# The built-in documents' objects sit beside each other.
FILL_MASK = "The sharp knife is [MASK] to the heavy pan."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds' run (for tests)")
    parser.add_argument("--devices", nargs="+", default=None, help="MirroredStrategy's devices")
    parser.add_argument("--out", default=None, help="where the .keras file and the SavedModel go")
    args = parser.parse_args(argv)
    tiny = args.tiny or os.environ.get("KERAS_ATTN_EXAMPLES_TINY") == "1"
    pairs, epochs, size = (
        (1024, 1, dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64))
        if tiny
        else (8000, 4, {})
    )
    out = Path(args.out or tempfile.mkdtemp(prefix="keras-native-"))

    keras.utils.set_random_seed(0)
    corpus = synthetic.translation_corpus(seed=0, train_size=pairs, valid_size=64, test_size=8)
    train = corpus["train"]
    preprocessor = TranslationPreprocessor(
        learn_wordpiece_vocabulary(train.sources, 1000),
        learn_wordpiece_vocabulary(train.targets, 1000),
        max_length=32,
    )
    strategy = tf.distribute.MirroredStrategy(args.devices)
    print(f"{strategy.num_replicas_in_sync} replica(s): {strategy.extended.worker_devices}")
    with strategy.scope():  # variables are mirrored on every replica
        model = Seq2SeqLM.from_preset("tiny", preprocessor, **size)
        model.compile(warmup_steps=50)
    batches = translation.translation_dataset(
        train.sources,
        train.targets,
        preprocessor.source_tokenizer,
        preprocessor.target_tokenizer,
        batch_size=64,
        max_length=preprocessor.max_length,
        drop_remainder=True,
    )
    model.fit(batches, epochs=epochs, verbose=0 if tiny else 2)

    sources = corpus["test"].sources
    greedy, beam = model.generate(sources), model.generate(sources, beam_width=4)
    for source, translated in zip(sources[:3], beam):
        print(f"{source} → {translated}")

    model.save(out / "translator.keras")
    reloaded = keras.saving.load_model(out / "translator.keras")
    same_after_reload = (
        reloaded.generate(sources) == greedy and reloaded.generate(sources, beam_width=4) == beam
    )

    path = serving.export(serving.Translator(model), out / "saved_models", "translator")
    saved_model = tf.saved_model.load(path)  # kept: a dropped SavedModel loses its variables
    served = saved_model.translate(text=tf.constant(sources), beam_width=tf.constant(4))[
        "translation"
    ]
    served = [text.decode("utf-8") for text in served.numpy()]
    print(
        f"reloaded .keras translates the same: {same_after_reload}; the SavedModel ({path}) too: "
        f"{served == beam}"
    )
    return {
        "greedy": greedy,
        "beam": beam,
        "reloaded_same": same_after_reload,
        "served": served,
        "replicas": strategy.num_replicas_in_sync,
        "bert": bert(strategy, out, tiny),
    }


def bert(strategy, out, tiny):
    """BERT pretraining on the built-in documents, then `fill_mask`: step 6 of the module's list."""
    documents, epochs, size = (
        (400, 2, dict(num_layers=1, hidden_dim=32, num_heads=2)) if tiny else (3000, 8, {})
    )
    documents = synthetic_documents.document_corpus(documents, seed=0)
    sentences = [sentence for document in documents for sentence in document]
    preprocessor = BertPreprocessor(
        learn_wordpiece_vocabulary(sentences, 1000, lowercase=True),
        max_length=64,
        lowercase=True,
    )
    with strategy.scope():
        model = BertPretrainer.from_preset("tiny", preprocessor, **size)
        model.compile(learning_rate=2e-3)
    corpus = pretraining.tokenize_documents(documents, preprocessor.tokenizer)

    # epoch -> its batches (new pairs and masks every epoch), of the
    # preprocessor's vocabulary and length
    pairs = pretraining.pretraining_epochs(corpus, preprocessor, batch_size=32)
    model.fit(
        tf.data.Dataset.range(epochs).flat_map(pairs),
        epochs=epochs,
        steps_per_epoch=int(pairs(0).cardinality()),
        verbose=0 if tiny else 2,
    )
    answers = model.fill_mask([FILL_MASK], top_k=3)
    print(f"{FILL_MASK} → {answers[0]['filled']}  ({answers[0]['masks'][0]})")
    model.save(out / "bert.keras")
    same_after_reload = (
        keras.saving.load_model(out / "bert.keras").fill_mask([FILL_MASK], top_k=3) == answers
    )
    print(f"reloaded .keras fills the same: {same_after_reload}")
    return {"answers": answers, "reloaded_same": same_after_reload}


if __name__ == "__main__":
    main()
