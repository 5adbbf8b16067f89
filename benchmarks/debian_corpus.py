"""A folder of English prose from Debian's documentation packages, for `keras-attn pretrain bert --data FOLDER`.

    apt-get install python3-doc postgresql-doc-15 git-doc debian-handbook debian-reference-en bible-kjv
    python -m benchmarks.debian_corpus /tmp/debian-docs
    keras-attn pretrain bert --data /tmp/debian-docs --one-document-per-file ...

What a user with their own folder of text would have: one file per
document, one paragraph a line. The documents:

- the manuals of Python (`python3-doc`), PostgreSQL (`postgresql-doc-15`),
  Git (`git-doc`), the Debian Administrator's Handbook and the Debian
  Reference in English (`debian-handbook`, `debian-reference-en`): every
  HTML page a document, the text of its paragraphs (code blocks are
  `<pre>`, left out);
- the King James Bible (`bible-kjv`, read through its `bible` program): a
  chapter a document, a verse a line, verse numbers dropped.

Nothing of it is copied into the project: the folder is written where asked.
"""

import argparse
import html.parser
import re
import subprocess
import sys
from pathlib import Path

# A source's name: its Debian package and the folder of its HTML pages.
HTML_SOURCES = {
    "python": ("python3-doc", "/usr/share/doc/python3/html"),
    "postgresql": ("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html"),
    "git": ("git-doc", "/usr/share/doc/git-doc"),
    "handbook": ("debian-handbook", "/usr/share/doc/debian-handbook/html/en-US"),
    "reference": ("debian-reference-en", "/usr/share/debian-reference"),
}
BIBLE = ("bible-kjv", "/usr/bin/bible")
PACKAGES = " ".join(package for package, _ in [*HTML_SOURCES.values(), BIBLE])
MIN_PARAGRAPH_WORDS = 4  # "See also:", "New in version 3.2." are not prose


class _Paragraphs(html.parser.HTMLParser):
    """The text of every paragraph of a page (`<p>`, or Publican's `<div class="para">`), whitespace collapsed."""

    def __init__(self):
        super().__init__()
        self.paragraphs, self._open, self._tag, self._depth = [], None, None, 0

    def handle_starttag(self, tag, attrs):
        if self._open is None and (tag == "p" or (tag == "div" and ("class", "para") in attrs)):
            self._open, self._tag, self._depth = [], tag, 0
        elif tag == self._tag:
            self._depth += 1

    def handle_endtag(self, tag):
        if self._open is None or tag != self._tag:
            return
        if self._depth:
            self._depth -= 1
            return
        self.paragraphs.append(" ".join("".join(self._open).split()))
        self._open = self._tag = None

    def handle_data(self, data):
        if self._open is not None:
            self._open.append(data)


def page_paragraphs(page):
    """The prose paragraphs of an HTML file."""
    parser = _Paragraphs()
    parser.feed(Path(page).read_text(encoding="utf-8", errors="replace"))
    return [p for p in parser.paragraphs if len(p.split()) >= MIN_PARAGRAPH_WORDS]


def html_documents(root, prefix):
    """(name, paragraphs) for every HTML page under `root` that has prose."""
    for page in sorted(Path(root).resolve().rglob("*.html")):
        paragraphs = page_paragraphs(page)
        if paragraphs:
            name = "-".join(page.relative_to(Path(root).resolve()).with_suffix("").parts)
            yield f"{prefix}-{name}", paragraphs


def bible_chapters():
    """(name, verses) for every chapter of the King James Bible."""
    listing = subprocess.run([BIBLE[1], "-l100000", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                             check=True).stdout
    name, verses = None, []
    for line in listing.splitlines():
        verse = re.match(r"\s+\d+ (.*)", line)
        if verse:
            verses.append(verse.group(1).strip())
        elif line.strip():  # "Genesis 1": a new chapter
            if verses:
                yield name, verses
            name, verses = "kjv-" + "-".join(line.split()), []
    if verses:
        yield name, verses


def write_corpus(folder):
    """Writes the documents into `folder`, a file each; returns {source: (documents, words)}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=False)
    sources = {name: html_documents(root, name) for name, (_, root) in HTML_SOURCES.items()}
    sources["kjv"] = bible_chapters()
    sizes = {}
    for source, documents in sources.items():
        count = words = 0
        for name, lines in documents:
            (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
            count, words = count + 1, words + sum(len(line.split()) for line in lines)
        sizes[source] = (count, words)
    return sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a new folder to write the documents into")
    args = parser.parse_args()
    missing = [package for package, path in [*HTML_SOURCES.values(), BIBLE] if not Path(path).exists()]
    if missing:
        sys.exit(f"{' '.join(missing)}: not installed (apt-get install {PACKAGES})")
    if Path(args.folder).exists():
        sys.exit(f"{args.folder} exists: give a new folder")
    sizes = write_corpus(args.folder)
    for source, (documents, words) in sizes.items():
        print(f"{source}: {documents:,} documents, {words:,} words")
    print(f"all: {sum(d for d, _ in sizes.values()):,} documents, {sum(w for _, w in sizes.values()):,} words "
          f"in {args.folder}")


if __name__ == "__main__":
    main()
