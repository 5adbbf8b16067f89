import gzip
from pathlib import Path

import pytest

from pipelines.text import DataError, ParallelCorpus, read_lines, read_parallel, read_tsv

MULTI30K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "multi30k"


def write(path, data):
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def data_error(function, *args):
    with pytest.raises(DataError) as caught:
        function(*args)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_read_parallel_strips_lines_and_keeps_alignment(tmp_path):
    source = write(tmp_path / "train.de", "\ufeff Ein Hund. \r\nZwei\x0cKatzen\u2028hier.\n")
    target = write(tmp_path / "train.en", "A dog.\nTwo\x0ccats\u2028here.")
    corpus = read_parallel(source, target)
    assert corpus.sources == ["Ein Hund.", "Zwei\x0cKatzen\u2028hier."]
    assert corpus.targets == ["A dog.", "Two\x0ccats\u2028here."]
    assert (corpus.skipped_empty, len(corpus)) == (0, 2)
    assert (corpus.source_origin, corpus.target_origin) == (str(source), str(target))


def test_pairs_with_an_empty_side_are_skipped_and_counted(tmp_path):
    source = write(tmp_path / "s.txt", "one\n\nthree\n   \nfive\n")
    target = write(tmp_path / "t.txt", "eins\nzwei\n\t\nvier\nfünf\n")
    corpus = read_parallel(source, target)
    assert corpus.sources == ["one", "five"]
    assert corpus.targets == ["eins", "fünf"]
    assert corpus.skipped_empty == 3


def test_gzip_is_recognized_by_suffix_and_by_magic_bytes(tmp_path):
    text = "Ein Mann.\nEine Frau.\n"
    by_suffix = write(tmp_path / "a.de.gz", gzip.compress(text.encode()))
    by_magic = write(tmp_path / "a.en", gzip.compress(b"A man.\nA woman.\n"))
    corpus = read_parallel(by_suffix, by_magic)
    assert corpus.sources == ["Ein Mann.", "Eine Frau."]
    assert corpus.targets == ["A man.", "A woman."]


def test_missing_file(tmp_path):
    present = write(tmp_path / "train.en", "x\n")
    missing = tmp_path / "train.de"
    assert data_error(read_parallel, missing, present) == f"{missing}: file not found"
    assert data_error(read_lines, missing) == f"{missing}: file not found"


def test_unequal_line_counts(tmp_path):
    source = write(tmp_path / "train.de", "a\nb\nc\n")
    target = write(tmp_path / "train.en", "a\nb\n")
    assert data_error(read_parallel, source, target) == (f"{source} has 3 lines but {target} has 2")


def test_invalid_utf8_names_file_line_and_column(tmp_path):
    plain = write(tmp_path / "train.de", b"gut\nauch gut\nab\xc3\xa4\xffcd\nnie erreicht\n")
    assert data_error(read_lines, plain) == (f"{plain}:3: invalid UTF-8 (byte 0xff at column 4)")
    packed = write(tmp_path / "train.de.gz", gzip.compress(b"ok\n\xc3(\n"))
    other = write(tmp_path / "train.en", "ok\nok\n")
    assert data_error(read_parallel, packed, other) == (
        f"{packed}:2: invalid UTF-8 (byte 0xc3 at column 1)"
    )


def test_corrupt_gzip(tmp_path):
    broken = write(tmp_path / "x.gz", b"this is not gzip data")
    assert data_error(read_lines, broken).startswith(f"{broken}: corrupt gzip data")
    truncated = write(tmp_path / "y.gz", gzip.compress(b"line\n" * 1000)[:-30])
    assert data_error(read_lines, truncated) == f"{truncated}: truncated gzip file"


def test_read_tsv_picks_columns_and_skips_blank_lines(tmp_path):
    lines = "Go.\tVe.\tCC-BY\n\nHi.\t \tCC-BY\nRun!\t¡Corre!\tCC-BY\n"
    path = write(tmp_path / "pairs.tsv", lines)
    corpus = read_tsv(path)
    assert corpus.sources == ["Go.", "Run!"]
    assert corpus.targets == ["Ve.", "¡Corre!"]
    assert corpus.skipped_empty == 2
    assert corpus.source_origin == f"{path} (column 0)"
    swapped = read_tsv(path, source_column=1, target_column=0)
    assert swapped.sources == ["Ve.", "¡Corre!"]


def test_tsv_line_without_enough_columns(tmp_path):
    path = write(tmp_path / "pairs.tsv", "Go.\tVe.\nHi. Hola.\n")
    assert data_error(read_tsv, path) == (
        f"{path}:2: expected at least 2 tab-separated columns, found 1"
    )
    assert data_error(read_tsv, write(tmp_path / "ok.tsv", "a\tb\n"), 0, 2) == (
        f"{tmp_path / 'ok.tsv'}:1: expected at least 3 tab-separated columns, found 2"
    )


def test_read_lines_keeps_blank_lines(tmp_path):
    path = write(tmp_path / "doc.txt", "First doc.\n\n  Second doc.  \n")
    assert read_lines(path) == ["First doc.", "", "Second doc."]


def test_directory_is_reported(tmp_path):
    assert data_error(read_lines, tmp_path) == f"{tmp_path}: is a directory, not a file"


def test_a_path_through_a_file_is_reported(tmp_path):
    path = write(tmp_path / "doc.txt", "text\n") / "inner.txt"
    assert data_error(read_lines, path) == f"{path}: cannot be read (Not a directory)"


def test_parallel_corpus_checks_alignment():
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        ParallelCorpus(["a", "b"], ["x"])


def test_multi30k_train_reads_cleanly():
    if not MULTI30K.exists():
        pytest.skip(f"{MULTI30K} not present")
    corpus = read_parallel(MULTI30K / "raw" / "train.de.gz", MULTI30K / "raw" / "train.en.gz")
    assert len(corpus) + corpus.skipped_empty == 29000
    assert corpus.targets[0] == "Two young, White males are outside near many bushes."
