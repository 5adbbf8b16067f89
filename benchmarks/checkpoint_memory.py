"""The memory a checkpoint costs to load: peak RSS against the size of its weights.

    python -m benchmarks.checkpoint_memory --out /tmp/bert-base-random

Writes a Hugging Face BERT folder of BERT-base's sizes (`BertForPreTraining`'s
tensors: 110 M float32 parameters, about 440 MB) with random weights and a
made-up 30,522-token vocabulary, then measures, each in a process of its own
that has imported keras_attn first:

- `new`: the same `BertPretrainer` built with fresh weights: what TensorFlow
  holds for the model itself;
- `from_preset`: `BertPretrainer.from_preset(folder)`;
- `import`: `keras-attn import folder OUT` (the model, then its SavedModel).

Each row gives the peak RSS above the process's RSS after the import of
keras_attn, and that peak over the weights file's size.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

BASE = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
    type_vocab_size=2,
)


def bert_tensors(sizes, rng):
    """`{name: float32 array}` of a `BertForPreTraining` checkpoint of `sizes`, random."""
    d, inner, vocab = sizes["hidden_size"], sizes["intermediate_size"], sizes["vocab_size"]

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    tensors = {
        "bert.embeddings.word_embeddings.weight": normal(vocab, d),
        "bert.embeddings.position_embeddings.weight": normal(sizes["max_position_embeddings"], d),
        "bert.embeddings.token_type_embeddings.weight": normal(sizes["type_vocab_size"], d),
        "bert.pooler.dense.weight": normal(d, d),
        "bert.pooler.dense.bias": normal(d),
        "cls.predictions.bias": normal(vocab),
        "cls.predictions.transform.dense.weight": normal(d, d),
        "cls.predictions.transform.dense.bias": normal(d),
        "cls.seq_relationship.weight": normal(2, d),
        "cls.seq_relationship.bias": normal(2),
    }
    norms = ["bert.embeddings.LayerNorm", "cls.predictions.transform.LayerNorm"]
    for layer in range(sizes["num_hidden_layers"]):
        prefix = f"bert.encoder.layer.{layer}"
        for part in ("query", "key", "value"):
            tensors[f"{prefix}.attention.self.{part}.weight"] = normal(d, d)
            tensors[f"{prefix}.attention.self.{part}.bias"] = normal(d)
        tensors[f"{prefix}.attention.output.dense.weight"] = normal(d, d)
        tensors[f"{prefix}.attention.output.dense.bias"] = normal(d)
        tensors[f"{prefix}.intermediate.dense.weight"] = normal(inner, d)
        tensors[f"{prefix}.intermediate.dense.bias"] = normal(inner)
        tensors[f"{prefix}.output.dense.weight"] = normal(d, inner)
        tensors[f"{prefix}.output.dense.bias"] = normal(d)
        norms += [f"{prefix}.attention.output.LayerNorm", f"{prefix}.output.LayerNorm"]
    for norm in norms:
        tensors[f"{norm}.weight"] = np.ones(d, np.float32)
        tensors[f"{norm}.bias"] = np.zeros(d, np.float32)
    return tensors


def write_folder(folder, sizes=BASE):
    """A Hugging Face BERT folder of `sizes` with random weights; returns its weights' bytes."""
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    config = dict(
        sizes,
        model_type="bert",
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    )
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump(config, file)
    specials = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [f"w{i}" for i in range(sizes["vocab_size"] - len(specials))]
    with open(os.path.join(folder, "vocab.txt"), "w") as file:
        file.write("".join(token + "\n" for token in specials + words))
    path = os.path.join(folder, "model.safetensors")
    save_file(bert_tensors(sizes, np.random.default_rng(0)), path, metadata={"format": "pt"})
    return os.path.getsize(path)


MEASURE = """
import json, resource, sys
import keras_attn
from keras_attn import cli, models
from keras_attn.checkpoints import bert

def rss_mb():
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) for line in file if line.startswith("VmRSS")) / 1024

after_import = rss_mb()
case, folder = sys.argv[1], sys.argv[2]
if case == "new":
    checkpoint = bert.read_checkpoint(folder)
    preprocessor = bert.load_preprocessor(checkpoint, 512)
    models.BertPretrainer(models.BertBackbone(**checkpoint.arguments), preprocessor=preprocessor)
elif case == "from_preset":
    models.BertPretrainer.from_preset(folder)
else:
    assert cli.main(["import", folder, sys.argv[3]]) == 0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"after_import_mb": after_import, "peak_mb": peak}))
"""


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="where the random BERT-base folder is written")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--cases", nargs="+", default=["new", "from_preset", "import"], help="of the three above"
    )
    args = parser.parse_args()
    folder = os.path.join(args.out, "bert-base-random")
    if not os.path.isfile(os.path.join(folder, "model.safetensors")):
        write_folder(folder)
    weights_mb = os.path.getsize(os.path.join(folder, "model.safetensors")) / 2**20
    from benchmarks.measures import describe_cpu

    print(f"{describe_cpu()}; weights {weights_mb:.0f} MB")
    print("| case | peak RSS above the import of keras_attn, MB (rounds) | over the weights |")
    print("|---|---:|---:|")
    results = {case: [] for case in args.cases}
    for round_ in range(args.rounds):
        for case in results:
            out = os.path.join(args.out, f"saved_models/imported-{round_}")
            done = subprocess.run(
                [sys.executable, "-c", MEASURE, case, folder, out],
                capture_output=True,
                text=True,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                check=True,
            )
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            results[case].append(measured["peak_mb"] - measured["after_import_mb"])
    for case, grown in results.items():
        print(
            f"| {case} | {min(grown):.0f} ({', '.join(f'{g:.0f}' for g in grown)}) "
            f"| {min(grown) / weights_mb:.2f}x |"
        )


if __name__ == "__main__":
    main()
