"""The documentation stays true: every code block of the README and the guides runs, the site builds
with `mkdocs build --strict`, and the built site works in a browser.

A page's ```bash and ```python blocks run in page order in one fresh folder, in the `long` tier
(`tests/docs_runner.py`), the python blocks in one process like a notebook's cells. Training
commands get small settings appended (`docs_runner.SMALL`). A block that cannot run here starts with
`# not run by the tests: REASON`.
"""

import ast
import contextlib
import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES_WITH_CODE = [
    ROOT / "README.md",
    ROOT / "docs" / "getting-started.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
RUN = ("bash", "python")
SHOWN = ("text", "json")  # what a reader sees printed or sends; never run
NOT_RUN = "# not run by the tests:"
# A fence, at any indentation (inside a list item), its language, its body.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<language>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)


def code_blocks(page):
    """`(language, code, line)` of each fenced block of `page`, dedented to its fence."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for found in FENCE.finditer(text):
        indent = len(found["indent"])
        code = "".join(line[indent:] for line in found["body"].splitlines(keepends=True))
        blocks.append((found["language"], code, text.count("\n", 0, found.start()) + 1))
    return blocks


def _name(page):
    return str(page.relative_to(ROOT))


def _runnable(code):
    return not code.lstrip().startswith(NOT_RUN)


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_name)
def test_every_block_runs_or_says_why_not(page):
    assert code_blocks(page), f"{_name(page)}: no code block found"
    for language, code, line in code_blocks(page):
        where = f"{_name(page)}:{line}"
        assert language in RUN + SHOWN, (
            f"{where}: a ```{language} block is neither run nor shown as output"
        )
        if language in RUN and not _runnable(code):
            reason = code.lstrip().splitlines()[0][len(NOT_RUN) :].strip()
            assert reason, f"{where}: `{NOT_RUN}` says no reason"
        if language == "python":
            shown = [
                node.lineno
                for node in ast.parse(code, where).body
                if isinstance(node, ast.Expr)
                and not isinstance(node.value, (ast.Call, ast.Constant))
            ]
            assert shown == [], (
                f"{where}: a bare expression shows nothing when run (print it), at lines {shown}"
            )
    python = "".join(code for language, code, _ in code_blocks(page) if language == "python")
    if ".fit(" in python:
        assert "set_random_seed" in python, (
            f"{_name(page)}: trains without a seed, so its numbers change each run"
        )


def _run_blocks(blocks, folder):
    """`tests/docs_runner.py` run on `blocks` in `folder`: the
    finished process, its output captured.
    """
    (folder / "blocks.json").write_text(json.dumps(blocks), encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs_runner.py"), "blocks.json"],
        cwd=folder,
        capture_output=True,
        text=True,
    )


# `long`: together the pages are about 720 s of one core's work, which takes the suite from about 10
# to 17 minutes on 2 cores (`python -m pytest -m long tests/test_docs.py` runs them).
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_name)
def test_the_pages_code_runs(page, tmp_path):
    blocks = [
        dict(language=language, code=code, where=f"{_name(page)}:{line}")
        for language, code, line in code_blocks(page)
        if language in RUN and _runnable(code)
    ]
    if not blocks:
        pytest.skip(f"{_name(page)}: every block says why it is not run")
    done = _run_blocks(blocks, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


@pytest.mark.slow
def test_the_runner_ends_with_a_failing_commands_place_and_passes_its_output_through(tmp_path):
    """A `keras-attn` command in a forked process: its exit code,
    outputs and folder are the block's.
    """
    code = (
        'cd sub\nkeras-attn translate nowhere "x" > out.txt 2> err.txt || echo "exit $?"\n'
        "keras-attn translate nowhere\n"
    )
    (tmp_path / "sub").mkdir()
    done = _run_blocks([dict(language="bash", code=code, where="page.md:3")], tmp_path)
    assert done.returncode == 1 and "exit 2\n" in done.stdout, done
    assert (
        tmp_path / "sub" / "err.txt"
    ).read_text() == "keras-attn: error: nowhere: no such folder\n"
    assert done.stderr.endswith("page.md:3: the bash block exited with 2\n"), done.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built with `mkdocs build --strict` (a broken link or reference fails it)."""
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return out


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_page_of_the_nav(site):
    for page in (
        "index.html",
        "getting-started/index.html",
        "guides/captioning/index.html",
        "reference/layers/index.html",
        "benchmarks/quality/index.html",
        "changelog/index.html",
    ):
        assert (site / page).is_file(), page
    layers = (site / "reference/layers/index.html").read_text(encoding="utf-8")
    assert 'id="keras_attn.layers.MultiHeadAttention"' in layers  # rendered from the docstrings


@contextlib.contextmanager
def _serving(folder):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_the_built_site_renders_its_pages_and_finds_multi_head_attention(site, browser):
    with _serving(site) as url:
        page = browser.new_page()
        problems = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        for path, heading in (
            ("/", "keras-attn"),
            ("/guides/captioning/", "captioning"),
            ("/reference/layers/", "keras_attn.layers"),
        ):
            page.goto(url + path)
            assert heading.lower() in page.text_content("article h1").lower(), path
            navigation = page.locator("nav.md-nav--primary")
            assert navigation.get_by_text("Getting started").count() >= 1, path
            assert navigation.get_by_text("Guides").count() >= 1, path
        page.goto(url + "/")
        page.click("label.md-search__icon, .md-search__input")
        # as typed
        page.locator("input.md-search__input").press_sequentially("MultiHeadAttention", delay=50)
        result = page.locator(".md-search-result__item").first
        result.wait_for(timeout=20_000)
        assert "MultiHeadAttention" in page.text_content(".md-search-result")
        assert problems == []
        page.close()
