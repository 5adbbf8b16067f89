"""BERT's tasks with their preprocessor: `from_preset`, `fill_mask`
compiled once, the `.keras` file.
"""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.models import BertClassifier, BertMaskedLM, BertPretrainer
from keras_attn.presets import PRESETS
from keras_attn.schedules import WarmupLinearDecay
from pipelines.preprocessors import BertPreprocessor
from pipelines.special_tokens import SPECIAL_TOKENS

WORDS = ["the", "dog", "cat", "runs", "sits", "on", "a", "mat", "."]
SMALL = dict(num_layers=1, hidden_dim=16, num_heads=2)


@pytest.fixture(scope="module")
def preprocessor():
    return BertPreprocessor([*SPECIAL_TOKENS, *WORDS], max_length=12, lowercase=True)


def test_from_preset_sizes_the_backbone_by_the_preprocessor_and_routes_each_argument(preprocessor):
    model = BertClassifier.from_preset("mini", preprocessor, num_classes=3, num_layers=1)
    backbone = model.backbone.get_config()
    assert (backbone["vocabulary_size"], backbone["max_sequence_length"]) == (
        len(SPECIAL_TOKENS) + len(WORDS),
        12,
    )
    assert (
        backbone["num_layers"] == 1
        and backbone["hidden_dim"] == PRESETS["bert"]["mini"]["hidden_dim"]
    )
    assert model.classifier.units == 3 and model.preprocessor is preprocessor
    wider = BertPretrainer.from_preset("tiny", preprocessor, max_sequence_length=32)  # given wins
    assert wider.backbone.get_config()["max_sequence_length"] == 32
    with pytest.raises(ValueError, match=r"no such folder, and not one of its sizes \(tiny, mini"):
        BertMaskedLM.from_preset("huge", preprocessor)


def test_fill_mask_answers_every_text_and_compiles_once(preprocessor):
    keras.utils.set_random_seed(0)
    model = BertMaskedLM.from_preset("tiny", preprocessor, **SMALL)
    rng = np.random.default_rng(0)
    for _ in range(20):
        texts = [
            " ".join(rng.choice([*WORDS, "[MASK]", "[mask]", "zebra"], size=rng.integers(0, 14)))
            for _ in range(rng.integers(0, 5))
        ]
        top_k = int(rng.integers(0, 8))
        answers = model.fill_mask(texts, top_k=top_k)
        assert len(answers) == len(texts)
        for text, answer in zip(texts, answers):
            kept = text.split()[:10]  # 12 ids: [CLS], 10 words (one id each here), [SEP]
            assert answer["truncated"] == (len(text.split()) > 10)
            assert len(answer["masks"]) == len(re.findall(r"(?i)\[mask\]", " ".join(kept)))
            for candidates in answer["masks"]:
                tokens, scores = zip(*candidates)
                assert len(candidates) == max(top_k, 1)
                assert not set(tokens) & set(SPECIAL_TOKENS) and list(scores) == sorted(
                    scores, reverse=True
                )
                assert 0 < sum(scores) <= 1 + 1e-6
            # `filled`: the kept words, each mask replaced by its best
            # token, in place (as the tokenizer writes text).
            best = iter(candidates[0][0] for candidates in answer["masks"])
            expected = " ".join(next(best) if word.lower() == "[mask]" else word for word in kept)
            assert answer["filled"] == _as_detokenized(preprocessor, expected)
    assert model._fill_mask.experimental_get_tracing_count() == 1
    with pytest.raises(ValueError, match="needs a preprocessor"):
        BertMaskedLM(model.backbone).fill_mask(["the [MASK] runs"])


def _as_detokenized(preprocessor, text):
    ids = preprocessor.tokenizer.tokenize(tf.constant([text])).to_tensor()
    return preprocessor.tokenizer.detokenize(ids).numpy()[0].decode("utf-8")


@pytest.mark.slow
def test_the_keras_file_keeps_the_preprocessor_the_answers_and_the_compiled_state(
    preprocessor, tmp_path
):
    keras.utils.set_random_seed(1)
    model = BertPretrainer.from_preset("tiny", preprocessor, **SMALL)
    # a schedule, as the job gives
    model.compile(learning_rate=WarmupLinearDecay(5e-3, 1, 10), nsp_weight=0.5)
    rows = preprocessor(
        tf.constant(["the dog runs", "a cat sits on a mat"]), tf.constant(["on a mat .", "the dog"])
    )
    inputs = {**rows, "mask_positions": np.array([[1, 2], [2, 3]], "int32")}
    targets = {
        "mlm_labels": np.array([[8, 9], [9, 10]], "int32"),
        "mlm_weights": np.ones((2, 2), "float32"),
        "nsp_labels": np.array([0, 1], "int32"),
    }
    traces, train_step = [], model.train_step
    model.train_step = lambda data: traces.append(data) or train_step(data)
    model.fit(inputs, targets, epochs=1, verbose=0)
    del model.train_step
    # the optimizer is built before the step is traced; inside it, TensorFlow traces twice
    assert len(traces) == 1
    texts = ["the [MASK] runs on a mat .", "a cat [mask] [MASK] the mat", "no mask here"]
    model.save(tmp_path / "pretrainer.keras")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = keras.saving.load_model(tmp_path / "pretrainer.keras")
    assert not [w for w in caught if "compile" in str(w.message)], [str(w.message) for w in caught]
    assert loaded.preprocessor.get_config() == preprocessor.get_config()
    assert loaded.fill_mask(texts, top_k=4) == model.fill_mask(texts, top_k=4)
    # Compiled as it was (its own arguments), with the optimizer's
    # state: training goes on from step 1.
    assert loaded.task_loss.nsp_weight == 0.5 and int(loaded.optimizer.iterations.numpy()) == 1
    assert (
        loaded.optimizer.get_config()["learning_rate"]
        == model.optimizer.get_config()["learning_rate"]
    )
    for a, b in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_fit_with_sample_weights_on_the_tasks_own_loss_is_refused(preprocessor):
    """The task's own loss weighs every example alike: weights given to `fit` are not silently
    dropped."""
    model = BertClassifier.from_preset("tiny", preprocessor, num_classes=2, **SMALL)
    model.compile()
    features = preprocessor(tf.constant(["a dog runs .", "a cat sits ."] * 4))
    labels, weights = np.array([0, 1] * 4), np.ones(8, "float32")
    with pytest.raises(ValueError, match=r"takes no `sample_weight`; compile with a Keras loss"):
        model.fit(features, labels, sample_weight=weights, epochs=1, verbose=0)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(features, labels, sample_weight=weights, epochs=1, verbose=0)
