"""`keras-attn serve` under load: latency, throughput, errors and
memory with 1-64 concurrent clients.

    python -m benchmarks.serving_load --translation saved_models/transformer/1 --seconds 20
    python -m benchmarks.serving_load --translation EXPORT --bert EXPORT --clients 1,8,32,64
    python -m benchmarks.serving_load --translation EXPORT --ctranslate2 --clients 32 --soak 0

Loopback only, bounded in time (`--seconds` per cell) and in requests
(`--max-requests` per cell). The exports are copied into a fresh model root;
`keras-attn serve` runs in its own process, once with dynamic batching
(`--max-batch-size 32`) and once without (`--max-batch-size 1`); with an
export that carries the search compiled by XLA, the cells start once the
server has compiled its one-text programs (its log says so). Each client
sends one sentence per request, back to back, from Multi30k's test2016
German side (../shared/data, read not copied; the built-in corpus's
sentences without it); every tenth request is a hostile string (empty,
invalid UTF-8 as base64 bytes, 10,000 characters, control characters,
emoji), which must be answered like the rest. Workloads: translation greedy
and beam 4, and BERT fill-mask (top 5; without `--bert`, an untrained BERT
mini exported for the purpose: its speed, not its answers, is measured).
With `--ctranslate2`, the translation export converted by `keras-attn
export-ct2` (float32) is served beside it as a model of its own, and its
translation workloads run too: the two engines under the same load.

Per cell: requests, errors (any answer but 200, or none), answers/s, p50
and p99 latency of the sentences, p50 and the longest of the hostile
strings, and the server's resident memory before the cell and after it.
One more cell sends one sentence over and over from one client: the
server's own latency spread, with nothing in the input varying. First, the
model alone (`model_bounds`): what its sentences' lengths and batches of 32
give with no server, the bounds of the p99/p50 and batching figures. The
soak reads the server's memory every `SOAK_CHUNK` requests. The client runs in this
process on the same machine, so it takes CPU from the server: a bound on
what the numbers can show, said with them.
"""

import argparse
import asyncio
import base64
import gzip
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from keras_attn.serving.versions import read_metadata

DATA = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "multi30k", "raw"
)
SOAK_CHUNK = 2500  # the soak reads the server's memory after every this many requests
HOSTILE = [
    "",
    {"b64": base64.b64encode(b"\xff\xfe ein \xc3(").decode()},
    "ein hund " * 1250,
    "a\x00b\x07c\x1bd\u202e",
    "ein 🐕 läuft 🏃‍♂️ 👩🏽‍🔬",
]


def sentences():
    path = os.path.join(DATA, "test_2016_flickr.de.gz")
    if os.path.exists(path):
        with gzip.open(path, "rt", encoding="utf-8") as file:
            return [line.strip() for line in file]
    from pipelines import synthetic

    return synthetic.translation_corpus(seed=0, train_size=10, valid_size=10, test_size=1000)[
        "test"
    ].sources


def bert_export(root):
    """An untrained BERT mini fill-mask export under `root`/bert
    (the speed of the preset's graph).
    """
    from keras_attn import serving
    from keras_attn.models import BertMaskedLM
    from pipelines import tokenizers
    from pipelines.preprocessors import BertPreprocessor

    words = [line.lower() for line in sentences()[:500]]
    vocabulary = tokenizers.learn_wordpiece_vocabulary(words, 4000, lowercase=True)
    task = BertMaskedLM.from_preset(
        "mini", BertPreprocessor(vocabulary, max_length=64, lowercase=True)
    )
    return serving.export(serving.BertServer(task), str(root), "bert")


def model_bounds(export, texts, sentences=256):
    """What the server can show at best: the translation export called in this process, no HTTP.

    Per search (greedy, beam 4): each of the first `sentences` sentences alone
    (p50 and p99: the spread that their lengths alone give one client), and
    the same sentences in batches of 32 in test order (sentences/s; its ratio
    to one at a time bounds what batching can give 32 clients).
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    translate = tf.saved_model.load(export).signatures["translate"]
    texts = texts[:sentences]
    bounds = {}
    for beam in (1, 4):

        def call(batch, beam=beam):
            out = translate(text=tf.constant(batch), beam_width=tf.constant(beam))
            return out["translation"].numpy()

        call(texts[:32]), call(texts[:1])  # warm-up
        alone = []
        started = time.perf_counter()
        for text in texts:
            before = time.perf_counter()
            call([text])
            alone.append(time.perf_counter() - before)
        one_at_a_time = len(texts) / (time.perf_counter() - started)
        started = time.perf_counter()
        for start in range(0, len(texts), 32):
            call(texts[start : start + 32])
        batched = len(texts) / (time.perf_counter() - started)
        alone.sort()
        bounds["greedy" if beam == 1 else f"beam {beam}"] = {
            "p50_ms": round(1000 * statistics.median(alone), 1),
            "p99_ms": round(1000 * alone[int(0.99 * (len(alone) - 1))], 1),
            "one_at_a_time_per_s": round(one_at_a_time, 1),
            "batches_of_32_per_s": round(batched, 1),
            "batching_gain": round(batched / one_at_a_time, 2),
        }
        print("model alone:", json.dumps(bounds), flush=True)
    return bounds


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def load(url, request_for, clients, seconds, max_requests):
    """`clients` callers, each sending requests back to back.

    Returns:
        `(latencies, errors, wall)`: `latencies` `{request index: seconds}` of the answered ones.
    """
    import httpx

    latencies, errors, sent = {}, [], [0]
    deadline = time.perf_counter() + seconds

    async def client(http):
        while time.perf_counter() < deadline and sent[0] < max_requests:
            index = sent[0]
            sent[0] += 1
            started = time.perf_counter()
            try:
                answer = await http.post(url, json=request_for(index), timeout=120)
                if answer.status_code == 200:
                    latencies[index] = time.perf_counter() - started
                else:
                    errors.append(f"{answer.status_code} {answer.text[:80]}")
            except httpx.HTTPError as error:
                errors.append(type(error).__name__)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    started = time.perf_counter()
    async with httpx.AsyncClient(limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return latencies, errors, time.perf_counter() - started


def start_server(root, port, max_batch_size, compiled_model=None):
    """`keras-attn serve` on `root`, once it answers; with `compiled_model`,
    once that model's one-text programs are compiled too (its log line), so
    that no cell shares the cores with XLA's compiler."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_attn.cli",
            "serve",
            root,
            "--port",
            str(port),
            "--poll-seconds",
            "0",
            "--max-batch-size",
            str(max_batch_size),
            "--max-request-bytes",
            str(1 << 20),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines = queue.Queue()  # the server's log, read all along so that its pipe never fills
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    ).start()
    line = lines.get(timeout=600)
    if "serving on" not in line:
        sys.exit(f"the server did not start: {line}")
    while compiled_model:
        line = lines.get(timeout=600)
        if line.startswith(f"{compiled_model}/") and "compiled" in line:
            print("server:", line.strip(), flush=True)
            break
    time.sleep(1)
    return process


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--translation", required=True, help="a translation export (saved_models/<name>/<version>)"
    )
    parser.add_argument(
        "--bert", help="a BERT export with fill_mask (default: an untrained BERT mini)"
    )
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--seconds", type=float, default=20.0, help="per cell")
    parser.add_argument("--max-requests", type=int, default=20000, help="per cell")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--soak",
        type=int,
        default=10000,
        help="then this many greedy translations at 32 clients, with batching: errors and memory",
    )
    parser.add_argument(
        "--soak-only", action="store_true", help="only the soak (no cells, no run without batching)"
    )
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="also serve the export converted for CTranslate2 (float32) and load it alike",
    )
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()

    texts = sentences()
    root = tempfile.mkdtemp(prefix="serving-load-")
    shutil.copytree(args.translation, os.path.join(root, "translation", "1"))
    if args.ctranslate2:
        from keras_attn.jobs.translation import export_to_ctranslate2

        os.makedirs(os.path.join(root, "translation-ct2"))
        export_to_ctranslate2(args.translation, os.path.join(root, "translation-ct2", "1"))
    if args.bert:
        shutil.copytree(args.bert, os.path.join(root, "bert", "1"))
    else:
        bert_export(root)

    def is_hostile(index):
        return index % 10 == 9

    def text(index):
        return (
            HOSTILE[(index // 10) % len(HOSTILE)]
            if is_hostile(index)
            else texts[index % len(texts)]
        )

    bounds = None if args.soak_only else model_bounds(args.translation, texts)
    workloads = {
        "translate, greedy": (
            "translation",
            lambda i: {
                "signature_name": "translate",
                "inputs": {"text": [text(i)], "beam_width": 1},
            },
        ),
        "translate, greedy, one sentence": (
            "translation",
            lambda i: {
                "signature_name": "translate",
                "inputs": {"text": [texts[0]], "beam_width": 1},
            },
        ),
        "translate, beam 4": (
            "translation",
            lambda i: {
                "signature_name": "translate",
                "inputs": {"text": [text(i)], "beam_width": 4},
            },
        ),
        **(
            {
                "CTranslate2 translate, greedy": (
                    "translation-ct2",
                    lambda i: {
                        "signature_name": "translate",
                        "inputs": {"text": [text(i)], "beam_width": 1},
                    },
                ),
                "CTranslate2 translate, beam 4": (
                    "translation-ct2",
                    lambda i: {
                        "signature_name": "translate",
                        "inputs": {"text": [text(i)], "beam_width": 4},
                    },
                ),
            }
            if args.ctranslate2
            else {}
        ),
        "BERT fill-mask, top 5": (
            "bert",
            lambda i: {
                "signature_name": "fill_mask",
                "inputs": {
                    "text": [
                        text(i) if is_hostile(i) else f"{texts[i % len(texts)].lower()} [MASK] ."
                    ],
                    "top_k": 5,
                },
            },
        ),
    }
    rows, soak = [], None
    compiled_model = (
        "translation" if read_metadata(args.translation).get("compiled_search") else None
    )
    for batching in (32,) if args.soak_only else (32, 1):
        server = start_server(root, args.port, batching, compiled_model)
        try:
            for workload, (model, request_for) in {} if args.soak_only else workloads.items():
                url = f"http://127.0.0.1:{args.port}/v1/models/{model}:predict"
                asyncio.run(load(url, request_for, 4, 3, 200))  # warm-up: every shape traced once
                for clients in map(int, args.clients.split(",")):
                    if workload.endswith("one sentence") and clients > 1:
                        continue  # the server's own spread: one client, nothing varying
                    before = rss_mb(server.pid)
                    latencies, errors, wall = asyncio.run(
                        load(url, request_for, clients, args.seconds, args.max_requests)
                    )
                    after = rss_mb(server.pid)
                    mixed = not workload.endswith("one sentence")
                    ordered = sorted(
                        t for index, t in latencies.items() if not (mixed and is_hostile(index))
                    )
                    hostile = sorted(
                        t for index, t in latencies.items() if mixed and is_hostile(index)
                    )
                    row = {
                        "batching": batching > 1,
                        "workload": workload,
                        "clients": clients,
                        "requests": len(latencies) + len(errors),
                        "errors": len(errors),
                        "answers_per_s": round(len(latencies) / wall, 1),
                        "p50_ms": round(1000 * statistics.median(ordered), 1) if ordered else None,
                        "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 1)
                        if ordered
                        else None,
                        "hostile_p50_ms": round(1000 * statistics.median(hostile), 1)
                        if hostile
                        else None,
                        "hostile_max_ms": round(1000 * hostile[-1], 1) if hostile else None,
                        "rss_mb_before": round(before),
                        "rss_mb_after": round(after),
                        "error_examples": sorted(set(errors))[:3],
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            if batching > 1 and args.soak:
                url = f"http://127.0.0.1:{args.port}/v1/models/translation:predict"
                rss, answered, errors, wall = [round(rss_mb(server.pid))], 0, [], 0.0
                # growth that levels off, or a leak
                for _ in range(max(args.soak // SOAK_CHUNK, 1)):
                    latencies, chunk_errors, chunk_wall = asyncio.run(
                        load(
                            url,
                            workloads["translate, greedy"][1],
                            32,
                            3600,
                            min(args.soak, SOAK_CHUNK),
                        )
                    )
                    answered, wall = answered + len(latencies), wall + chunk_wall
                    errors += chunk_errors
                    rss.append(round(rss_mb(server.pid)))
                soak = {
                    "requests": answered + len(errors),
                    "errors": len(errors),
                    "seconds": round(wall),
                    f"rss_mb_every_{SOAK_CHUNK}": rss,
                    "error_examples": sorted(set(errors))[:3],
                }
                print("soak:", json.dumps(soak), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=120)
    shutil.rmtree(root, ignore_errors=True)
    print("\nThe model alone (in process, first 256 sentences):", json.dumps(bounds))
    print(
        "\n| batching | workload | clients | requests | errors | answers/s | p50 ms | p99 ms | "
        "hostile p50, max ms | RSS MB before → after |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(
            f"| {'on' if r['batching'] else 'off'} | {r['workload']} | {r['clients']} | "
            f"{r['requests']} | {r['errors']} | {r['answers_per_s']} | {r['p50_ms']} | "
            f"{r['p99_ms']} | {r['hostile_p50_ms']}, {r['hostile_max_ms']} | {r['rss_mb_before']} "
            f"→ {r['rss_mb_after']} |"
        )
    if args.out:
        with open(args.out, "w") as file:
            json.dump(
                {"model_alone": bounds, "cells": rows, "soak": soak if args.soak else None},
                file,
                indent=1,
            )


if __name__ == "__main__":
    main()
