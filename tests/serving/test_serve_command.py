"""`keras-attn serve` as a process: it starts, answers, survives a
client that leaves, and stops cleanly.
"""

import concurrent.futures
import json
import signal
import socket
import time

import pytest

from tests.serving.conftest import post, serving_process

pytest_plugins = ["tests.fixtures_export"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(model_root):
    """One server for the module: its last test stops it."""
    with serving_process(model_root) as started:
        yield started


def test_a_client_that_leaves_mid_request_costs_nothing(server):
    process, url, _ = server
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"inputs": {"text": ["ein hund läuft ."] * 100, "beam_width": 4}}).encode()
    # leaves while sending the body, then while the model runs
    for cut in (
        len(body) // 2,
        len(body),
    ):
        with socket.create_connection((host, int(port))) as connection:
            connection.sendall(
                b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body[:cut]
            )
    status, answer = post(
        f"{url}/v1/models/toy:predict",
        {"instances": [{"text": "ein hund läuft .", "beam_width": 1}]},
    )
    assert status == 200 and len(answer["predictions"]) == 1
    assert process.poll() is None


@pytest.mark.parametrize(
    "head", [b"Content-Length: many", b"Content-Length: 1\r\nContent-Length: 2", b"no colon"]
)
def test_a_request_http_cannot_parse_gets_a_json_400(server, head):
    _, url, _ = server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(
            b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\n{}"
        )
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status, rest = answer.split(b"\r\n", 1)
    headers, body = rest.split(b"\r\n\r\n", 1)
    assert (
        status.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in headers.lower()
    ), answer
    assert json.loads(body)["error"], answer


def test_sigterm_answers_the_requests_in_flight_and_exits_0(server):  # last: it stops the server
    process, url, first = server
    assert "toy/1" in first and "bert/1" in first and "failed to load: broken/1" in first
    many = {
        "signature_name": "translate",
        "inputs": {"text": ["der mann isst einen apfel . " * 3] * 256, "beam_width": 8},
    }

    def timed_post():
        return (*post(f"{url}/v1/models/toy:predict", many), time.time())

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(timed_post) for _ in range(4)]
        time.sleep(0.3)  # the requests are in
        process.send_signal(signal.SIGTERM)
        signalled = time.time()
        answers = [call.result()[:2] for call in calls]
        answered = [call.result()[2] for call in calls]
    assert max(answered) > signalled  # some were still running when the signal came
    assert [status for status, _ in answers] == [200] * 4
    assert all(len(body["outputs"]["translation"]) == 256 for _, body in answers)
    assert process.wait(timeout=60) == 0
    with pytest.raises(OSError):
        post(f"{url}/v1/models/toy:predict", many, timeout=5)  # no longer taking requests
