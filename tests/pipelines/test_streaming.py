import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines import text
from pipelines.streaming import ShardedCorpus, corpus_files

HOSTILE = [
    "\ufeff Ein Hund. ",
    "Zwei\x0cKatzen\u2028hier.\r",
    "",
    "   ",
    "\u3000ganz breit\u00a0",
    "\x1cRand\x1f",
    "tab\tinside",
    "\u200bzero width\u200b",
    "ü" * 40,
    "\ufeffnot a first line",
]


def write(path, lines, compress=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def streamed(corpus, **options):
    with corpus.reported():
        return [(s.decode(), t.decode()) for s, t in corpus.pairs(**options).as_numpy_iterator()]


def data_error(function):
    with pytest.raises(text.DataError) as caught:
        function()
    return str(caught.value)


def sentences(count, language, seed=0):
    return [f"{language} {seed}-{i}" + " x" * (i % 7) for i in range(count)]


def test_one_shard_streams_the_pairs_read_parallel_reads_in_its_order(tmp_path):
    # 3,000 lines: several of the reader's batches of lines, a hostile line at every tenth.
    sources = [HOSTILE[i % len(HOSTILE)] if i % 10 == 0 else f"Satz {i}" for i in range(3000)]
    targets = [
        HOSTILE[(i + 3) % len(HOSTILE)] if i % 10 == 0 else f"sentence {i}" for i in range(3000)
    ]
    source = write(tmp_path / "train.de.gz", sources, compress=True)
    target = write(tmp_path / "train.en", targets)
    expected = text.read_parallel(source, target)
    corpus = ShardedCorpus.parallel(source, target)
    assert streamed(corpus) == list(zip(expected.sources, expected.targets))
    assert (
        corpus.scan().pairs == len(expected)
        and corpus.scan().skipped_empty == expected.skipped_empty
    )


def test_tsv_shards_stream_the_pairs_read_tsv_reads(tmp_path):
    lines = [
        "Go.\tVe.",
        "\tonly a target",
        "a\tb\r",
        "  \t  ",
        "",
        "x\ty\tz",
        "\ufeffbom\tfirst?",
        " s \t t ",
    ]
    path = write(tmp_path / "pairs.tsv", lines * 300)
    expected = text.read_tsv(path)
    corpus = ShardedCorpus.tsv(path)
    assert streamed(corpus) == list(zip(expected.sources, expected.targets))
    assert corpus.scan().skipped_empty == expected.skipped_empty
    swapped = ShardedCorpus.tsv(path, source_column=1, target_column=0)
    assert streamed(swapped)[0] == ("Ve.", "Go.")


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",))), min_size=1
    )
)
@pytest.mark.slow
def test_a_streamed_line_is_stripped_as_python_strips_it(tmp_path_factory, lines):
    folder = tmp_path_factory.mktemp("lines")
    # the first line's byte order mark is the reader's, not Python's strip
    lines = ["first"] + lines
    corpus = ShardedCorpus.parallel(
        write(folder / "a", lines), write(folder / "b", ["x"] * len(lines))
    )
    # TextLineDataset drops every carriage return
    assert [s.decode() for s, _ in corpus.pairs(skip_empty=False).as_numpy_iterator()] == [
        line.replace("\r", "").strip() for line in lines
    ]


@pytest.mark.slow
def test_shards_give_every_pair_once_in_a_seeded_order(tmp_path):
    for shard in range(5):
        write(tmp_path / f"train-{shard}.de", sentences(300, "de", shard))
        write(tmp_path / f"train-{shard}.en.gz", sentences(300, "en", shard), compress=True)
    corpus = ShardedCorpus.parallel(tmp_path / "train-*.de", tmp_path / "train-*.en.gz")
    expected = [
        (s, t)
        for shard in range(5)
        for s, t in zip(sentences(300, "de", shard), sentences(300, "en", shard))
    ]
    in_name_order, seeded, again = (
        streamed(corpus),
        streamed(corpus, order_seed=3),
        streamed(corpus, order_seed=3),
    )
    assert sorted(in_name_order) == sorted(seeded) == sorted(expected)
    assert seeded == again and seeded != in_name_order
    assert corpus.scan().pairs == 1500
    # from the files' sizes (a gzip file's last 4 bytes) alone
    assert abs(corpus.estimated_pairs() - 1500) < 15


def test_a_vocabulary_sample_takes_the_first_pairs_of_every_shard(tmp_path):
    for shard in range(4):
        write(
            tmp_path / f"{shard}.tsv",
            [""]
            + [f"{s}\t{t}" for s, t in zip(sentences(50, "de", shard), sentences(50, "en", shard))],
        )
    sample = ShardedCorpus.tsv(tmp_path).head(10)  # 3 a shard, empty pairs skipped, 10 in all
    assert (
        sample.sources
        == [f"de {shard}-{i}" + " x" * i for shard in range(4) for i in range(3)][:10]
    )
    assert len(sample.targets) == 10


@pytest.mark.parametrize("shards", [5, 1])
def test_two_workers_read_disjoint_parts_that_cover_the_corpus(tmp_path, shards):
    for shard in range(shards):
        write(
            tmp_path / f"{shard}.tsv",
            [f"{s}\t{t}" for s, t in zip(sentences(300, "de", shard), sentences(300, "en", shard))],
        )
    corpus = ShardedCorpus.tsv(tmp_path)
    parts = [streamed(corpus, order_seed=1, worker=worker, workers=2) for worker in (0, 1)]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(streamed(corpus))
    if shards == 1:  # data sharding: every other pair
        assert len(parts[0]) == len(parts[1]) == 150


@pytest.mark.slow
def test_a_bad_line_in_a_middle_shard_names_its_file_and_line(tmp_path):
    for shard in range(5):
        write(tmp_path / f"{shard}.de", sentences(2000, "de", shard))
        write(tmp_path / f"{shard}.en", sentences(2000, "en", shard))
    bad = tmp_path / "2.en"
    lines = bad.read_bytes().split(b"\n")
    lines[1499] = b"ab\xffcd"
    bad.write_bytes(b"\n".join(lines))  # the last line ends with its newline still
    corpus = ShardedCorpus.parallel(tmp_path / "*.de", tmp_path / "*.en")
    expected = f"{bad}:1500: invalid UTF-8 (byte 0xff at column 3)"
    assert data_error(corpus.scan) == expected
    assert data_error(lambda: streamed(corpus, order_seed=7)) == expected


@pytest.mark.parametrize("lines", [(5, 4), (1024, 1025), (2048, 2047)])
def test_shards_of_unequal_length_are_reported_as_read_parallel_reports_them(tmp_path, lines):
    source = write(tmp_path / "a.de", sentences(lines[0], "de"))
    target = write(tmp_path / "a.en", sentences(lines[1], "en"))
    assert data_error(ShardedCorpus.parallel(source, target).scan) == (
        f"{source} has {lines[0]} lines but {target} has {lines[1]}"
    )


def test_a_tsv_line_short_of_columns_and_corrupt_gzip_are_reported(tmp_path):
    tsv = write(tmp_path / "a.tsv", ["a\tb"] * 1500 + ["no tab here"] + ["c\td"] * 10)
    assert (
        data_error(ShardedCorpus.tsv(tsv).scan)
        == f"{tsv}:1501: expected at least 2 tab-separated columns, found 1"
    )
    good = write(tmp_path / "b.de", sentences(100, "de"))
    corrupt = tmp_path / "b.en.gz"
    corrupt.write_bytes(gzip.compress("".join(sentences(100, "en")).encode())[:40] + b"\x00" * 40)
    assert data_error(ShardedCorpus.parallel(good, corrupt).scan).startswith(f"{corrupt}: ")


def test_what_a_spec_names(tmp_path):
    (tmp_path / "empty").mkdir()
    assert (
        data_error(lambda: corpus_files(tmp_path / "empty"))
        == f"{tmp_path / 'empty'}: a folder without files"
    )
    assert (
        data_error(lambda: corpus_files(tmp_path / "*.de"))
        == f"{tmp_path / '*.de'}: no file matches"
    )
    assert (
        data_error(lambda: corpus_files(tmp_path / "x.de"))
        == f"{tmp_path / 'x.de'}: file not found"
    )
    write(tmp_path / "1.de", ["a"])
    write(tmp_path / "2.de", ["a"])
    write(tmp_path / "1.en", ["a"])
    assert data_error(lambda: ShardedCorpus.parallel(tmp_path / "*.de", tmp_path / "*.en")) == (
        f"{tmp_path / '*.de'} names 2 files but {tmp_path / '*.en'} names 1"
    )


@pytest.fixture(scope="module")
def multi30k_sized(tmp_path_factory):
    """29,000 generated pairs (Multi30k's size) in one shard, read
    into memory and streamed, and a vocabulary.
    """
    from pipelines.synthetic import translation_corpus
    from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

    train = translation_corpus(seed=0, train_size=29000, valid_size=0, test_size=0)["train"]
    folder = tmp_path_factory.mktemp("multi30k_sized")
    corpus = ShardedCorpus.parallel(
        write(folder / "train.de", train.sources), write(folder / "train.en", train.targets)
    )
    tokenizer = WordPieceTokenizer(
        learn_wordpiece_vocabulary(train.sources[:2000] + train.targets[:2000], 2000)
    )
    return train, corpus, tokenizer


@pytest.mark.slow
def test_a_small_corpus_streamed_gives_the_batches_it_gives_from_memory(multi30k_sized):
    """By count; by tokens the same pools are cut by the same budget
    (the job's test trains that way).
    """
    from pipelines.translation import streamed_translation_epochs, translation_epochs

    train, corpus, tokenizer = multi30k_sized
    in_memory = translation_epochs(
        train.sources, train.targets, tokenizer, tokenizer, 64, max_length=32
    )
    streamed = streamed_translation_epochs(
        corpus, corpus.scan().pairs, tokenizer, tokenizer, 64, max_length=32
    )
    expected, got = list(in_memory(2).as_numpy_iterator()), list(streamed(2).as_numpy_iterator())
    assert len(got) == len(expected)
    assert streamed(2).options().autotune.enabled is False  # pipelines/prefetch.py
    for (inputs, target_out), (streamed_inputs, streamed_target_out) in zip(expected, got):
        assert all((inputs[key] == streamed_inputs[key]).all() for key in ("source", "target_in"))
        assert (target_out == streamed_target_out).all()


@pytest.mark.slow
def test_a_streamed_epoch_is_the_same_every_time_it_is_built_so_a_resumed_run_sees_the_rest(
    tmp_path,
):
    """The runner resumes epoch e after k steps as `epochs(e).skip(k)`, in a new process."""
    from pipelines.tokenizers import SPECIAL_TOKENS, WordPieceTokenizer
    from pipelines.translation import streamed_translation_epochs

    for shard in range(4):
        write(tmp_path / f"{shard}.de.gz", sentences(400, "de", shard), compress=True)
        write(tmp_path / f"{shard}.en", sentences(400, "en", shard))
    tokenizer = WordPieceTokenizer(
        [
            *SPECIAL_TOKENS,
            "de",
            "en",
            "x",
            *map(str, range(10)),
            "-",
            *(f"##{d}" for d in range(10)),
        ]
    )

    def epoch(number, skip=0):
        corpus = ShardedCorpus.parallel(tmp_path / "*.de.gz", tmp_path / "*.en")
        epochs = streamed_translation_epochs(
            corpus,
            1600,
            tokenizer,
            tokenizer,
            batch_size=32,
            max_length=16,
            seed=5,
            shuffle_buffer=300,
        )
        return [target.tolist() for _, target in epochs(number).skip(skip).as_numpy_iterator()]

    whole = epoch(2)
    assert len(whole) == 50 and epoch(2, skip=17) == whole[17:]
    assert epoch(3) != whole


@pytest.mark.slow
def test_the_streamed_pipeline_holds_as_much_memory_for_100x_a_corpus_as_for_10x(tmp_path):
    """Its memory is its buffers': the shuffle buffer (1,000 pairs
    here), the pools, the prefetch.
    """
    from pipelines.tokenizers import SPECIAL_TOKENS, WordPieceTokenizer
    from pipelines.translation import streamed_translation_epochs
    from tests.streams import peak_growth_mb as growth

    def peak_growth_mb(pairs):
        for side in ("de", "en"):
            write(
                tmp_path / f"{pairs}.{side}",
                [f"{side} {i} -" + " x" * 24 + f" {i % 97}" for i in range(pairs)],
            )
        corpus = ShardedCorpus.parallel(tmp_path / f"{pairs}.de", tmp_path / f"{pairs}.en")
        batches = streamed_translation_epochs(
            corpus, pairs, tokenizer, tokenizer, 64, 32, shuffle_buffer=1000
        )(0)
        return growth(lambda: batches.reduce(0, lambda count, _: count + 1))

    tokenizer = WordPieceTokenizer(
        [
            *SPECIAL_TOKENS,
            "de",
            "en",
            "x",
            "-",
            *map(str, range(10)),
            *(f"##{d}" for d in range(10)),
        ]
    )
    peak_growth_mb(500)  # the first drain also traces the pipeline's functions
    ten_times, hundred_times = peak_growth_mb(5_000), peak_growth_mb(50_000)
    # Caching the ids, as the in-memory pipeline does, adds about 40 MB more at 50,000 pairs
    # (measured); the stream's own peak moves by up to 11 MB from run to run (the allocator's).
    assert hundred_times < ten_times + 20, (ten_times, hundred_times)
