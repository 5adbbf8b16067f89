"""Every pipeline's batches come without tf.data's autotuning thread
(dropping an iterator then waits for nothing).
"""

import numpy as np
import pytest
import tensorflow as tf

from pipelines import captions, classification, pretraining, translation
from pipelines.preprocessors import BertPreprocessor, CaptionPreprocessor
from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

SENTENCES = [
    "a red circle left of a blue square",
    "the small green triangle",
    "two big squares",
] * 4


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(
        learn_wordpiece_vocabulary(SENTENCES, 60, lowercase=True), lowercase=True
    )


def _translation(tokenizer):
    return translation.translation_dataset(
        SENTENCES, SENTENCES, tokenizer, tokenizer, 4, max_length=16
    )


def _translation_epoch(tokenizer):
    return translation.translation_epochs(
        SENTENCES, SENTENCES, tokenizer, tokenizer, 4, max_length=16
    )(1)


def _captions(tokenizer):
    return captions.caption_dataset(
        np.zeros((len(SENTENCES), 8, 8, 3), "uint8"),
        SENTENCES,
        CaptionPreprocessor(tokenizer, image_size=8),
        4,
    )


def _caption_epoch(tokenizer):
    return captions.caption_epochs(
        np.zeros((len(SENTENCES), 8, 8, 3), "uint8"),
        SENTENCES,
        CaptionPreprocessor(tokenizer, image_size=8),
        4,
    )(1)


def _classification(tokenizer):
    data = classification.LabelledTexts(labels=["0", "1"] * 6, texts_a=SENTENCES)
    return classification.classification_dataset(
        data, {"0": 0, "1": 1}, BertPreprocessor(tokenizer, 16), 4
    )


def _pretraining(tokenizer):
    documents = [SENTENCES[:6], SENTENCES[6:]]
    corpus = pretraining.tokenize_documents(documents, tokenizer)
    return pretraining.pretraining_dataset(
        corpus, BertPreprocessor(tokenizer, 16, lowercase=True), 2
    )


@pytest.mark.parametrize(
    "batches",
    [_translation, _translation_epoch, _captions, _caption_epoch, _classification, _pretraining],
)
def test_a_pipelines_batches_come_without_autotuning_and_are_the_same_batches(batches, tokenizer):
    dataset = batches(tokenizer)
    assert dataset.options().autotune.enabled is False
    options = tf.data.Options()
    options.autotune.enabled = True
    with_autotuning = batches(tokenizer).with_options(options)
    for ours, theirs in zip(
        dataset.as_numpy_iterator(), with_autotuning.as_numpy_iterator(), strict=True
    ):
        tf.nest.map_structure(np.testing.assert_array_equal, ours, theirs)
