"""Corpus readers: line-aligned parallel files, TSV pairs, monolingual text.

Files are read as bytes (plain or gzip, told apart by the `.gz` suffix or
the gzip magic bytes) and decoded one line at a time, so every problem is
reported as a one-line `DataError` naming the file and the 1-based line:

    data/train.de:17: invalid UTF-8 (byte 0xff at column 5)
    data/train.de: file not found
    data/train.de has 29000 lines but data/train.en has 28999

Lines are split on `\\n` only (a stray `\\r`, form feed or U+2028 inside a
line never shifts the alignment), a UTF-8 byte order mark at the start of a
file is dropped, and surrounding whitespace is stripped.
"""

import dataclasses
import gzip
import os
import zlib
from pathlib import Path

_GZIP_MAGIC = b"\x1f\x8b"


class DataError(ValueError):
    """A corpus file is missing or malformed; the message is one line.

    Args:
        message: str. What is wrong, e.g. `path:line: problem`. It is converted
            with `str`, and each run of whitespace (newlines included) becomes
            one space.
    """

    def __init__(self, message):
        super().__init__(" ".join(str(message).split()))


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Aligned sentence pairs: `sources[i]` translates to `targets[i]`.

    Each argument is also an attribute of the same name.

    Args:
        sources: list of str. Source sentences, stripped, never empty.
        targets: list of str. Target sentences, stripped, never empty.
        skipped_empty: int. Pairs dropped because one side was empty or
            blank. Defaults to 0.
        source_origin: str. Where the sources came from: a path,
            `path (column N)` for TSV, or a description of generated data.
            Defaults to `""`.
        target_origin: str. The same for the targets. Defaults to `""`.

    Raises:
        ValueError: when `sources` and `targets` differ in length.
    """

    sources: list[str]
    targets: list[str]
    skipped_empty: int = 0
    source_origin: str = ""
    target_origin: str = ""

    def __post_init__(self):
        if len(self.sources) != len(self.targets):
            raise ValueError(
                f"ParallelCorpus: {len(self.sources)} sources but {len(self.targets)} targets."
            )

    def __len__(self):
        return len(self.sources)


def read_lines(path):
    r"""Reads a monolingual text file (plain or gzip) into stripped lines.

    Blank lines are kept as `""` (they separate documents in BERT-style
    pretraining text); dropping them is the caller's choice.

    Args:
        path: str or os.PathLike. The file, plain text or gzip.

    Returns:
        A list with one `str` per line of the file.

    Raises:
        DataError: when the file is missing or unreadable, its gzip data is
            bad, or a line is not valid UTF-8.

    Example:

    >>> _ = Path("train.en").write_text("Two dogs run.\n\nA cat sleeps.\n")
    >>> read_lines("train.en")
    ['Two dogs run.', '', 'A cat sleeps.']
    """
    return list(iter_lines(path))


def iter_lines(path):
    """`read_lines` one line at a time, as they are read (a file of any size in bounded memory).

    Args:
        path: str or os.PathLike. The file, plain text or gzip.

    Returns:
        An iterator of `str`, one stripped line at a time.

    Raises:
        DataError: as `read_lines`, when the iteration reaches the problem.
    """
    return (line.strip() for line in decoded_lines(Path(path)))


def read_parallel(source_path, target_path):
    r"""Reads two line-aligned files: line i of one translates line i of the other.

    Args:
        source_path: str or os.PathLike. The source-language file, plain text
            or gzip.
        target_path: str or os.PathLike. The target-language file, plain text
            or gzip.

    Returns:
        A `ParallelCorpus`; pairs with an empty or blank side are skipped and
        counted in `skipped_empty`.

    Raises:
        DataError: when a file is missing, unreadable or not valid UTF-8, or
            the two files have different numbers of lines.

    Example:

    >>> _ = Path("train.de").write_text("Zwei Hunde rennen.\n\nEine Katze schläft.\n")
    >>> _ = Path("train.en").write_text("Two dogs run.\nA dog.\nA cat sleeps.\n")
    >>> corpus = read_parallel("train.de", "train.en")
    >>> len(corpus), corpus.skipped_empty
    (2, 1)
    """
    source_path, target_path = Path(source_path), Path(target_path)
    sources = read_lines(source_path)
    targets = read_lines(target_path)
    if len(sources) != len(targets):
        raise _misaligned(source_path, len(sources), target_path, len(targets))
    return _drop_empty_pairs(sources, targets, str(source_path), str(target_path))


def read_tsv(path, source_column=0, target_column=1):
    r"""Reads sentence pairs from one tab-separated file (plain text or gzip).

    Blank lines are skipped and counted like pairs with an empty side; any
    other line must have enough tab-separated columns.

    Args:
        path: str or os.PathLike. The TSV file, plain text or gzip.
        source_column: int. The 0-based column of the source sentence.
            Defaults to 0.
        target_column: int. The 0-based column of the target sentence.
            Defaults to 1.

    Returns:
        A `ParallelCorpus`.

    Raises:
        DataError: as `read_lines`, or when a line has too few columns
            (`path:line: expected at least N tab-separated columns, found M`).

    Example:

    >>> _ = Path("spa.txt").write_text("Go.\tVe.\nRun!\tCorre.\n")
    >>> corpus = read_tsv("spa.txt")
    >>> corpus.sources[0], corpus.targets[0]
    ('Go.', 'Ve.')
    """
    path = Path(path)
    sources, targets = [], []
    for source, target in tsv_rows(path, source_column, target_column):
        sources.append(source)
        targets.append(target)
    return _drop_empty_pairs(
        sources,
        targets,
        f"{path} (column {source_column})",
        f"{path} (column {target_column})",
    )


def tsv_rows(path, source_column=0, target_column=1, optional_column=None):
    """Yields `(source, target)` of each line of a TSV file, stripped; `("", "")` for a blank line.

    With `optional_column`, yields `(source, target, optional)`, the last
    `""` on the lines that end before it.

    Args:
        path: str or os.PathLike. The TSV file, plain text or gzip.
        source_column: int. The 0-based column of the source sentence.
            Defaults to 0.
        target_column: int. The 0-based column of the target sentence.
            Defaults to 1.
        optional_column: int. A 0-based column that lines may lack; `None`
            for none. Defaults to None.

    Yields:
        A tuple of `str` per line: `(source, target)`, or
        `(source, target, optional)` with `optional_column`.

    Raises:
        DataError: as `read_tsv`.
    """
    path = Path(path)
    needed = max(source_column, target_column) + 1
    for number, line in enumerate(decoded_lines(path), start=1):
        columns = line.rstrip("\r\n").split("\t") if line.strip() else [""] * needed
        if len(columns) < needed:
            raise DataError(
                f"{path}:{number}: expected at least {needed} tab-separated "
                f"columns, found {len(columns)}"
            )
        row = columns[source_column].strip(), columns[target_column].strip()
        if optional_column is not None:
            row += (columns[optional_column].strip() if optional_column < len(columns) else "",)
        yield row


def count_lines(path):
    """The number of lines of a text file (plain or gzip), read as a
    stream and checked as `read_lines` checks it.

    Args:
        path: str or os.PathLike. The file, plain text or gzip.

    Returns:
        int, the number of lines.

    Raises:
        DataError: as `read_lines`.
    """
    return sum(1 for _ in decoded_lines(Path(path)))


def check_aligned(source_path, target_path):
    """Raises `read_parallel`'s `DataError` if two files differ in
    line count or are not valid text.

    Args:
        source_path: str or os.PathLike. The source-language file, plain text
            or gzip.
        target_path: str or os.PathLike. The target-language file, plain text
            or gzip.

    Raises:
        DataError: when a file is missing, unreadable or not valid UTF-8, or
            the two files have different numbers of lines.
    """
    source_lines, target_lines = count_lines(source_path), count_lines(target_path)
    if source_lines != target_lines:
        raise _misaligned(source_path, source_lines, target_path, target_lines)


def _misaligned(source_path, source_lines, target_path, target_lines):
    return DataError(f"{source_path} has {source_lines} lines but {target_path} has {target_lines}")


def hold_out(count, fraction, seed, minimum=1):
    """The one held-out split: a seeded random `fraction` of `count` items (at least `minimum`).

    Args:
        count: int. The number of items.
        fraction: float. The fraction of the items held out.
        seed: int. The seed of the `numpy.random.default_rng` that draws
            them.
        minimum: int. The fewest items held out. Defaults to 1.

    Returns:
        `(kept, held_out)`: two sorted lists of int indices.

    Example:

    >>> hold_out(10, 0.2, seed=0)
    ([0, 1, 2, 3, 5, 7, 8, 9], [4, 6])
    """
    import numpy as np

    order = np.random.default_rng(seed).permutation(count)
    held = max(minimum, int(count * fraction))
    return sorted(int(i) for i in order[held:]), sorted(int(i) for i in order[:held])


def _drop_empty_pairs(sources, targets, source_origin, target_origin):
    kept = [(s, t) for s, t in zip(sources, targets) if s.strip() and t.strip()]
    return ParallelCorpus(
        sources=[s for s, _ in kept],
        targets=[t for _, t in kept],
        skipped_empty=len(sources) - len(kept),
        source_origin=source_origin,
        target_origin=target_origin,
    )


def decoded_lines(path):
    """Yields the lines of `path` as `str` (newline kept), checking UTF-8.

    Args:
        path: str or os.PathLike. The file, plain text or gzip.

    Yields:
        Each line as a `str`, a first line without its byte order mark.

    Raises:
        DataError: when the file is missing, is a folder, cannot be read
            (permission denied, an I/O error, ...) or is corrupt or truncated
            gzip, or a line is not valid UTF-8.
    """
    try:
        with open_bytes(path) as stream:
            for number, raw in enumerate(stream, start=1):
                yield decode_line(raw, path, number)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, not a file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise DataError(f"{path}: corrupt gzip data ({error})") from None
    except EOFError:
        raise DataError(f"{path}: truncated gzip file") from None
    except OSError as error:  # not a directory on the way, name too long, I/O error, ...
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None


def open_bytes(path):
    """`path` opened for reading bytes, decompressed if it is gzip (`is_gzip`).

    Args:
        path: str or os.PathLike. The file.

    Returns:
        A binary file object; the caller closes it.
    """
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def text_bytes(path):
    """The bytes of text in a file: its size, or a gzip file's
    uncompressed size (its last 4 bytes: the last member's size modulo
    2**32; three times the compressed size where that cannot be right).

    Args:
        path: str or os.PathLike. The file, plain text or gzip.

    Returns:
        int, the number of bytes.
    """
    size = os.path.getsize(path)
    if not is_gzip(path):
        return size
    with open(path, "rb") as stream:
        stream.seek(max(size - 4, 0))
        stored = int.from_bytes(stream.read(4), "little")
    return stored if stored >= size else 3 * size


def is_gzip(path):
    """Whether `path` is gzip: its `.gz` suffix or its first two bytes.

    Args:
        path: str or os.PathLike. The file.

    Returns:
        bool, True for gzip.
    """
    if Path(path).suffix == ".gz":
        return True
    with open(path, "rb") as probe:
        return probe.read(2) == _GZIP_MAGIC


def decode_line(raw, path, number):
    """Line `number` of `path` (bytes) as `str`, its byte-order mark dropped if it is the first.

    Args:
        raw: bytes. The line as read.
        path: str or os.PathLike. The file, named in the error.
        number: int. The 1-based line number, named in the error.

    Returns:
        The line as a `str`.

    Raises:
        DataError: when the line is not UTF-8
            (`path:number: invalid UTF-8 (byte 0x.. at column C)`).
    """
    line = decode_text(raw, f"{path}:{number}")
    return line.removeprefix("\ufeff") if number == 1 else line


def decode_text(raw, where):
    """`raw` (bytes) as `str`; `where` names it when it is not UTF-8.

    Args:
        raw: bytes. The text to decode.
        where: str. What the error message names, e.g. `path:line`.

    Returns:
        The text as a `str`.

    Raises:
        DataError: when `raw` is not UTF-8
            (`where: invalid UTF-8 (byte 0x.. at column C)`).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        column = len(raw[: error.start].decode("utf-8")) + 1
        raise DataError(
            f"{where}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at column {column})"
        ) from None


def write_text_atomically(path, content):
    """Writes `content` to `path` through a temporary file and a rename: a reader finds the old file
    or the new one, never half of it.

    Args:
        path: str or os.PathLike. The file; the temporary file is `path` with `.tmp` added.
        content: str. The text to write, as UTF-8.
    """
    temporary = os.fspath(path) + ".tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(content)
    os.replace(temporary, path)
