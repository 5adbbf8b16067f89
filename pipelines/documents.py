"""Raw-text documents for BERT pretraining: files → documents → sentences.

Two layouts, plain or `.gz` (read through `pipelines.text`, so a missing
file, bad gzip data or invalid UTF-8 stops with one line naming the file
and line):

- blank-line-separated blocks: each block of non-blank lines is one
  document (the layout of BERT's `create_pretraining_data.py` and of
  WikiText once its headings are dropped);
- one file per document (`one_document_per_file=True`).

Every line of a document is split into sentences by `split_sentences`.
What cannot be used as it is, is handled and counted in `Documents`: empty
files, sentences of more than `max_sentence_words` words (cut into pieces of
that many words), documents of one sentence (kept: they give the random
second segment of NotNext pairs, never the first).
"""

import dataclasses
import os
import re

from pipelines import text

# A sentence ends at . ! ? (with closing quotes or brackets after it) when
# whitespace and a capital letter, digit, quote or bracket follow; "e.g. the"
# and "3.5" stay whole.
_SENTENCE_END = re.compile(r"""[.!?]["'”’)\]]*(?=\s+["'“‘(\[]?[A-Z0-9])""")
_HEADING = re.compile(r"^\s*=( =)*\s.*\s=( =)*\s*$")  # WikiText: " = Title = "


@dataclasses.dataclass
class Documents:
    """Documents as lists of sentences, with what reading them handled.

    Each argument is also an attribute of the same name.

    Args:
        documents: list of lists of str. One list of sentence strings per
            document, none empty.
        origin: str. Where they came from (paths, or a generated corpus).
            Defaults to `""`.
        empty_files: int. Files with no text. Defaults to 0.
        single_sentence: int. Documents of one sentence (kept, see the
            module). Defaults to 0.
        long_sentences: int. Sentences cut into pieces of
            `max_sentence_words`. Defaults to 0.
        headings: int. WikiText heading lines (` = Title = `) dropped.
            Defaults to 0.
    """

    documents: list
    origin: str = ""
    empty_files: int = 0
    single_sentence: int = 0
    long_sentences: int = 0
    headings: int = 0

    def __len__(self):
        return len(self.documents)

    @property
    def sentences(self):
        """Every sentence, document after document."""
        return [sentence for document in self.documents for sentence in document]

    def summary(self):
        """One line: what was read and what was handled.

        Returns:
            str.
        """
        return (
            f"{len(self.documents)} documents, {len(self.sentences)} sentences "
            f"({self.single_sentence} one-sentence documents, {self.long_sentences} long "
            f"sentences cut, {self.headings} headings dropped, {self.empty_files} empty files)"
        )


def split_sentences(line):
    """Splits a line of text into sentences at `.`, `!` or `?` before a capital.

    Args:
        line: str. A line of text.

    Returns:
        A list of stripped, non-empty sentences.

    Example:

        >>> split_sentences("The cat sat. It slept! Did it? Yes, e.g. twice.")
        ['The cat sat.', 'It slept!', 'Did it?', 'Yes, e.g. twice.']
    """
    sentences, start = [], 0
    for end in _SENTENCE_END.finditer(line):
        sentences.append(line[start : end.end()])
        start = end.end()
    sentences.append(line[start:])
    return [sentence.strip() for sentence in sentences if sentence.strip()]


def read_documents(paths, one_document_per_file=False, max_sentence_words=200):
    r"""Reads documents from files and folders.

    Args:
        paths: str or os.PathLike, or a list of them. A path or a list of
            paths; a folder stands for every file under it (sorted, hidden
            files skipped).
        one_document_per_file: bool. Whether each file is one document;
            otherwise blank lines separate documents. Defaults to False.
        max_sentence_words: int. Longer sentences are cut into pieces of
            this many words. Defaults to 200.

    Returns:
        A `Documents`.

    Raises:
        text.DataError: when a file is missing, unreadable, bad gzip or
            invalid UTF-8 (naming the file and line), a folder holds no file,
            or there is no text at all.

    Example:

        >>> from pathlib import Path
        >>> _ = Path("wiki.txt").write_text("The cat sat. It slept!\n\nA dog ran.\n")
        >>> read_documents("wiki.txt").documents
        [['The cat sat.', 'It slept!'], ['A dog ran.']]
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    result = Documents([], origin=", ".join(str(path) for path in paths))
    for path in document_files(paths):
        result.documents.extend(
            file_documents(path, result, one_document_per_file, max_sentence_words)
        )
    if not result.documents:
        raise text.DataError(f"{result.origin}: no text ({result.empty_files} empty files)")
    return result


def file_documents(path, counts, one_document_per_file=False, max_sentence_words=200):
    """Yields the documents of one file as its lines are read, counting what it handles in `counts`
    (a `Documents`: `empty_files`, `single_sentence`, `long_sentences`, `headings`).

    Args:
        path: str or os.PathLike. The file, plain text or gzip.
        counts: pipelines.documents.Documents. Where what is handled is
            counted.
        one_document_per_file: bool. Whether the file is one document;
            otherwise blank lines separate documents. Defaults to False.
        max_sentence_words: int. Longer sentences are cut into pieces of
            this many words. Defaults to 200.

    Yields:
        Each document, a list of sentence strings.

    Raises:
        text.DataError: as `read_documents`, when the reading reaches the
            problem.
    """
    lines = text.iter_lines(path)
    empty = True
    for block in [lines] if one_document_per_file else _blocks(lines):
        document = []
        for line in block:
            empty = empty and not line
            if _HEADING.match(line):
                counts.headings += 1
                continue
            for sentence in split_sentences(line):
                document.extend(_cut(sentence, max_sentence_words, counts))
        if document:
            counts.single_sentence += len(document) == 1
            yield document
    counts.empty_files += empty


def document_files(paths):
    """The files of `paths`: each path a file, or a folder standing for every file under it (sorted,
    hidden files skipped).

    Args:
        paths: list of str or os.PathLike. Files and folders.

    Returns:
        A list of paths; a missing file is kept (reading it says so).

    Raises:
        text.DataError: when a folder holds no file.
    """
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(
                os.path.join(folder, name)
                for folder, subfolders, names in os.walk(path)
                for name in names
                if not name.startswith(".")
            )
            if not found:
                raise text.DataError(f"{path}: a folder with no files")
            files.extend(found)
        else:
            files.append(path)  # read_lines says it if missing
    return files


def _blocks(lines):
    block = []
    for line in lines:
        if line:
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def _cut(sentence, max_words, result):
    words = sentence.split()
    if len(words) <= max_words:
        return [sentence]
    result.long_sentences += 1
    return [" ".join(words[i : i + max_words]) for i in range(0, len(words), max_words)]


def hold_out_documents(documents, fraction=0.05, seed=0, minimum=1):
    """Splits a deterministic random `fraction` of documents off for validation.

    Args:
        documents: list. The documents, each a list of sentence strings.
        fraction: float. The fraction held out. Defaults to 0.05.
        seed: int. The seed of the draw. Defaults to 0.
        minimum: int. The fewest documents held out. Defaults to 1.

    Returns:
        `(train, valid)` lists of documents; `valid` has at least `minimum`
        documents and `train` at least two.

    Raises:
        text.DataError: when there are fewer than `minimum + 2` documents.
    """
    if len(documents) < minimum + 2:
        raise text.DataError(
            f"{len(documents)} documents: pretraining needs at least {minimum + 2} "
            "(two to pair sentences across documents, and held-out ones)"
        )
    kept, held = text.hold_out(len(documents), fraction, seed, minimum)
    return [documents[i] for i in kept], [documents[i] for i in held]
