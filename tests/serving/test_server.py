"""`keras-attn serve`'s REST API, in process: TensorFlow Serving's routes, formats and errors."""

import asyncio
import functools
import os
import shutil
import time

import httpx
import numpy as np
import pytest
import tensorflow as tf
from starlette.testclient import TestClient

from keras_attn.config import ServeConfig
from keras_attn.serving.server import create_app
from keras_attn.serving.store import ModelStore, load_version

pytest_plugins = ["tests.fixtures_export"]
TEXTS = ["ein hund läuft .", "zwei katzen schlafen .", "", "der mann isst einen apfel . " * 3]
MASKED = ["the [MASK] sat on the mat .", "no mask here", "[MASK] [MASK]"]


@pytest.fixture(scope="module")
def client(model_root):
    with TestClient(create_app(ServeConfig(str(model_root), poll_seconds=0.2))) as client:
        yield client


@functools.cache
def _loaded(path):
    """The version at `path` loaded once for the module's direct calls
    (a load takes about a second).
    """
    return load_version(path)


def _direct(model_root, name, signature, **inputs):
    loaded = _loaded(str(model_root / name / "1"))
    outputs = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def _strings(array):
    return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(array).tolist()


@pytest.mark.slow
def test_status_lists_versions_and_says_which_failed(client):
    assert client.get("/v1/models/toy").json() == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert client.get("/v1/models/toy/versions/1").status_code == 200
    (broken,) = client.get("/v1/models/broken").json()["model_version_status"]
    assert (
        broken["state"] == "END"
        and broken["status"]["error_code"] == "UNKNOWN"
        and broken["status"]["error_message"]
    )
    answer = client.post("/v1/models/broken:predict", json={"instances": ["x"]})
    assert answer.status_code == 404 and "Latest(broken)" in answer.json()["error"]


def test_metadata_gives_every_signature_with_dtypes_and_shapes(client):
    metadata = client.get("/v1/models/toy/metadata").json()
    assert metadata["model_spec"] == {"name": "toy", "signature_name": "", "version": "1"}
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "translate", "attention"}
    translate = signatures["translate"]
    assert translate["inputs"]["text"]["dtype"] == "DT_STRING"
    assert translate["inputs"]["text"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}]
    assert translate["inputs"]["beam_width"]["tensor_shape"]["dim"] == []
    assert translate["outputs"]["score"]["dtype"] == "DT_FLOAT"
    assert (
        "fill_mask"
        in client.get("/v1/models/bert/versions/1/metadata").json()["metadata"]["signature_def"][
            "signature_def"
        ]
    )


@pytest.mark.parametrize("name", ["toy", "rnn"])  # a Transformer and a Seq2Seq translator
@pytest.mark.slow
def test_predict_in_columns_and_in_rows_equals_the_signature_called_directly(
    client, model_root, name
):
    expected = _direct(model_root, name, "translate", text=TEXTS, beam_width=2)
    columns = client.post(
        f"/v1/models/{name}:predict",
        json={"signature_name": "translate", "inputs": {"text": TEXTS, "beam_width": 2}},
    )
    assert columns.status_code == 200, columns.text
    outputs = columns.json()["outputs"]
    assert outputs["translation"] == _strings(expected["translation"])
    np.testing.assert_allclose(outputs["score"], expected["score"], rtol=1e-6)
    assert outputs["truncated"] == expected["truncated"].tolist() == [False, False, False, True]
    rows = client.post(
        f"/v1/models/{name}/versions/1:predict",
        json={"instances": [{"text": text, "beam_width": 2} for text in TEXTS]},
    )
    assert [row["translation"] for row in rows.json()["predictions"]] == outputs["translation"]
    attention = _direct(model_root, name, "attention", text=TEXTS[:2])
    answer = client.post(
        f"/v1/models/{name}:predict", json={"signature_name": "attention", "instances": TEXTS[:2]}
    )
    predictions = answer.json()["predictions"]
    np.testing.assert_allclose(
        [row["cross_attention"] for row in predictions], attention["cross_attention"], rtol=1e-6
    )
    assert [row["source_tokens"] for row in predictions] == _strings(attention["source_tokens"])


def test_a_ctranslate2_version_answers_as_the_saved_model_it_was_converted_from(client):
    """ct2/1 is toy/1's weights on the other engine: the same JSON,
    greedy translations, errors and codes.
    """
    answers = {}
    for name in ("toy", "ct2"):
        columns = client.post(
            f"/v1/models/{name}:predict",
            json={"signature_name": "translate", "inputs": {"text": TEXTS, "beam_width": 1}},
        )
        rows = client.post(
            f"/v1/models/{name}/versions/1:predict",
            json={"instances": [{"text": text, "beam_width": 1} for text in TEXTS]},
        )
        assert columns.status_code == rows.status_code == 200, columns.text + rows.text
        answers[name] = columns.json()["outputs"], rows.json()["predictions"]
    (toy_columns, toy_rows), (ct2_columns, ct2_rows) = answers["toy"], answers["ct2"]
    # float32 on both: greedy agrees
    assert ct2_columns["translation"] == toy_columns["translation"]
    assert ct2_columns["truncated"] == toy_columns["truncated"] == [False, False, False, True]
    assert [len(ct2_columns[key]) for key in toy_columns] == [len(TEXTS)] * 3 and set(
        ct2_columns
    ) == set(toy_columns)
    assert [set(row) for row in ct2_rows] == [set(row) for row in toy_rows]
    assert [row["translation"] for row in ct2_rows] == toy_columns["translation"]
    toy_meta, ct2_meta = (
        client.get(f"/v1/models/{name}/metadata").json()["metadata"]["signature_def"][
            "signature_def"
        ]
        for name in ("toy", "ct2")
    )
    assert set(ct2_meta) == {"serving_default", "translate"}  # no attention: CTranslate2 gives none
    assert ct2_meta["translate"] == toy_meta["translate"]
    assert client.get("/v1/models/ct2").json() == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    for body, status, message in (
        ({"inputs": {"text": [1, 2], "beam_width": 1}}, 400, "text: expected string"),
        ({"inputs": {"text": ["a"]}}, 400, "missing input(s) beam_width"),
        (
            {"signature_name": "attention", "instances": ["x"]},
            404,
            'Serving signature name: "attention" not found',
        ),
        ({"inputs": {"text": [], "beam_width": 1}}, 200, None),
    ):
        answer = client.post("/v1/models/ct2:predict", json=body)
        assert answer.status_code == status and (
            message is None or message in answer.json()["error"]
        )
    assert (
        client.post("/v1/models/ct2:predict", json={"inputs": {"text": [], "beam_width": 1}}).json()
        == client.post(
            "/v1/models/toy:predict", json={"inputs": {"text": [], "beam_width": 1}}
        ).json()
    )


@pytest.mark.slow
def test_bert_signatures_are_served(client, model_root):
    expected = _direct(model_root, "bert", "fill_mask", text=MASKED, top_k=3)
    answer = client.post(
        "/v1/models/bert:predict",
        json={"signature_name": "fill_mask", "inputs": {"text": MASKED, "top_k": 3}},
    ).json()
    assert answer["outputs"]["tokens"] == _strings(expected["tokens"])
    assert answer["outputs"]["filled"] == _strings(expected["filled"])
    attention = _direct(model_root, "bert", "attention", text=MASKED)
    answer = client.post(
        "/v1/models/bert:predict", json={"signature_name": "attention", "inputs": MASKED}
    ).json()
    assert answer["outputs"]["tokens"] == _strings(attention["tokens"])
    np.testing.assert_allclose(
        answer["outputs"]["self_attention"], attention["self_attention"], rtol=1e-6
    )
    encoded = client.post(
        "/v1/models/bert:predict", json={"signature_name": "encode", "instances": MASKED[:2]}
    )
    np.testing.assert_allclose(
        [row["pooled_output"] for row in encoded.json()["predictions"]],
        _direct(model_root, "bert", "encode", text=MASKED[:2])["pooled_output"],
        rtol=1e-5,
    )


@pytest.mark.parametrize(
    "method, path, body, status, message",
    [
        ("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
        (
            "POST",
            "/v1/models/nope:predict",
            {"instances": ["x"]},
            404,
            "Servable not found for request: Latest(nope)",
        ),
        (
            "POST",
            "/v1/models/toy/versions/7:predict",
            {"instances": ["x"]},
            404,
            "Specific(toy, 7)",
        ),
        ("GET", "/v1/models/toy/versions/x", None, 400, "Failed to convert version: x"),
        (
            "POST",
            "/v1/models/toy:predict",
            {"signature_name": "nope", "instances": ["x"]},
            404,
            'Serving signature name: "nope" not found',
        ),
        ("POST", "/v1/models/toy:predict", b"{not json", 400, "JSON Parse error"),
        ("POST", "/v1/models/toy:predict", b"\xff\xfe", 400, "JSON Parse error"),
        pytest.param(
            "POST",
            "/v1/models/toy:predict",
            b'{"instances": ' + b"[" * 100_000,
            400,
            "JSON Parse error: arrays or objects nested",
            id="nested too deeply",
        ),
        pytest.param(
            "POST",
            "/v1/models/toy:predict",
            b'{"inputs": {"text": ["a"], "beam_width": ' + b"9" * 5000 + b"}}",
            400,
            "JSON Parse error: a number of more than 4300 digits",
            id="a number of 5000 digits",
        ),
        ("POST", "/v1/models/toy:predict", [1, 2], 400, "must be a JSON object"),
        (
            "POST",
            "/v1/models/toy:predict",
            {"signature_name": "translate"},
            400,
            "Missing 'inputs' or 'instances'",
        ),
        ("POST", "/v1/models/toy:predict", {"instances": [], "inputs": []}, 400, "Not both"),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": [1, 2], "beam_width": 1}},
            400,
            "text: expected string",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": ["a"], "beam_width": "4"}},
            400,
            "beam_width: expected int32",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": ["a"], "beam_width": 2.5}},
            400,
            "beam_width: expected int32",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": ["a"]}},
            400,
            "missing input(s) beam_width",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": ["a"], "beam_width": 0}},
            400,
            "beam_width: 0, where 1 to 32 belongs",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"instances": [{"text": "a", "beam_width": 100000}]},
            400,
            "beam_width: 100000, where 1 to 32 belongs",
        ),
        (
            "POST",
            "/v1/models/bert:predict",
            {"signature_name": "fill_mask", "inputs": {"text": ["a [MASK]"], "top_k": -3}},
            400,
            "top_k: -3, where 1 to 50 belongs",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": ["a"], "beam_width": 1, "x": 1}},
            400,
            "unknown input(s) x",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"inputs": {"text": [["a"]], "beam_width": 1}},
            400,
            "expected shape [?]",
        ),
        (
            "POST",
            "/v1/models/toy:predict",
            {"instances": [{"text": "a", "beam_width": 1}, {"text": "b", "beam_width": 2}]},
            400,
            "beam_width: a scalar input",
        ),
        pytest.param(
            "POST",
            "/v1/models/toy:predict",
            {"instances": [{"text": "a", "beam_width": 1}, {"beam_width": 1}]},
            400,
            "instance 1 gives beam_width where instance 0 gives beam_width, text",
            id="an instance short of an input",
        ),
        ("POST", "/v1/models/toy:predict", {"instances": ["x"] * 257}, 413, "at most 256"),
        ("GET", "/v1/models/toy:predict", None, 405, "Malformed request"),
        ("POST", "/v1/models/toy/metadata", {}, 405, "Malformed request"),
        ("GET", "/v1/models/escape", None, 404, "Could not find any versions of model escape"),
        ("GET", "/v1/models/..%2F..%2Fetc/metadata", None, 404, ""),
        ("GET", "/v1/models/%2E%2E/metadata", None, 404, ""),
        ("GET", "/nope", None, 404, "Not Found: GET /nope"),
        ("GET", "/explorer/nope.js", None, 404, "Not Found"),
        ("DELETE", "/v1/models/toy", None, 405, "Method Not Allowed"),
        ("GET", "/v1/models", None, 404, "Malformed request: GET /v1/models"),
        ("GET", "/v1/models/", None, 404, "Malformed request: GET /v1/models/"),
        ("POST", "/v1/models/toy:predict", {"instances": []}, 400, "'instances' is empty"),
    ],
)
def test_errors_have_tensorflow_servings_status_and_body(
    client, method, path, body, status, message
):
    content = body if isinstance(body, bytes) else None
    answer = client.request(
        method, path, content=content, json=None if content is not None else body
    )
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert message in answer.json()["error"]


def test_the_first_line_names_each_folder_that_is_no_model_name_as_text(tmp_path):
    for name in ("<img src=x onerror=alert(1)>", "red\x1b[31mname", ".hidden"):
        (tmp_path / name / "1").mkdir(parents=True)
    lines = []
    with TestClient(create_app(ServeConfig(str(tmp_path), poll_seconds=0), log=lines.append)):
        pass
    assert lines == [
        f"{tmp_path}: 0 version(s) loaded; skipped '<img src=x onerror=alert(1)>', "
        "'red\\x1b[31mname': not model names (letters, digits, '.', '_', '-')"
    ]


def test_head_answers_as_get_without_a_body(client):
    for path in ("/v1/models/toy", "/v1/models/toy/metadata", "/v1/models/nope"):
        got, head = client.get(path), client.head(path)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-type"] == "application/json"


def test_a_body_over_the_limit_is_refused_before_it_is_read(client):
    answer = client.post("/v1/models/toy:predict", content=b"x" * ((1 << 20) + 1))
    assert answer.status_code == 413 and "at most 1048576" in answer.json()["error"]


@pytest.mark.slow
def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(model_root):
    store = ModelStore(str(model_root))
    store.refresh()
    app = create_app(
        ServeConfig(str(model_root), max_batch_size=8, batch_timeout_ms=500), store=store
    )
    texts = [
        f"{word} hund läuft ."
        for word in ("ein", "der", "zwei", "kein", "mein", "dein", "sein", "ihr")
    ]
    alone = _direct(model_root, "toy", "translate", text=texts, beam_width=3)

    async def requests():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/v1/models/toy:predict",
                        json={"instances": [{"text": text, "beam_width": 3}]},
                    )
                    for text in texts
                )
            )

    answers = asyncio.run(requests())
    assert app.state.batcher.calls == 1  # eight callers, one run of the model
    for answer, translation, score in zip(answers, _strings(alone["translation"]), alone["score"]):
        (row,) = answer.json()["predictions"]
        assert row["translation"] == translation and row["score"] == pytest.approx(
            float(score), rel=1e-5
        )


@pytest.mark.slow
def test_a_ctranslate2_version_answers_concurrent_requests(model_root):
    """Requests run side by side on the server's threads (no batching):
    every one is answered, none waits for another's thread (a search run
    inside a TensorFlow op did, tokenizing on the pool the op held)."""
    import concurrent.futures

    store = ModelStore(str(model_root))
    store.refresh()
    app = create_app(ServeConfig(str(model_root), max_batch_size=1, threads=4), store=store)
    texts = [
        f"{word} hund läuft ."
        for word in ("ein", "der", "zwei", "kein", "mein", "dein", "sein", "ihr")
    ]

    async def requests():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/v1/models/ct2:predict",
                        json={"instances": [{"text": text, "beam_width": 2}]},
                    )
                    for text in texts
                )
            )

    # a hang fails in a minute, not at the suite's timeout
    with concurrent.futures.ThreadPoolExecutor(1) as runner:
        answers = runner.submit(asyncio.run, requests()).result(timeout=60)
    assert [answer.status_code for answer in answers] == [200] * len(texts)


@pytest.mark.parametrize("calls, threads", [(2, 4), (8, 1)])
def test_a_ctranslate2_versions_calls_share_the_cores(
    model_root, tmp_path, monkeypatch, calls, threads
):
    """8 cores and `calls` model calls at once: each CTranslate2 call gets 8 // calls threads (at
    least one), not CTranslate2's default of 4 a call, which puts more threads than cores to work;
    loaded alone (as `keras-attn translate` loads a folder), all 8."""
    from keras_attn.serving.ctranslate2_translator import load_ctranslate2

    shutil.copytree(model_root / "ct2", tmp_path / "ct2")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    store = create_app(ServeConfig(str(tmp_path), threads=calls)).state.store
    store.refresh()
    assert store.find("ct2").loaded.translator.threads == threads
    assert load_ctranslate2(str(tmp_path / "ct2" / "1")).threads == 8


@pytest.mark.slow
def test_requests_batch_only_with_others_of_about_their_length(model_root):
    store = ModelStore(str(model_root))
    store.refresh()
    app = create_app(
        ServeConfig(str(model_root), max_batch_size=8, batch_timeout_ms=500), store=store
    )
    texts = [
        "ein hund läuft .",
        "der hund läuft .",
        "ein mann isst einen apfel . " * 8,
        "zwei katzen schlafen . " * 9,
    ]

    async def requests():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/v1/models/toy:predict",
                        json={"instances": [{"text": text, "beam_width": 1}]},
                    )
                    for text in texts
                )
            )

    assert [answer.status_code for answer in asyncio.run(requests())] == [200] * 4
    assert app.state.batcher.calls == 2  # the two short ones together, the two long ones together


def test_a_new_version_is_served_without_a_restart(client, model_root):
    shutil.copytree(model_root / "toy" / "1", model_root / "toy" / "copying")
    # whole at once, as an export appears
    os.rename(model_root / "toy" / "copying", model_root / "toy" / "2")
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            newest = client.get("/v1/models/toy").json()["model_version_status"][0]
            if newest["version"] == "2" and newest["state"] != "LOADING":
                break
            time.sleep(0.2)
        (newest, _) = client.get("/v1/models/toy").json()["model_version_status"]
        assert newest["version"] == "2" and newest["state"] == "AVAILABLE"
        assert client.get("/v1/models/toy/metadata").json()["model_spec"]["version"] == "2"
    finally:
        shutil.rmtree(model_root / "toy" / "2")
