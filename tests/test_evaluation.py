"""Scoring as the published figures are scored."""

import pytest

from keras_attn.evaluation import tokenized_bleu

REFERENCES = [
    "a man in a red shirt is riding a bike down the street .",
    "two dogs play with a ball on the grass .",
    "the children are sitting at a long wooden table , eating lunch .",
    "a woman with a hat sells fruit at the market .",
    "people walk past a shop in the rain .",
]
HYPOTHESES = [
    "a man in a red shirt rides a bicycle down the street .",
    "two dogs are playing with a ball in the grass .",
    "children sit at a wooden table eating lunch .",
    "a woman in a hat sells fruit at a market .",
    "people walk past a store .",
]


def test_tokenized_bleu_is_multi_bleu_perls():
    """Moses's multi-bleu.perl on these lines (written one a line to ref.txt and hyp.txt):
    `perl multi-bleu.perl ref.txt < hyp.txt` prints
    BLEU = 37.10, 82.0/57.8/35.0/20.0 (BP=0.869, ratio=0.877, hyp_len=50, ref_len=57)."""
    scores = tokenized_bleu(HYPOTHESES, REFERENCES)
    assert round(scores["bleu_tokenized"], 2) == 37.10
    assert (
        "tok:none" in scores["bleu_tokenized_signature"]
        and "smooth:none" in scores["bleu_tokenized_signature"]
    )


def test_tokenized_bleu_splits_at_whitespace_only_and_keeps_case():
    # 13a would split "street." into two tokens and match; as given,
    # "street." is one word that is not in the reference.
    glued = tokenized_bleu(["a man rides down the street."], ["a man rides down the street ."])[
        "bleu_tokenized"
    ]
    assert glued < 100 and tokenized_bleu(["A man"], ["a man"])["bleu_tokenized"] == 0.0


def test_tokenized_bleu_without_a_matching_4_gram_is_0_as_in_multi_bleu_perl():
    assert tokenized_bleu(["a dog runs fast"], ["a dog ran fast"])[
        "bleu_tokenized"
    ] == pytest.approx(0.0)
