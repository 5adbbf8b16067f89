"""The translation task: compile defaults, fit under a strategy,
generate without retracing, save and load.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.models import Seq2SeqLM, TransformerBackbone
from keras_attn.schedules import warmup_cosine
from keras_attn.training import get_strategy
from pipelines import synthetic, translation
from pipelines.preprocessors import TranslationPreprocessor
from pipelines.tokenizers import SPECIAL_TOKENS

SMALL = dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0)


@pytest.fixture(scope="module")
def corpus():
    return synthetic.translation_corpus(seed=3, train_size=256, valid_size=8, test_size=8)


def _words(texts):
    """The special tokens, then every word and mark of `texts`: a
    vocabulary the same in every process.

    (A learned one is not: HuggingFace `tokenizers` breaks ties in hash-map
    order, and with other ids the two-replica test drifted in 10% of the weights instead of 1%.)
    """
    return [
        *SPECIAL_TOKENS,
        *sorted({word for text in texts for word in re.findall(r"\w+|[^\w\s]", text)}),
    ]


@pytest.fixture(scope="module")
def preprocessor(corpus):
    train = corpus["train"]
    return TranslationPreprocessor(_words(train.sources), _words(train.targets), max_length=24)


def _dataset(corpus, preprocessor, batch_size=32):
    train = corpus["train"]
    return translation.translation_dataset(
        train.sources,
        train.targets,
        preprocessor.source_tokenizer,
        preprocessor.target_tokenizer,
        batch_size,
        preprocessor.max_length,
        shuffle=False,
        drop_remainder=True,
    )


def test_generate_compiles_once_for_every_batch_size_length_and_beam_width(preprocessor, corpus):
    keras.utils.set_random_seed(2)
    model = Seq2SeqLM.from_preset("tiny", preprocessor, **SMALL)
    sources = corpus["valid"].sources
    rng = np.random.default_rng(0)
    for call in range(20):
        batch = list(rng.choice(sources, size=rng.integers(1, 6)))
        beam_width = [1, 2, 4][call % 3]
        translations = model.generate(
            batch, beam_width=beam_width, max_length=int(rng.integers(3, 9)) if call % 2 else None
        )
        assert len(translations) == len(batch) and all(
            isinstance(text, str) for text in translations
        )
    assert model._greedy.experimental_get_tracing_count() == 1
    assert model._beam.experimental_get_tracing_count() == 1


@pytest.mark.parametrize(
    "family, settings",
    [
        ("transformer", SMALL),
        ("seq2seq", dict(num_layers=1, hidden_dim=32, attention="luong", dropout=0.0)),
    ],
)
@pytest.mark.slow
def test_generate_from_ids_equals_the_stepper_searches(preprocessor, corpus, family, settings):
    from keras_attn import decoding

    model = Seq2SeqLM.from_preset("tiny", preprocessor, family=family, **settings)
    source = preprocessor(tf.constant(corpus["valid"].sources[:3]))["source"]
    budget = decoding.max_decode_length(source, cap=preprocessor.max_length)
    greedy = decoding.greedy_search(decoding.Stepper(model.backbone), source, budget)["tokens"]
    np.testing.assert_array_equal(model.generate(source.numpy()), greedy)
    beam = decoding.beam_search(
        decoding.Stepper(model.backbone), source, budget, 3, length_penalty=0.6
    )["tokens"]
    np.testing.assert_array_equal(model.generate(source.numpy(), beam_width=3), beam)
    with pytest.raises(ValueError, match="no preprocessor"):
        Seq2SeqLM(model.backbone).generate(["a cat"])


@pytest.mark.slow  # two short fits
def test_fit_under_two_replicas_equals_one_device(preprocessor, corpus):
    """The default loss and metric under `fit`: two replicas give one device's losses and steps.

    Plain SGD, so a wrongly scaled gradient (each replica's mean summed, not
    the global batch's) moves the weights; Adam would hide a constant factor,
    and turns rounding noise in near-zero gradients into steps of the
    learning rate's size.
    """
    keras.utils.set_random_seed(4)
    initial = Seq2SeqLM.from_preset("tiny", preprocessor, **SMALL).get_weights()

    def fitted(strategy):
        with strategy.scope():
            model = Seq2SeqLM.from_preset("tiny", preprocessor, **SMALL)
            model.set_weights(initial)
            model.compile(optimizer=keras.optimizers.SGD(1.0))
        history = model.fit(_dataset(corpus, preprocessor), epochs=2, steps_per_epoch=4, verbose=0)
        return model.get_weights(), history.history

    two, two_history = fitted(get_strategy("mirrored", ["/cpu:0", "/cpu:1"]))
    one, one_history = fitted(get_strategy("one_device", ["/cpu:0"]))
    for key in ("loss", "token_accuracy"):
        np.testing.assert_allclose(two_history[key], one_history[key], rtol=1e-5)
    assert one_history["loss"][1] < one_history["loss"][0] - 0.1
    for a, b in zip(two, one):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.slow
def test_the_keras_file_keeps_the_preprocessor_the_generations_and_the_optimizer(
    preprocessor, corpus, tmp_path
):
    model = Seq2SeqLM.from_preset("tiny", preprocessor, **SMALL)
    # a schedule object, as the translation job gives
    model.compile(learning_rate=warmup_cosine(1e-3, 5, 50))
    model.train_on_batch(*next(iter(_dataset(corpus, preprocessor))))
    sources = corpus["valid"].sources[:4]
    expected = model.generate(sources, beam_width=2)
    model.save(tmp_path / "translator.keras")
    loaded = keras.saving.load_model(tmp_path / "translator.keras")
    assert len(loaded.optimizer.variables) == len(model.optimizer.variables) > 1
    for saved, restored in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(restored, saved)  # training resumes where it was
    assert (
        loaded.optimizer.get_config()["learning_rate"]
        == model.optimizer.get_config()["learning_rate"]
    )
    assert isinstance(loaded.backbone, TransformerBackbone)
    assert (
        loaded.preprocessor.target_tokenizer.vocabulary == preprocessor.target_tokenizer.vocabulary
    )
    assert loaded.generate(sources, beam_width=2) == expected
