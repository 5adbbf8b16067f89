"""Broken and hostile checkpoint folders, each one change to a valid tiny folder, and what loaders
make of them.

    python -m benchmarks.broken_checkpoints --out /tmp/broken   # ours, transformers', keras-hub's

`CASES` are the folders a loader must refuse: made from the tiny Hugging Face
folders of tests/fixtures/huggingface/ (a BERT, a sharded bare BERT and a
Marian) by changing one thing each, by kind: sizes the config claims, weights,
files, values. `FINE` are folders that must still load. tests/checkpoints/
test_broken_folders.py asserts that ours refuses each case in one line; this
script counts, for each loader, how each case ends: a refusal in one line (a
`ValueError`, `OSError` or `SafetensorError` whose message is one line), a
traceback (any other exception, or a message of several lines), a silent import
(no exception), a hang or memory exhausted (the process killed at `--timeout`
seconds or its memory cap).
"""

import argparse
import dataclasses
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "huggingface"
BASES = {"bert": "bert", "sharded": "bert-model-sharded", "marian": "marian"}
# Each base's task: what `keras-attn import` makes of it, and the class each loader is asked for.
TASKS = {"bert": "BertPretrainer", "sharded": "BertBackbone", "marian": "Seq2SeqLM"}


@dataclasses.dataclass
class Case:
    name: str
    kind: str  # "sizes", "weights", "files" or "values"
    base: str  # a key of BASES
    breaks: object  # breaks(folder): changes the copied folder
    says: tuple  # what our one line holds: the file and the value


def copy_base(base, into):
    """A copy of the fixture folder `base` at `into`."""
    return Path(shutil.copytree(FIXTURES / BASES[base], into))


def edit_config(folder, name="config.json", **settings):
    """Rewrites a JSON file of `folder` with `settings` (a value of `...` removes the setting)."""
    path = folder / name
    values = json.loads(path.read_text(encoding="utf-8"))
    values.update(settings)
    path.write_text(json.dumps({k: v for k, v in values.items() if v is not ...}))


def edit_tensors(folder, change, name="model.safetensors"):
    """Rewrites a safetensors file of `folder` with `change(tensors)` applied to its dict."""
    from safetensors.numpy import load_file, save_file

    path = str(folder / name)
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def write_raw_tensor(path, name, dtype, shape):
    """A safetensors file holding one tensor of zeros, its data left sparse on disk (a tensor of
    gigabytes costs no disk and no time to write)."""
    size = int(np.prod(shape)) * {"F32": 4, "F16": 2}[dtype]
    header = json.dumps({name: {"dtype": dtype, "shape": list(shape), "data_offsets": [0, size]}})
    header = header.encode() + b" " * (-len(header) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(header)) + header)
        file.truncate(8 + len(header) + size)


def _set(tensors, name, change):
    tensors[name] = change(tensors[name])


def _nested(depth):
    return "[" * depth + "]" * depth


def _index(folder, weight_map):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = weight_map
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _first_shard_to(folder, target):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = sorted(index["weight_map"])[0]
    _index(folder, {**index["weight_map"], first: target})


def _link_outside(folder):
    outside = folder.parent / "outside.safetensors"
    shutil.copy(folder / "model.safetensors", outside)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(outside)


def _link_out(folder, name, content):
    """`folder/name` a link to a file outside the folder holding `content`."""
    outside = folder.parent / f"outside-{name}"
    outside.write_text(content)
    (folder / name).unlink()
    (folder / name).symlink_to(outside)


def _far_layer(tensors):
    name = "bert.encoder.layer." + "9" * 5000 + ".attention.self.query.weight"
    tensors[name] = tensors[QUERY].copy()


def _extra_layer(tensors):
    for name in [n for n in tensors if ".layer.1." in n]:
        tensors[name.replace(".layer.1.", ".layer.2.")] = tensors[name].copy()


QUERY = "bert.encoder.layer.1.attention.self.query.weight"
TABLE = "bert.embeddings.word_embeddings.weight"
CASES = [
    # Sizes the config claims: refused against the weights' shapes before anything is built.
    Case(
        "hidden_size 10**9",
        "sizes",
        "bert",
        lambda f: edit_config(f, hidden_size=10**9),
        ("config.json", "hidden_size 1000000000"),
    ),
    Case(
        "vocab_size 10**10",
        "sizes",
        "bert",
        lambda f: edit_config(f, vocab_size=10**10),
        ("config.json", "vocab_size 10000000000"),
    ),
    Case(
        "max_position_embeddings 10**9",
        "sizes",
        "bert",
        lambda f: edit_config(f, max_position_embeddings=10**9),
        ("config.json", "1000000000"),
    ),
    Case(
        "vocab_size 2*10**7",
        "sizes",
        "bert",
        lambda f: edit_config(f, vocab_size=2 * 10**7),
        ("config.json", "20000000"),
    ),
    Case(
        "num_hidden_layers 10**6",
        "sizes",
        "bert",
        lambda f: edit_config(f, num_hidden_layers=10**6),
        ("config.json", "1000000"),
    ),
    Case(
        "d_model 10**9 (Marian)",
        "sizes",
        "marian",
        lambda f: edit_config(f, d_model=10**9),
        ("config.json", "1000000000"),
    ),
    Case(
        "encoder_layers 10**6 (Marian)",
        "sizes",
        "marian",
        lambda f: edit_config(f, encoder_layers=10**6),
        ("config.json", "encoder_layers 1000000"),
    ),
    Case(
        "decoder_layers 10**6 (Marian)",
        "sizes",
        "marian",
        lambda f: edit_config(f, decoder_layers=10**6),
        ("config.json", "decoder_layers 1000000"),
    ),
    Case(
        "max_position_embeddings 10**9 (Marian)",
        "sizes",
        "marian",
        lambda f: edit_config(f, max_position_embeddings=10**9),
        ("config.json", "1000000000"),
    ),
    # Weights.
    Case(
        "a missing tensor",
        "weights",
        "bert",
        lambda f: edit_tensors(f, lambda t: t.pop(QUERY)),
        ("encoder.layer.1.attention.self.query.weight",),
    ),
    Case(
        "a token table shorter than the config",
        "weights",
        "bert",
        lambda f: edit_tensors(f, lambda t: _set(t, TABLE, lambda v: v[:100])),
        ("model.safetensors", "word_embeddings", "(100, 32)"),
    ),
    Case(
        "final_logits_bias narrower than the vocabulary (Marian)",
        "weights",
        "marian",
        lambda f: edit_tensors(f, lambda t: _set(t, "final_logits_bias", lambda v: v[:, :30])),
        ("model.safetensors", "final_logits_bias", "(1, 30)"),
    ),
    Case(
        "a NaN weight",
        "weights",
        "bert",
        lambda f: edit_tensors(f, lambda t: t[QUERY].__setitem__((0, 0), np.nan)),
        ("model.safetensors", QUERY, "NaN"),
    ),
    Case(
        "an infinite weight (Marian)",
        "weights",
        "marian",
        lambda f: edit_tensors(f, lambda t: t["model.shared.weight"].__setitem__((3, 3), np.inf)),
        ("model.safetensors", "model.shared.weight", "infinite"),
    ),
    Case(
        "an int32 tensor",
        "weights",
        "bert",
        lambda f: edit_tensors(f, lambda t: _set(t, QUERY, lambda v: v.astype(np.int32))),
        ("model.safetensors", QUERY, "I32"),
    ),
    Case(
        "a bool tensor",
        "weights",
        "bert",
        lambda f: edit_tensors(f, lambda t: _set(t, QUERY, lambda v: v > 0)),
        ("model.safetensors", QUERY, "BOOL"),
    ),
    Case(
        "one more encoder layer than the config",
        "weights",
        "bert",
        lambda f: edit_tensors(f, _extra_layer),
        ("config.json", "num_hidden_layers 2", "3"),
    ),
    # Files.
    Case(
        "vocab.txt of invalid UTF-8",
        "files",
        "bert",
        lambda f: (f / "vocab.txt").write_bytes(
            b"[PAD]\n\xff\xfe\n" + (f / "vocab.txt").read_bytes()
        ),
        ("vocab.txt:2", "invalid UTF-8"),
    ),
    Case(
        "vocab.txt with a token twice",
        "files",
        "bert",
        lambda f: (f / "vocab.txt").write_text(
            (f / "vocab.txt").read_text().replace("[unused1]", "[CLS]")
        ),
        ("vocab.txt", "'[CLS]' again"),
    ),
    Case(
        "vocab.txt longer than the token table",
        "files",
        "bert",
        lambda f: (f / "vocab.txt").write_text((f / "vocab.txt").read_text() + "extra\n"),
        ("vocab.txt", "121 tokens", "120 rows"),
    ),
    Case(
        "vocab.json a list (Marian)",
        "files",
        "marian",
        lambda f: (f / "vocab.json").write_text('["</s>", "<unk>"]'),
        ("vocab.json", "not a JSON object"),
    ),
    Case(
        "vocab.json of float ids (Marian)",
        "files",
        "marian",
        lambda f: (f / "vocab.json").write_text(
            json.dumps({k: float(v) for k, v in json.loads((f / "vocab.json").read_text()).items()})
        ),
        ("vocab.json", "0.0"),
    ),
    Case(
        "vocab.json ids beyond the table (Marian)",
        "files",
        "marian",
        lambda f: (f / "vocab.json").write_text(
            json.dumps({k: v + 100 for k, v in json.loads((f / "vocab.json").read_text()).items()})
        ),
        ("vocab.json", "not a whole number below 38"),
    ),
    Case(
        "source.spm of random bytes (Marian)",
        "files",
        "marian",
        lambda f: (f / "source.spm").write_bytes(np.random.default_rng(0).bytes(4096)),
        ("source.spm", "not a SentencePiece model"),
    ),
    Case(
        "target.spm empty (Marian)",
        "files",
        "marian",
        lambda f: (f / "target.spm").write_bytes(b""),
        ("target.spm",),
    ),
    Case(
        "a shard index that is not JSON",
        "files",
        "sharded",
        lambda f: (f / "model.safetensors.index.json").write_text("{weight_map"),
        ("model.safetensors.index.json", "not JSON"),
    ),
    Case(
        "a shard index without weight_map",
        "files",
        "sharded",
        lambda f: (f / "model.safetensors.index.json").write_text('{"metadata": {}}'),
        ("model.safetensors.index.json", "no weight_map"),
    ),
    Case(
        "a shard index naming /etc/passwd",
        "files",
        "sharded",
        lambda f: _first_shard_to(f, "/etc/passwd"),
        ("index.json", "'/etc/passwd'"),
    ),
    Case(
        "a shard index naming ../../../../etc/shadow",
        "files",
        "sharded",
        lambda f: _first_shard_to(f, "../../../../etc/shadow"),
        ("index.json", "leaves the folder"),
    ),
    Case(
        "model.safetensors a link out of the folder",
        "files",
        "bert",
        _link_outside,
        ("model.safetensors", "outside the folder"),
    ),
    Case(
        "config.json nested 100,000 deep",
        "files",
        "bert",
        lambda f: (f / "config.json").write_text(_nested(100_000)),
        ("config.json", "nested"),
    ),
    Case(
        "a layer numbered with 5,000 digits",
        "weights",
        "bert",
        lambda f: edit_tensors(f, _far_layer),
        ("encoder layer numbered 999999999999",),
    ),
    Case(
        "a shard name with a NUL byte",
        "files",
        "sharded",
        lambda f: _first_shard_to(f, "model\x00.safetensors"),
        ("index.json", "is not a file name"),
    ),
    Case(
        "a shard named '.'",
        "files",
        "sharded",
        lambda f: _first_shard_to(f, "."),
        ("index.json", "'.' is not a file name"),
    ),
    Case(
        "vocab.txt a link out of the folder",
        "files",
        "bert",
        lambda f: _link_out(f, "vocab.txt", "[PAD]\nhunter2\nhunter2\n"),
        ("vocab.txt", "outside the folder"),
    ),
    Case(
        "config.json a link out of the folder",
        "files",
        "marian",
        lambda f: _link_out(f, "config.json", (f / "config.json").read_text()),
        ("config.json", "outside the folder"),
    ),
    # Values.
    Case(
        "layer_norm_eps NaN",
        "values",
        "bert",
        lambda f: edit_config(f, layer_norm_eps=float("nan")),
        ("config.json", "layer_norm_eps nan"),
    ),
    Case(
        "layer_norm_eps Infinity",
        "values",
        "bert",
        lambda f: edit_config(f, layer_norm_eps=float("inf")),
        ("config.json", "layer_norm_eps inf"),
    ),
    Case(
        'hidden_dropout_prob "lots"',
        "values",
        "bert",
        lambda f: edit_config(f, hidden_dropout_prob="lots"),
        ("config.json", "'lots'"),
    ),
    Case(
        'd_model "32" (Marian)',
        "values",
        "marian",
        lambda f: edit_config(f, d_model="32"),
        ("config.json", "d_model '32'"),
    ),
    Case(
        'eos_token_id "</s>" (Marian)',
        "values",
        "marian",
        lambda f: edit_config(f, eos_token_id="</s>"),
        ("config.json", "eos_token_id '</s>'"),
    ),
    Case(
        "encoder_layers -1 (Marian)",
        "values",
        "marian",
        lambda f: edit_config(f, encoder_layers=-1),
        ("config.json", "encoder_layers -1"),
    ),
    Case(
        "vocab_size missing",
        "values",
        "bert",
        lambda f: edit_config(f, vocab_size=...),
        ("config.json", "no vocab_size"),
    ),
    Case(
        "pad and decoder-start id 5000 of 38 (Marian)",
        "values",
        "marian",
        lambda f: edit_config(f, pad_token_id=5000, decoder_start_token_id=5000),
        ("config.json", "pad_token_id 5000"),
    ),
    Case(
        'do_lower_case "yes"',
        "values",
        "bert",
        lambda f: edit_config(f, "tokenizer_config.json", do_lower_case="yes"),
        ("tokenizer_config.json", "do_lower_case 'yes'"),
    ),
    Case(
        'strip_accents "no"',
        "values",
        "bert",
        lambda f: edit_config(f, "tokenizer_config.json", strip_accents="no"),
        ("tokenizer_config.json", "strip_accents 'no'"),
    ),
    Case(
        "layer_norm_eps of 400 digits",
        "values",
        "bert",
        lambda f: edit_config(f, layer_norm_eps=10**400),
        ("config.json", "layer_norm_eps 1000000000", "..."),
    ),
]


def _to_dtype(dtype):
    def change(tensors):
        for name in tensors:
            tensors[name] = tensors[name].astype(dtype)

    return change


def _big_unknown_shard(folder):
    write_raw_tensor(folder / "extra.safetensors", "extra.unknown", "F32", (2**19, 2**10))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["extra.unknown"] = "extra.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _hub_cache(folder):
    """The folder as the Hugging Face hub's cache lays it out: snapshots/<rev>/ of links into
    blobs/."""
    blobs = folder / "blobs"
    blobs.mkdir()
    for path in list(folder.iterdir()):
        if path.is_file():
            path.rename(blobs / path.name)
    snapshot = folder / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for blob in blobs.iterdir():
        (snapshot / blob.name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snapshot


# Folders that must load: (name, base, change(folder) → the folder to load, or None for itself).
FINE = [
    ("float16 weights", "bert", lambda f: edit_tensors(f, _to_dtype(np.float16))),
    ("bfloat16 weights (Marian)", "marian", lambda f: edit_tensors(f, _to_dtype("bfloat16"))),
    (
        "an unknown small tensor",
        "bert",
        lambda f: edit_tensors(f, lambda t: t.__setitem__("extra.note", np.ones(3, np.float32))),
    ),
    ("an unknown 2 GB tensor, never read", "sharded", _big_unknown_shard),
    (
        "the position ids buffer older checkpoints hold",
        "bert",
        lambda f: edit_tensors(
            f, lambda t: t.__setitem__("bert.embeddings.position_ids", np.arange(24)[None])
        ),
    ),
    ("the hub cache's links into blobs/", "marian", _hub_cache),
]
FINE_FOLDER_NAMES = ["a folder with spaces", "mödel-日本"]


def make(case_or_fine, into):
    """The broken (or fine) folder of `case_or_fine` under `into`; returns its path."""
    if isinstance(case_or_fine, Case):
        folder = copy_base(case_or_fine.base, into / BASES[case_or_fine.base])
        case_or_fine.breaks(folder)
        return folder
    _, base, change = case_or_fine
    folder = copy_base(base, into / BASES[base])
    return change(folder) or folder


# How a loader is asked for each base, in a process of its own.
LOADERS = {
    "keras-attn": (
        "import keras_attn\nfrom keras_attn import models\n"
        "getattr(models, {task!r}).from_preset({folder!r})"
    ),
    "transformers": (
        "import transformers\n"
        "cls = {{'BertPretrainer': 'BertForPreTraining', 'BertBackbone': 'BertModel',"
        " 'Seq2SeqLM': 'MarianMTModel'}}[{task!r}]\n"
        "getattr(transformers, cls).from_pretrained({folder!r})\n"
        "if {task!r} != 'BertBackbone': transformers.AutoTokenizer.from_pretrained({folder!r})"
    ),
    "keras-hub": "import keras_hub\nkeras_hub.models.BertBackbone.from_preset({folder!r})",
}
ONE_LINE = ("ValueError", "UserError", "OSError", "SafetensorError", "EnvironmentError")


def outcome(loader, folder, task, timeout, memory_gb):
    """How `loader` ends on `folder`: "one line", "traceback", "silent" or "hang/memory"."""
    code = LOADERS[loader].format(folder=str(folder), task=task)
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory_gb << 30},) * 2)\n"
    try:
        done = subprocess.run(
            [sys.executable, "-c", limit + code],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "HF_HUB_OFFLINE": "1"},
        )
    except subprocess.TimeoutExpired:
        return "hang/memory"
    if done.returncode == 0:
        return "silent"
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if "MemoryError" in last or "ResourceExhausted" in last or done.returncode < 0:
        return "hang/memory"
    kind, _, message = last.partition(":")
    if kind.split(".")[-1] in ONE_LINE and message.strip():
        return "one line"
    return "traceback"


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="a new folder for the broken folders")
    parser.add_argument("--loaders", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument("--timeout", type=int, default=120, help="seconds before a hang")
    parser.add_argument("--memory-gb", type=int, default=8, help="each process's address space")
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="NAME", help="the cases whose names hold one"
    )
    args = parser.parse_args()
    out = Path(args.out)
    counts = {loader: {} for loader in args.loaders}
    print("| case | kind | " + " | ".join(args.loaders) + " |")
    print("|---|---|" + "---|" * len(args.loaders))
    for number, case in enumerate(CASES):
        if args.only and not any(part in case.name for part in args.only):
            continue
        folder = make(case, out / f"{number:02d}")
        row = []
        for loader in args.loaders:
            if loader == "keras-hub" and case.base == "marian":
                row.append("(no Marian)")
                continue
            ended = outcome(loader, folder, TASKS[case.base], args.timeout, args.memory_gb)
            counts[loader][ended] = counts[loader].get(ended, 0) + 1
            row.append(ended)
        print(f"| {case.name} | {case.kind} | " + " | ".join(row) + " |", flush=True)
    for loader, ends in counts.items():
        print(f"{loader}: " + ", ".join(f"{n} {ended}" for ended, n in sorted(ends.items())))


if __name__ == "__main__":
    main()
