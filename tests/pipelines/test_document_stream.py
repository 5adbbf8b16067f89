"""BERT's documents as a stream: blocks, their pairs and masks, the
epoch's length, bounded memory.
"""

import numpy as np
import pytest

from pipelines import (
    document_stream,
    documents,
    preprocessors,
    pretraining,
    synthetic_documents,
    tokenizers,
)

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    """The built-in documents in 3 files (blank lines between documents), and their tokenizer."""
    docs = synthetic_documents.document_corpus(300, seed=3)
    folder = tmp_path_factory.mktemp("documents")
    for number in range(3):
        part = docs[number::3]
        (folder / f"{number}.txt").write_text(
            "\n\n".join(" ".join(document) for document in part) + "\n"
        )
    vocabulary = tokenizers.learn_wordpiece_vocabulary(
        [s for d in docs for s in d], 800, lowercase=True
    )
    tokenizer = tokenizers.WordPieceTokenizer(vocabulary, lowercase=True)
    return documents.document_files([folder]), preprocessors.BertPreprocessor(
        tokenizer, max_length=MAX_LENGTH
    )


def _arrays(batches):
    return [
        {k: v for part in batch for k, v in part.items()} for batch in batches.as_numpy_iterator()
    ]


@pytest.mark.slow
def test_a_corpus_in_one_block_gives_the_batches_of_the_in_memory_pipeline(corpus_files):
    files, preprocessor = corpus_files
    files = files[:1]  # one file: its order is every epoch's
    corpus = pretraining.tokenize_documents(
        documents.read_documents(files).documents, preprocessor.tokenizer
    )
    pairs = pretraining.pairs_per_epoch(corpus, MAX_LENGTH)
    blocks = list(document_stream.document_blocks(files, preprocessor.tokenizer, block_chars=10**9))
    assert len(blocks) == 1 and blocks[0].num_tokens == corpus.num_tokens
    expected = _arrays(pretraining.pretraining_dataset(corpus, preprocessor, 32, seed=4, epoch=3))
    streamed = document_stream.streamed_pretraining_epochs(
        files, preprocessor, 32, pairs, seed=4, block_chars=10**9
    )
    got = _arrays(streamed(3))
    assert len(got) == len(expected) == pairs // 32
    assert streamed(3).options().autotune.enabled is False  # pipelines/prefetch.py
    for a, b in zip(expected, got):
        assert all((a[k] == b[k]).all() for k in a)


def test_blocks_cut_the_documents_in_order_each_once(corpus_files):
    files, preprocessor = corpus_files
    read = documents.read_documents(files)
    whole = pretraining.tokenize_documents(read.documents, preprocessor.tokenizer)
    blocks = list(document_stream.document_blocks(files, preprocessor.tokenizer, block_chars=3000))
    assert len(blocks) > 5 and all(pretraining.is_pairable(block) for block in blocks)
    streamed = np.concatenate([block.ids for block in blocks])
    assert (streamed == whole.ids[: len(streamed)]).all()
    shortest = min(sum(len(sentence) for sentence in document) for document in read.documents)
    # but an unpairable rest
    assert sum(block.num_documents for block in blocks) >= len(read) - 3000 // shortest


@pytest.mark.slow
def test_an_epoch_is_the_same_every_time_so_a_resumed_run_sees_the_rest(corpus_files):
    files, preprocessor = corpus_files
    epochs = document_stream.streamed_pretraining_epochs(
        files, preprocessor, 16, 200, seed=2, block_chars=4000
    )
    whole = _arrays(epochs(1))
    assert len(whole) == 12
    assert all(
        (a["token_ids"] == b["token_ids"]).all()
        for a, b in zip(_arrays(epochs(1).skip(9)), whole[9:])
    )
    assert not all(
        (a["token_ids"] == b["token_ids"]).all() for a, b in zip(_arrays(epochs(2)), whole)
    )


def test_an_epoch_longer_than_a_pass_is_topped_up_and_the_estimate_is_near(corpus_files):
    files, preprocessor = corpus_files
    corpus = pretraining.tokenize_documents(
        documents.read_documents(files).documents, preprocessor.tokenizer
    )
    pairs = pretraining.pairs_per_epoch(corpus, MAX_LENGTH)
    estimate = document_stream.estimated_pairs(files, preprocessor.tokenizer, MAX_LENGTH)
    assert abs(estimate - pairs) < 0.1 * pairs, (estimate, pairs)
    epochs = document_stream.streamed_pretraining_epochs(
        files, preprocessor, 32, 3 * pairs // 2, seed=2, block_chars=4000
    )
    batches = _arrays(epochs(0))
    assert len(batches) == 3 * pairs // 2 // 32
    rows = np.concatenate([batch["token_ids"] for batch in batches])
    # a top-up pass has pairs of its own
    assert len({row.tobytes() for row in rows}) > 0.99 * len(rows)


@pytest.mark.slow
def test_the_stream_holds_as_much_memory_for_30x_the_documents_as_for_1x(corpus_files, tmp_path):
    """Its memory is a block or two: reading 30 times the documents must not add to the peak."""
    from tests.streams import peak_growth_mb as growth

    files, preprocessor = corpus_files
    text = "".join(open(path).read() + "\n" for path in files)
    # fewer pairs a byte
    preprocessor = preprocessors.BertPreprocessor(preprocessor.tokenizer, max_length=256)

    def peak_growth_mb(copies):
        path = tmp_path / f"{copies}.txt"
        path.write_text(text * copies)
        epochs = document_stream.streamed_pretraining_epochs(
            [path], preprocessor, 32, 10**9, block_chars=200_000
        )
        batches = epochs(0).take(
            document_stream.estimated_pairs([path], preprocessor.tokenizer, 256) // 32
        )
        return growth(lambda: batches.reduce(0, lambda count, _: count + 1))

    peak_growth_mb(1)  # traces the functions
    # 2 and 60 copies: 0.2 and 5.8 MB of text; in one block, the 60 copies added 44 MB (measured).
    # The stream itself moved by up to 11.4 MB in a suite run (6.8 against 18.2): a bound of 20 MB.
    once, thirty_times = peak_growth_mb(2), peak_growth_mb(60)
    assert thirty_times < once + 20, (once, thirty_times)
