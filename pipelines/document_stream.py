"""BERT's documents read as a stream: blocks of documents, pairs and
masks in tf.data, bounded memory.

    files, in an order of the epoch's ─► documents, as each file's lines are read
        ─► blocks of about `BLOCK_CHARS` characters ─► tokenize ─► `TokenizedDocuments`
        ─flat_map─► the block's sentence pairs (`pretraining.pair_maker`) ─► masks ─► batches

A block plays the part of the whole corpus in `pretraining.pretraining_dataset`:
its pairs (`pretraining.pairs_per_epoch` of the block) take A and B from its
documents, and a NotNext pair's random B from another document of the same
block. That is a bounded buffer of nearby documents, where BERT's
`create_pretraining_data.py` draws from the whole corpus. A corpus that fits
one block gives the batches of `pretraining_dataset` exactly; nothing but
the block being paired (and the next, read ahead) is held.
"""

import contextlib
import itertools
import re

import numpy as np
import tensorflow as tf

from pipelines import documents, pretraining, text
from pipelines.prefetch import prefetched

# About this many characters of text a block (some 2M tokens of English, a few thousand documents).
BLOCK_CHARS = 2**23
_TOP_UP = 1  # the seed key of the extra pass that tops up a short epoch
# A pair's index: its block's number above these bits, its place in the block below.
_INDEX_BITS = 32


def document_blocks(
    files,
    tokenizer,
    order_seed=None,
    block_chars=BLOCK_CHARS,
    counts=None,
    held_out=None,
    **reading,
):
    """Yields `TokenizedDocuments` of consecutive documents of
    `files`, about `block_chars` characters each.

    Args:
        files: list of str. Document files (`documents.document_files`).
        tokenizer: pipelines.tokenizers.WordPieceTokenizer. The tokenizer.
        order_seed: int. The files are read in an order drawn with it;
            `None` for the order given. Defaults to None.
        block_chars: int. A block is cut after the document that reaches
            this many characters; a block `sentence_pairs` cannot draw from
            (one document, or no two sentences in a row) takes the next
            documents too; an unpairable rest at the end is left out.
            Defaults to `BLOCK_CHARS` (2**23).
        counts: pipelines.documents.Documents. Counts what reading handled;
            `None` for counts that are not kept. Defaults to None.
        held_out: tuple. `(path, n)`: the first `n` documents of `path` are
            left out (they validate the model); `None` for none. Defaults to
            None.
        **reading: `one_document_per_file` (bool) and `max_sentence_words`
            (int), as `documents.read_documents` takes them.

    Yields:
        `pipelines.pretraining.TokenizedDocuments`, one a block.

    Raises:
        text.DataError: as `documents.read_documents`, when the reading
            reaches the problem.

    Example:

        >>> from pathlib import Path
        >>> from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary
        >>> _ = Path("a.txt").write_text("The cat sat. It slept!\\n\\nA dog ran. It barked.\\n")
        >>> texts = ["The cat sat. It slept! A dog ran. It barked."]
        >>> tokenizer = WordPieceTokenizer(learn_wordpiece_vocabulary(texts, 60))
        >>> [block.num_documents for block in document_blocks(["a.txt"], tokenizer)]
        [2]
    """
    counts = counts if counts is not None else documents.Documents([])
    order = (
        list(files)
        if order_seed is None
        else [files[i] for i in np.random.default_rng(order_seed).permutation(len(files))]
    )
    pending, characters = [], 0
    for path in order:
        skipped = held_out[1] if held_out and path == held_out[0] else 0
        for document in itertools.islice(
            documents.file_documents(path, counts, **reading), skipped, None
        ):
            pending.append(document)
            characters += sum(len(sentence) for sentence in document)
            if characters >= block_chars:
                block = pretraining.tokenize_documents(pending, tokenizer)
                if pretraining.is_pairable(block):
                    yield block
                    pending, characters = [], 0
    if pending:
        block = pretraining.tokenize_documents(pending, tokenizer)
        if pretraining.is_pairable(block):
            yield block


@contextlib.contextmanager
def reported():
    """Turns a `text.DataError` raised while a stream of documents is
    read (inside TensorFlow) into itself.

    A context manager; other `tf.errors.OpError`s are raised as they are.

    Raises:
        text.DataError: when a stream read inside it raised one.
    """
    try:
        yield
    except tf.errors.OpError as error:
        found = re.search(r"DataError: ([^\n]+)", error.message)
        if found is None:
            raise
        raise text.DataError(found.group(1)) from None


def estimated_pairs(files, tokenizer, max_length, sample_chars=2**20):
    """About how many pairs an epoch of `files` holds (`pretraining.pairs_per_epoch` of the whole),
    from the files' sizes and the tokens a byte of their first `sample_chars` bytes.

    Args:
        files: list of str. Document files (`documents.document_files`).
        tokenizer: pipelines.tokenizers.WordPieceTokenizer. The tokenizer.
        max_length: int. The tokens of a pair.
        sample_chars: int. The bytes read from the first files. Defaults to
            2**20.

    Returns:
        int, at least 1.
    """
    sample, characters = [], 0
    for path in files:  # bytes, not checked: training reads every line and says what is wrong
        with text.open_bytes(path) as stream:
            for raw in stream:
                sample.append(raw.decode("utf-8", "replace").strip())
                characters += len(raw)
                if characters >= sample_chars:
                    break
        if characters >= sample_chars:
            break
    tokens = int(
        tokenizer.tokenize(
            tf.constant([line for line in sample if line] or [""])
        ).flat_values.shape[0]
    )
    total = sum(text.text_bytes(path) for path in files) * tokens / max(characters, 1)
    return max(1, int(total) // max(1, max_length - 3))


def streamed_pretraining_epochs(
    files,
    preprocessor,
    batch_size,
    num_pairs,
    seed=0,
    block_chars=BLOCK_CHARS,
    max_predictions=None,
    mask_rate=0.15,
    whole_word=False,
    short_sequence_probability=0.1,
    next_probability=0.5,
    held_out=None,
    **reading,
):
    """`pretraining.pretraining_epochs` over document files read as a stream.

    Epoch `e` reads the files in an order drawn from `seed` and `e`, cuts
    them into blocks (`document_blocks`) and makes each block's pairs and
    masks, keyed by `seed`, `e` and the pair's block and place: the same
    batches every time, so a resumed run sees the ones it missed. An epoch
    holds `num_pairs // batch_size` batches (`estimated_pairs`): cut, or
    topped up from another pass (again as often as needed).

    Args:
        files: list of str. Document files (`documents.document_files`).
        preprocessor: pipelines.preprocessors.BertPreprocessor. Gives the
            tokenizer and `max_length`.
        batch_size: int. Pairs a batch.
        num_pairs: int. Pairs an epoch.
        seed: int. The data's seed. Defaults to 0.
        block_chars: int. As `document_blocks`. Defaults to `BLOCK_CHARS`
            (2**23).
        max_predictions: int. The most masked tokens per pair, as
            `pretraining.pretraining_dataset`; `None` for
            `pretraining.default_max_predictions`. Defaults to None.
        mask_rate: float. The fraction of tokens masked
            (`pretraining.masker`). Defaults to 0.15.
        whole_word: bool. Whether whole words are masked
            (`pretraining.masker`). Defaults to False.
        short_sequence_probability: float. The probability of a shorter
            target length (`pretraining.sentence_pairs`). Defaults to 0.1.
        next_probability: float. The probability that B follows A
            (`pretraining.sentence_pairs`). Defaults to 0.5.
        held_out: tuple. `(path, n)`, as `document_blocks`. Defaults to
            None.
        **reading: `one_document_per_file` and `max_sentence_words`, as
            `document_blocks`.

    Returns:
        A function `epoch -> tf.data.Dataset` of that epoch's `(features, labels)` batches.
    """
    max_length, tokenizer = preprocessor.max_length, preprocessor.tokenizer
    max_predictions = max_predictions or pretraining.default_max_predictions(mask_rate, max_length)
    steps = max(1, num_pairs // batch_size)
    signature = (
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([], tf.int64),
        tf.TensorSpec([], tf.int64),
    )

    def one_pass(epoch, *key):
        order_seed = int(np.random.SeedSequence([seed, epoch, *key]).generate_state(1)[0])
        first_block = 2**20 if key else 0  # a top-up pass's blocks draw other numbers

        def blocks():
            cut = document_blocks(
                files, tokenizer, order_seed, block_chars, held_out=held_out, **reading
            )
            for number, block in enumerate(cut):
                yield (
                    block.ids,
                    block.sentence_starts,
                    block.document_starts,
                    first_block + number,
                    pretraining.pairs_per_epoch(block, max_length),
                )

        def pairs_of_block(ids, starts, document_starts, number, count):
            make_pair = pretraining.pair_maker(
                ids,
                starts,
                document_starts,
                max_length,
                seed,
                epoch,
                short_sequence_probability,
                next_probability,
                first_index=number * 2**_INDEX_BITS,
            )
            return tf.data.Dataset.range(count).map(make_pair, num_parallel_calls=tf.data.AUTOTUNE)

        pairs = tf.data.Dataset.from_generator(blocks, output_signature=signature).flat_map(
            pairs_of_block
        )
        mask = pretraining.masker(
            tokenizer.vocabulary, max_predictions, mask_rate, whole_word, seed=seed, epoch=epoch
        )
        return pairs.map(mask, num_parallel_calls=tf.data.AUTOTUNE).batch(
            batch_size, drop_remainder=True
        )

    def epoch_batches(epoch):
        batches = one_pass(epoch).concatenate(one_pass(epoch, _TOP_UP).repeat()).take(steps)
        return prefetched(batches.apply(tf.data.experimental.assert_cardinality(steps)))

    return epoch_batches
