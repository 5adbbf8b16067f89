"""The explorer page in a real browser (headless Chromium, driven by
Playwright), as a user meets it.
"""

import pytest

from tests.serving.conftest import post, serving_process

pytest_plugins = ["tests.fixtures_export"]
pytestmark = pytest.mark.slow
HOSTILE = "<script>alert(1)</script> ein hund <img src=x onerror=alert(2)> läuft"


@pytest.fixture(scope="module")
def server(model_root):
    with serving_process(model_root) as (_, url, _):
        yield url


@pytest.fixture
def page(browser, server):
    page = browser.new_page()
    page.problems = []
    page.on(
        "console", lambda message: message.type == "error" and page.problems.append(message.text)
    )
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    page.on(
        "dialog",
        lambda dialog: (page.problems.append(f"dialog: {dialog.message}"), dialog.dismiss()),
    )
    page.goto(server + "/")
    page.wait_for_selector("body[data-state=ready]")
    yield page
    page.close()


def _translate(page, text, search="1", model="toy"):
    page.select_option("#model", model)
    page.fill("#source", text)
    page.select_option("#beam-width", search)
    page.evaluate("document.body.dataset.state = ''")
    page.click("#translate")
    page.wait_for_selector("body[data-state=translated]")


def test_a_translation_shows_the_apis_answer_and_its_attention(page, server):
    text = "ein hund läuft ."
    _translate(page, text, search="4")
    _, answer = post(
        f"{server}/v1/models/toy:predict", {"inputs": {"text": [text], "beam_width": 4}}
    )
    assert page.text_content("#translation") == answer["outputs"]["translation"][0]
    sources = page.locator(".token.source")
    targets = page.locator(".token.target")
    assert sources.count() >= 4 and targets.count() >= 1
    assert page.locator("#heatmap tbody tr").count() == targets.count()
    assert page.locator("#heatmap tbody tr").first.locator("td").count() == sources.count()
    targets.first.hover()  # BertViz's head view: the source tokens this one attends to light up
    assert "active" in targets.first.get_attribute("class")
    weights = [float(sources.nth(i).get_attribute("data-weight")) for i in range(sources.count())]
    # one head's softmax over the source
    assert sum(weights) == pytest.approx(1.0, abs=0.01) and max(weights) > 0
    page.mouse.move(0, 0)
    assert all(
        float(sources.nth(i).get_attribute("data-weight")) == 0 for i in range(sources.count())
    )
    assert page.problems == []


def test_a_ctranslate2_version_translates_and_says_it_gives_no_attention(page, server):
    _translate(page, "ein hund läuft .", model="ct2")
    _, answer = post(
        f"{server}/v1/models/ct2:predict",
        {"inputs": {"text": ["ein hund läuft ."], "beam_width": 1}},
    )
    assert page.text_content("#translation") == answer["outputs"]["translation"][0]
    assert page.is_visible("#no-attention") and not page.is_visible("#attention")
    _translate(page, "ein hund läuft .", model="toy")  # a SavedModel again: its attention, no note
    assert page.is_visible("#attention") and not page.is_visible("#no-attention")
    assert page.problems == []


def test_a_seq2seq_translation_shows_its_one_map(page, server):
    _translate(page, "zwei katzen schlafen .", model="rnn")
    _, answer = post(
        f"{server}/v1/models/rnn:predict",
        {"inputs": {"text": ["zwei katzen schlafen ."], "beam_width": 1}},
    )
    assert page.text_content("#translation") == answer["outputs"]["translation"][0]
    assert page.locator("#layer option").count() == page.locator("#head option").count() == 1
    assert page.locator("#heatmap tbody tr").count() == page.locator(".token.target").count() >= 1
    assert page.problems == []


def test_a_mask_is_filled_with_its_candidates(page, server):
    page.select_option("#model", "bert")
    assert page.is_hidden("#translate-section") and page.is_visible("#fill-mask-section")
    page.fill("#masked", "the [MASK] sat on the mat .")
    page.fill("#top-k", "3")
    page.click("#fill")
    page.wait_for_selector("body[data-state=filled]")
    _, answer = post(
        f"{server}/v1/models/bert:predict",
        {
            "signature_name": "fill_mask",
            "inputs": {"text": ["the [MASK] sat on the mat ."], "top_k": 3},
        },
    )
    assert page.text_content("#filled") == answer["outputs"]["filled"][0]
    assert page.locator(".candidate").count() == 3
    # the self-attention of the text: [CLS] the [MASK] ... [SEP]
    queries = page.locator(".token.target")
    assert queries.count() == page.locator(".token.source").count() == 9
    assert page.locator("#heatmap tbody tr").count() == 9
    queries.nth(2).hover()
    keys = page.locator(".token.source")
    weights = [float(keys.nth(i).get_attribute("data-weight")) for i in range(keys.count())]
    assert sum(weights) == pytest.approx(1.0, abs=0.01)
    assert page.problems == []


def test_what_a_user_types_is_shown_as_text_and_runs_nothing(page):
    _translate(page, HOSTILE)
    assert (
        page.locator("#source-tokens img").count() == 0
        and page.locator("#tokens script").count() == 0
    )
    assert page.text_content("#source-shown") == HOSTILE  # shown literally
    assert page.evaluate("document.querySelectorAll('img, script:not([src])').length") == 0
    assert page.problems == []  # no alert dialog, no error
