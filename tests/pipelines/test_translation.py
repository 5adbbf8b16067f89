import collections
from pathlib import Path

import numpy as np
import pytest

from benchmarks.measures import count_truncated, padding_fraction
from pipelines.synthetic import translation_corpus
from pipelines.text import read_parallel
from pipelines.tokenizers import (
    BOS_ID,
    EOS_ID,
    WordPieceTokenizer,
    learn_wordpiece_vocabulary,
)
from pipelines.translation import (
    translation_dataset,
    translation_epochs,
    width_count,
)

MULTI30K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "multi30k"


@pytest.fixture(scope="module")
def corpus():
    return translation_corpus(seed=0, train_size=1500, valid_size=0, test_size=0)["train"]


@pytest.fixture(scope="module")
def tokenizers(corpus):
    return (
        WordPieceTokenizer(learn_wordpiece_vocabulary(corpus.sources, 2000)),
        WordPieceTokenizer(learn_wordpiece_vocabulary(corpus.targets, 2000)),
    )


def dataset(corpus, tokenizers, **options):
    options = {"batch_size": 32, "max_length": 64, **options}
    return translation_dataset(corpus.sources, corpus.targets, *tokenizers, **options)


def rows(dataset):
    """Every pair of a finite dataset as `(source, target_in, target_out)` id tuples."""
    pairs = []
    for inputs, target_out in dataset:
        for source, target_in, out in zip(
            inputs["source"].numpy(), inputs["target_in"].numpy(), target_out.numpy()
        ):
            pairs.append((unpad(source), unpad(target_in), unpad(out)))
    return pairs


def unpad(ids):
    length = int(np.count_nonzero(ids))
    assert not ids[length:].any(), "padding only at the end"
    assert ids[:length].all(), "no padding inside a row"
    return tuple(ids[:length].tolist())


def expected_rows(corpus, tokenizers, max_length):
    source_tokenizer, target_tokenizer = tokenizers
    sources = source_tokenizer.tokenize(corpus.sources).to_list()
    targets = target_tokenizer.tokenize(corpus.targets).to_list()
    return [
        (
            tuple(source[:max_length]),
            tuple(([BOS_ID] + target)[:max_length]),
            tuple((target + [EOS_ID])[:max_length]),
        )
        for source, target in zip(sources, targets)
    ]


def test_without_shuffle_or_buckets_the_order_is_kept(corpus, tokenizers):
    got = rows(dataset(corpus, tokenizers, shuffle=False, bucket=False))
    assert got == expected_rows(corpus, tokenizers, 64)


@pytest.mark.parametrize("options", [{}, {"shuffle": False}, {"cache": False, "seed": 5}])
def test_bucketing_and_shuffling_keep_every_pair_once(corpus, tokenizers, options):
    got = rows(dataset(corpus, tokenizers, **options))
    expected = expected_rows(corpus, tokenizers, 64)
    assert collections.Counter(got) == collections.Counter(expected)
    assert got != expected  # the order did change


def test_batches_are_int32_padded_and_shifted(corpus, tokenizers):
    for inputs, target_out in dataset(corpus, tokenizers):
        source, target_in = inputs["source"].numpy(), inputs["target_in"].numpy()
        target_out = target_out.numpy()
        assert source.dtype == target_in.dtype == target_out.dtype == np.int32
        assert target_in.shape == target_out.shape
        assert source.shape[0] == target_in.shape[0] <= 32
        lengths = np.count_nonzero(target_out, axis=1)
        assert (lengths == np.count_nonzero(target_in, axis=1)).all()
        for row_in, row_out, length in zip(target_in, target_out, lengths):
            assert row_in[0] == BOS_ID and row_out[length - 1] == EOS_ID
            np.testing.assert_array_equal(row_in[1:length], row_out[: length - 1])
            assert not row_in[length:].any() and not row_out[length:].any()
        # No column is padding in every row: batches are trimmed.
        assert np.count_nonzero(source, axis=1).max() == source.shape[1]
        assert lengths.max() == target_out.shape[1]


def test_truncation_to_max_length(corpus, tokenizers):
    max_length = 8
    got = rows(dataset(corpus, tokenizers, max_length=max_length, shuffle=False, bucket=False))
    assert got == expected_rows(corpus, tokenizers, max_length)
    assert max(len(ids) for pair in got for ids in pair) == max_length
    truncated = sum(
        len(source) > max_length or len(target) + 1 > max_length
        for source, target in zip(
            tokenizers[0].tokenize(corpus.sources).to_list(),
            tokenizers[1].tokenize(corpus.targets).to_list(),
        )
    )
    assert truncated > 0
    assert count_truncated(corpus.sources, corpus.targets, *tokenizers, max_length) == truncated


@pytest.mark.slow
def test_same_seed_same_order_and_reshuffling_per_epoch(corpus, tokenizers):
    first = dataset(corpus, tokenizers, seed=1)
    epoch_1, epoch_2 = rows(first), rows(first)
    assert epoch_1 == rows(dataset(corpus, tokenizers, seed=1))
    assert epoch_1 != epoch_2
    assert epoch_1 != rows(dataset(corpus, tokenizers, seed=2))
    fixed = dataset(corpus, tokenizers, seed=1, reshuffle_each_iteration=False)
    assert rows(fixed) == rows(fixed)


@pytest.mark.slow
def test_each_epoch_has_one_order_of_its_own(corpus, tokenizers):
    def epochs(seed):
        return translation_epochs(corpus.sources, corpus.targets, *tokenizers, 32, 64, seed=seed)

    first = epochs(1)
    order = rows(first(3))
    assert rows(first(3)) == order == rows(epochs(1)(3))  # the same every time
    assert rows(first(4)) != order and rows(epochs(2)(3)) != order
    assert collections.Counter(order) == collections.Counter(rows(first(4)))
    assert collections.Counter(order) == collections.Counter(expected_rows(corpus, tokenizers, 64))
    assert first(3).cardinality() == -(-len(corpus.sources) // 32)


def test_drop_remainder_and_repeat(corpus, tokenizers):
    for bucket in (True, False):
        full = dataset(corpus, tokenizers, drop_remainder=True, bucket=bucket)
        assert full.element_spec[1].shape.as_list() == [32, None]
        assert all(out.shape[0] == 32 for _, out in full)
    repeated = dataset(corpus, tokenizers, repeat=True)
    batches_per_epoch = -(-len(corpus) // 32)
    assert len(list(repeated.take(3 * batches_per_epoch))) == 3 * batches_per_epoch


@pytest.mark.slow
def test_length_multiple_bounds_the_batch_shapes_and_only_adds_padding(corpus, tokenizers):
    max_length = 20  # not a multiple of 8: the longest batches are 20 wide
    options = dict(max_length=max_length, seed=3, reshuffle_each_iteration=False)
    plain = dataset(corpus, tokenizers, **options)
    padded = dataset(corpus, tokenizers, **options, length_multiple=8)
    assert rows(padded) == rows(plain)  # the same pairs in the same order
    shapes = collections.Counter(
        (inputs["source"].shape[1], inputs["target_in"].shape[1], out.shape[1])
        for inputs, out in padded
    )
    widths = {width for shape in shapes for width in shape}
    assert widths <= {8, 16, 20} and len(widths) > 1, shapes
    assert width_count(max_length, 8) == 3  # 8, 16, 20: what the job's XLA log line counts
    assert all(t_in == t_out for _, t_in, t_out in shapes)
    for (inputs, _), (unpadded, _) in zip(padded, plain):  # the fewest columns that hold the batch
        for key in ("source", "target_in"):
            assert inputs[key].shape[1] == min(-(-unpadded[key].shape[1] // 8) * 8, max_length)
    epochs = translation_epochs(
        corpus.sources, corpus.targets, *tokenizers, 32, 64, length_multiple=16
    )
    assert all(inputs["source"].shape[1] % 16 == 0 for inputs, _ in epochs(0))
    with pytest.raises(ValueError, match="length_multiple must be >= 1, got 0"):
        dataset(corpus, tokenizers, length_multiple=0)


def test_bucketing_keeps_padding_low(corpus, tokenizers):
    bucketed = padding_fraction(dataset(corpus, tokenizers, batch_size=16))
    unbucketed = padding_fraction(dataset(corpus, tokenizers, batch_size=16, bucket=False))
    assert bucketed < 0.1 < unbucketed


def test_mismatched_inputs_are_refused(tokenizers):
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        translation_dataset(["a", "b"], ["x"], *tokenizers, batch_size=2, max_length=8)


def test_multi30k_pipeline():
    if not MULTI30K.exists():
        pytest.skip(f"{MULTI30K} not present")
    corpus = read_parallel(MULTI30K / "raw" / "val.de.gz", MULTI30K / "raw" / "val.en.gz")
    tokenizers = (
        WordPieceTokenizer(learn_wordpiece_vocabulary(corpus.sources, 4000)),
        WordPieceTokenizer(learn_wordpiece_vocabulary(corpus.targets, 4000)),
    )
    data = dataset(corpus, tokenizers, batch_size=64, max_length=64)
    assert sum(out.shape[0] for _, out in data) == len(corpus) == 1014
    assert padding_fraction(data) < 0.15


@pytest.mark.parametrize("bucket", [True, False])
@pytest.mark.parametrize("drop_remainder", [True, False])
def test_declared_cardinality_is_the_true_number_of_batches(
    corpus, tokenizers, bucket, drop_remainder
):
    batches = dataset(corpus, tokenizers, bucket=bucket, drop_remainder=drop_remainder)
    assert int(batches.cardinality()) == len(list(batches))


def test_sources_without_any_token_are_kept_as_empty_rows(tokenizers):
    # Characters the tokenizer removes (zero-width space, soft hyphen)
    # leave no token: a chunk of only such sources once crashed TensorFlow.
    sources, targets = ["\u200b", "\u00ad"], ["the dog", "a cat"]
    for batch_size in (1, 2):
        pairs = rows(
            translation_dataset(
                sources,
                targets,
                *tokenizers,
                batch_size=batch_size,
                max_length=8,
                shuffle=False,
                bucket=False,
            )
        )
        assert [source for source, _, _ in pairs] == [(), ()]
        assert [out[-1] for _, _, out in pairs] == [EOS_ID, EOS_ID]


@pytest.mark.parametrize("length_multiple", [1, 16])
def test_a_token_budget_caps_each_batch_and_keeps_every_pair_once(
    corpus, tokenizers, length_multiple
):
    budget = 300
    batches = dataset(
        corpus, tokenizers, batch_size=1000, batch_tokens=budget, length_multiple=length_multiple
    )
    step = max(length_multiple, 8)  # columns are counted in steps of 8 at least
    sizes, shapes = [], set()
    for inputs, target_out in batches:
        pairs = target_out.shape[0]
        columns = max(inputs["source"].shape[1], target_out.shape[1])
        assert pairs * -(-columns // step) * step <= budget or pairs == 1, (pairs, columns)
        sizes.append(pairs)
        shapes.add((pairs, inputs["source"].shape[1], target_out.shape[1]))
    assert len(set(sizes)) >= 2  # short pairs share a batch with more of their kind
    got = [pair for pair in rows(batches) if pair != ((), (), ())]
    assert collections.Counter(got) == collections.Counter(expected_rows(corpus, tokenizers, 64))
    # XLA's case: the pairs of a batch follow from its columns, so few shapes
    if length_multiple > 1:
        assert len(shapes) <= width_count(64, 16) ** 2 and len(
            {(s, t) for _, s, t in shapes}
        ) == len(shapes)
    capped = dataset(corpus, tokenizers, batch_size=8, batch_tokens=10_000)
    assert max(out.shape[0] for _, out in capped) == 8  # batch_size still bounds the pairs


@pytest.mark.slow
def test_token_budget_epochs_have_one_declared_length_and_orders_of_their_own(corpus, tokenizers):
    def epochs(seed):
        return translation_epochs(
            corpus.sources, corpus.targets, *tokenizers, 1000, 64, seed=seed, batch_tokens=400
        )

    first = epochs(1)
    steps = int(first(0).cardinality())
    for epoch in (0, 1, 5):
        assert int(first(epoch).cardinality()) == len(list(first(epoch))) == steps
    order = rows(first(3))
    assert order == rows(epochs(1)(3)) and order != rows(first(4))
    # An epoch may drop or repeat the few pairs of its last batches, no more.
    assert len(set(order)) >= 0.95 * len(set(expected_rows(corpus, tokenizers, 64)))


def test_a_token_budget_needs_bucketing_and_batches_of_varying_size(corpus, tokenizers):
    for options in ({"bucket": False}, {"drop_remainder": True}):
        with pytest.raises(
            ValueError, match="batch_tokens needs bucket=True and drop_remainder=False"
        ):
            dataset(corpus, tokenizers, batch_tokens=256, **options)
    with pytest.raises(ValueError, match="batch_tokens must be >= 1, got 0"):
        dataset(corpus, tokenizers, batch_tokens=0)
