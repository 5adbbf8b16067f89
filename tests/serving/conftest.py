"""`keras-attn serve` started as a user starts it, for the tests that need a real HTTP server."""

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(url, payload, timeout=120):
    """`(status, JSON answer)` of a POST of `payload` as JSON."""
    request = urllib.request.Request(
        url, json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, json.loads(answer.read())


@contextlib.contextmanager
def serving_process(model_root):
    """`keras-attn serve MODEL_ROOT` on a free port: yields
    `(process, base URL, its first line)`.
    """
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_attn.cli",
            "serve",
            str(model_root),
            "--port",
            str(port),
            "--poll-seconds",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        # printed once the models are loaded (TensorFlow's logs go to stderr)
        first = process.stdout.readline()
        assert "serving on" in first, first
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield process, f"http://127.0.0.1:{port}", first
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
