"""BERT's data: documents, sentence pairs for NSP, dynamic MLM masks, classification TSVs."""

import gzip

import numpy as np
import pytest
import tensorflow as tf

from pipelines import (
    classification,
    documents,
    preprocessors,
    pretraining,
    synthetic_documents,
    text,
    tokenizers,
)
from pipelines.tokenizers import CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def corpus():
    """Tokenized built-in documents and their tokenizer."""
    docs = synthetic_documents.document_corpus(400, seed=3)
    vocabulary = tokenizers.learn_wordpiece_vocabulary(
        [s for d in docs for s in d], 800, lowercase=True
    )
    tokenizer = tokenizers.WordPieceTokenizer(vocabulary, lowercase=True)
    return docs, tokenizer, pretraining.tokenize_documents(docs, tokenizer)


def _pairs(corpus, count, **settings):
    return list(
        pretraining.sentence_pairs(
            corpus, MAX_LENGTH, count, seed=5, **settings
        ).as_numpy_iterator()
    )


def _masked(corpus, tokenizer, count, epoch=0, **settings):
    pairs = pretraining.sentence_pairs(corpus, MAX_LENGTH, count, seed=5, epoch=epoch)
    mask = pretraining.masker(
        tokenizer.vocabulary, max_predictions=MAX_LENGTH, seed=5, epoch=epoch, **settings
    )
    both = pairs.map(lambda pair: (pair, mask(pair))).batch(count)
    pair, (features, labels) = next(iter(both))
    return (
        {k: v.numpy() for k, v in pair.items()},
        {k: v.numpy() for k, v in features.items()},
        {k: v.numpy() for k, v in labels.items()},
    )


def test_masking_statistics_over_100k_tokens(corpus):
    _, tokenizer, tokenized = corpus
    pair, features, labels = _masked(tokenized, tokenizer, 4000)
    original, masked = pair["token_ids"], features["token_ids"]
    candidates = original >= len(SPECIAL_TOKENS)
    assert candidates.sum() > 100_000
    rows = np.repeat(np.arange(len(original))[:, None], MAX_LENGTH, 1)
    weights = labels["mlm_weights"] > 0
    chosen_rows, chosen_positions = (
        rows[:, :MAX_LENGTH][weights],
        features["mask_positions"][weights],
    )
    chosen = np.zeros_like(candidates)
    chosen[chosen_rows, chosen_positions] = True
    assert chosen.sum() == weights.sum()  # no position twice
    assert not (chosen & ~candidates).any()  # never [CLS], [SEP] or [PAD]
    assert (masked[~chosen] == original[~chosen]).all()
    assert (labels["mlm_labels"][weights] == original[chosen_rows, chosen_positions]).all()
    assert abs(chosen.sum() / candidates.sum() - 0.15) < 0.01
    now = masked[chosen]
    assert abs((now == MASK_ID).mean() - 0.8) < 0.01
    assert abs((now == original[chosen]).mean() - 0.1) < 0.01
    replaced = (now != MASK_ID) & (now != original[chosen])
    assert abs(replaced.mean() - 0.1) < 0.01
    assert (now[replaced] >= len(SPECIAL_TOKENS)).all()


def test_whole_word_masking_takes_every_piece_of_a_word(corpus):
    _, tokenizer, tokenized = corpus
    vocabulary = tokenizer.vocabulary
    pair, features, labels = _masked(tokenized, tokenizer, 300, whole_word=True)
    original = pair["token_ids"]
    chosen = np.zeros(original.shape, bool)
    weights = labels["mlm_weights"] > 0
    chosen[np.nonzero(weights)[0], features["mask_positions"][weights]] = True
    words = 0
    for row in range(len(original)):
        for position in range(1, MAX_LENGTH):
            token = original[row, position]
            if token >= len(SPECIAL_TOKENS) and vocabulary[token].startswith("##"):
                previous = original[row, position - 1]
                if previous >= len(SPECIAL_TOKENS):
                    words += 1
                    assert chosen[row, position] == chosen[row, position - 1]
    assert words > 100  # the built-in corpus has multi-piece words
    rate = chosen.sum() / (original >= len(SPECIAL_TOKENS)).sum()
    assert 0.12 < rate <= 0.15


def test_masks_differ_between_epochs_and_repeat_within_one(corpus):
    _, tokenizer, tokenized = corpus
    first = _masked(tokenized, tokenizer, 50)[1]["token_ids"]
    again = _masked(tokenized, tokenizer, 50)[1]["token_ids"]
    other = _masked(tokenized, tokenizer, 50, epoch=1)[1]["token_ids"]
    assert (first == again).all()
    assert (first != other).any(axis=1).mean() > 0.9


def test_next_sentence_labels_are_balanced_and_is_next_pairs_consecutive(corpus):
    _, tokenizer, tokenized = corpus
    pairs = _pairs(tokenized, 2000)
    labels = np.array([p["next_sentence_label"] for p in pairs])
    assert abs(labels.mean() - 0.5) < 0.03
    document = tokenized.sentence_document()
    ids, starts, document_starts = (
        tokenized.ids,
        tokenized.sentence_starts,
        tokenized.document_starts,
    )

    def tokens(first, end):  # the tokens of sentences first..end-1
        return ids[starts[first] : starts[end]].tolist()

    def contains(whole, part):
        return any(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1))

    for pair in pairs:
        row, segments = pair["token_ids"].tolist(), pair["segment_ids"]
        length = row.index(PAD_ID) if PAD_ID in row else MAX_LENGTH
        first_sep = row.index(SEP_ID)
        assert row[0] == CLS_ID and row[length - 1] == SEP_ID
        assert (segments[: first_sep + 1] == 0).all() and (
            segments[first_sep + 1 : length] == 1
        ).all()
        assert (segments[length:] == 0).all() and (pair["token_ids"][length:] == PAD_ID).all()
        a, b = row[1:first_sep], row[first_sep + 1 : length - 1]
        assert a and b
        last_a, first_b = pair["last_a_sentence"], pair["first_b_sentence"]
        a_document, b_document = document[last_a], document[first_b]
        # A: sentences of its document up to last_a; B: from first_b on (truncation cuts only ends).
        assert contains(tokens(document_starts[a_document], last_a + 1), a)
        assert contains(tokens(first_b, document_starts[b_document + 1]), b)
        if pair["next_sentence_label"] == pretraining.IS_NEXT:
            assert first_b == last_a + 1 and b_document == a_document
        else:
            assert b_document != a_document


def test_pairs_fill_the_length_and_short_sequences_are_drawn(corpus):
    _, tokenizer, _ = corpus
    # Long documents: a chunk (and a random B) rarely stops at a document's end.
    long = pretraining.tokenize_documents(
        synthetic_documents.document_corpus(60, seed=4, min_sentences=30, max_sentences=40),
        tokenizer,
    )
    lengths = np.array([(p["token_ids"] != PAD_ID).sum() for p in _pairs(long, 1000)])
    assert lengths.max() <= MAX_LENGTH
    full = lengths >= MAX_LENGTH - 2  # the target length is reached, then cut
    assert full.mean() > 0.8  # 0.85 seen
    # short_sequence_probability 0.1 (targets uniform in [2, 61]), and
    # a few chunks ending with their document.
    assert 0.08 < (~full).mean() < 0.2 and (lengths < MAX_LENGTH / 2).mean() > 0.02


def test_a_batch_has_the_shapes_the_model_takes(corpus):
    _, tokenizer, tokenized = corpus
    data = pretraining.pretraining_dataset(
        tokenized,
        preprocessors.BertPreprocessor(tokenizer, max_length=32),
        batch_size=16,
        max_predictions=3,
        num_pairs=40,
    )
    assert int(data.cardinality()) == 2
    features, labels = next(iter(data))
    assert {k: v.shape.as_list() for k, v in features.items()} == {
        "token_ids": [16, 32],
        "segment_ids": [16, 32],
        "mask_positions": [16, 3],
    }
    assert {k: v.shape.as_list() for k, v in labels.items()} == {
        "mlm_labels": [16, 3],
        "mlm_weights": [16, 3],
        "nsp_labels": [16],
    }
    # 15% of ~29 tokens, capped at 3
    assert (labels["mlm_weights"].numpy().sum(1) == 3).mean() > 0.5


def test_too_few_documents_are_refused(corpus):
    _, tokenizer, _ = corpus
    one = pretraining.tokenize_documents([["One sentence.", "And another."]], tokenizer)
    with pytest.raises(ValueError, match="two documents or more"):
        pretraining.sentence_pairs(one, MAX_LENGTH, 10)
    single = pretraining.tokenize_documents([["Only one."], ["Only two."]], tokenizer)
    with pytest.raises(ValueError, match="0 sentences followed by another"):
        pretraining.sentence_pairs(single, MAX_LENGTH, 10)


def test_documents_from_blocks_files_and_folders(tmp_path):
    (tmp_path / "a.txt").write_text(
        " = Heading = \nThe cat sat. It slept!\nThen it woke.\n\n\nA dog ran. \n\n"
        + "word " * 450
        + "\n"
    )
    with gzip.open(tmp_path / "b.txt.gz", "wt") as file:
        file.write("Zipped text. Two sentences.\n")
    (tmp_path / "empty.txt").write_text("\n\n")
    read = documents.read_documents(
        [tmp_path / "a.txt", tmp_path / "b.txt.gz", tmp_path / "empty.txt"]
    )
    assert read.documents[:2] == [["The cat sat.", "It slept!", "Then it woke."], ["A dog ran."]]
    assert [len(s.split()) for s in read.documents[2]] == [200, 200, 50]
    assert read.documents[3] == ["Zipped text.", "Two sentences."]
    assert (read.headings, read.long_sentences, read.single_sentence, read.empty_files) == (
        1,
        1,
        1,
        1,
    )
    per_file = documents.read_documents(tmp_path, one_document_per_file=True)
    assert len(per_file) == 2 and per_file.documents[1] == read.documents[3]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"Fine line.\n\xffbad\n", r"bad.txt:2: invalid UTF-8 \(byte 0xff at column 1\)"),
        (b"\n \n", r"no text \(1 empty files\)"),
    ],
)
def test_bad_documents_are_one_line_errors(tmp_path, content, message):
    (tmp_path / "bad.txt").write_bytes(content)
    with pytest.raises(text.DataError, match=message) as error:
        documents.read_documents(str(tmp_path / "bad.txt"))
    assert "\n" not in str(error.value)
    with pytest.raises(text.DataError, match="missing.txt: file not found"):
        documents.read_documents(str(tmp_path / "missing.txt"))


def test_sentence_splitting_keeps_abbreviations_numbers_and_quotes():
    assert documents.split_sentences('He said "Go." Then 3.5 hours (e.g. two) passed. A b! C?') == [
        'He said "Go."',
        "Then 3.5 hours (e.g. two) passed.",
        "A b!",
        "C?",
    ]


def test_the_builtin_documents_are_topical_labelled_and_deterministic():
    docs = synthetic_documents.document_corpus(200, seed=1)
    assert docs == synthetic_documents.document_corpus(200, seed=1)
    assert all(3 <= len(d) <= 10 for d in docs)
    verbs = {
        verb.removesuffix("s")
        for _, _, topic_verbs in synthetic_documents.TOPICS.values()
        for verb in topic_verbs
    }
    topic_of = {
        noun: topic
        for topic, (nouns, _, _) in synthetic_documents.TOPICS.items()
        for noun in nouns
        if noun not in verbs
    }
    labelled = synthetic_documents.labelled_documents(200, seed=1)
    assert [document for _, document in labelled] == docs
    for topic, document in labelled[:50]:
        words = {w.strip(".").lower().removesuffix("s") for s in document for w in s.split()}
        # one topic a document: its label
        assert {topic_of[w] for w in words if w in topic_of} == {topic}


def test_labelled_tsv_single_and_pair_files(tmp_path):
    (tmp_path / "single.tsv").write_text("pos\tA fine film.\n\nneg\t  \nneg\tDull.\n")
    single = classification.read_labelled_tsv(tmp_path / "single.tsv")
    assert (single.labels, single.texts_a, single.texts_b, single.skipped_empty) == (
        ["pos", "neg"],
        ["A fine film.", "Dull."],
        None,
        2,
    )
    (tmp_path / "pairs.tsv").write_text("yes\tA man.\tA person.\nno\tA cat.\n")
    with pytest.raises(text.DataError, match=r"pairs.tsv:2: expected 3 tab-separated columns"):
        classification.read_labelled_tsv(tmp_path / "pairs.tsv")
    (tmp_path / "unlabelled.tsv").write_text("pos\tA fine film.\n\tDull.\n")
    with pytest.raises(
        text.DataError, match=r"unlabelled.tsv:2: an empty label \(label<TAB>text...\)"
    ):
        classification.read_labelled_tsv(tmp_path / "unlabelled.tsv")
    # Files written with a byte-order mark and joined: the mark starts a line past the first.
    (tmp_path / "joined.tsv").write_text("\ufeffpos\tGood.\nneg\tBad.\n\ufeffpos\tNice.\n")
    assert classification.read_labelled_tsv(tmp_path / "joined.tsv").labels == ["pos", "neg", "pos"]


def test_pack_trims_the_longer_segment_and_says_so():
    a = tf.ragged.constant([[10, 11, 12, 13, 14, 15], [10]])
    b = tf.ragged.constant([[20, 21, 22], [20]])
    token_ids, segment_ids, truncated = preprocessors.pack([a, b], max_length=8)
    assert token_ids.numpy().tolist() == [
        [CLS_ID, 10, 11, 12, SEP_ID, 20, 21, SEP_ID],
        [CLS_ID, 10, SEP_ID, 20, SEP_ID, 0, 0, 0],
    ]
    assert segment_ids.numpy().tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0]]
    assert truncated.numpy().tolist() == [True, False]


def test_the_bert_preprocessor_rebuilds_from_its_config_and_packs_the_classification_pipeline():
    import keras

    texts_a, texts_b = ["a red car stops .", "the dog"], ["it rains today and tomorrow .", "sleeps"]
    tokenizer = tokenizers.WordPieceTokenizer(
        tokenizers.learn_wordpiece_vocabulary(texts_a + texts_b, 80)
    )
    preprocessor = preprocessors.BertPreprocessor(tokenizer, max_length=9)
    rows = preprocessor(tf.constant(texts_a), tf.constant(texts_b))
    rebuilt = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(preprocessor)
    )
    again = rebuilt(tf.constant(texts_a), tf.constant(texts_b))
    for key in ("token_ids", "segment_ids"):
        np.testing.assert_array_equal(again[key], rows[key])
    data = classification.LabelledTexts(["x", "y"], texts_a, texts_b, 0, "test")
    ((features, _),) = classification.classification_dataset(
        data, {"x": 0, "y": 1}, preprocessor, batch_size=2, shuffle=False
    )
    width = rows["token_ids"].shape[1]
    np.testing.assert_array_equal(features["token_ids"][:, :width], rows["token_ids"])
    assert not np.any(features["token_ids"][:, width:])  # padded to max_length
