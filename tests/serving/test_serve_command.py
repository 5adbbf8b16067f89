"""`keras-attn serve` as a process: it starts, answers, survives a client that leaves, and stops cleanly."""

import concurrent.futures
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest_plugins = ["tests.fixtures_export"]
pytestmark = pytest.mark.slow


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(url, payload, timeout=120):
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, json.loads(answer.read())


@pytest.fixture
def server(model_root):
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_attn.cli", "serve", str(model_root), "--port", str(port), "--poll-seconds", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    first = process.stdout.readline()  # printed once the models are loaded (TensorFlow's logs go to stderr)
    assert "serving on" in first, first
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield process, f"http://127.0.0.1:{port}", first
    if process.poll() is None:
        process.kill()
    process.wait()


def test_sigterm_answers_the_requests_in_flight_and_exits_0(server):
    process, url, first = server
    assert "toy/1" in first and "bert/1" in first and "failed to load: broken/1" in first
    many = {"signature_name": "translate", "inputs": {"text": ["der mann isst einen apfel . " * 3] * 256, "beam_width": 8}}
    def timed_post():
        return (*_post(f"{url}/v1/models/toy:predict", many), time.time())

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
        _post(f"{url}/v1/models/toy:predict", many, timeout=5)  # no longer taking requests


def test_a_client_that_leaves_mid_request_costs_nothing(server):
    process, url, _ = server
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"inputs": {"text": ["ein hund läuft ."] * 100, "beam_width": 4}}).encode()
    for cut in (len(body) // 2, len(body)):  # leaves while sending the body, then while the model runs
        with socket.create_connection((host, int(port))) as connection:
            connection.sendall(b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:cut])
    status, answer = _post(f"{url}/v1/models/toy:predict", {"instances": [{"text": "ein hund läuft .", "beam_width": 1}]})
    assert status == 200 and len(answer["predictions"]) == 1
    assert process.poll() is None
