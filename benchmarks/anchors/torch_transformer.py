"""Our Transformer's training against PyTorch's: the same model,
batches, loss, optimizer and threads.

    python -m benchmarks.anchors.torch_transformer --check  # the same function: first losses
    python -m benchmarks.anchors.torch_transformer --time [--rounds 3 --steps 30 --threads 2]
    python -m benchmarks.anchors.torch_transformer --profile [--precision bfloat16] [--compile]

Benchmark-only requirement: `torch` (CPU wheel; not a dependency of keras-attn).

The model is our `TransformerBackbone` as the translation job builds it at preset "small", written
with torch.nn's own blocks (`nn.TransformerEncoderLayer` / `nn.TransformerDecoderLayer`, post-norm
as ours): one embedding table for the encoder's input, the decoder's input and the pre-softmax
projection (`--shared-vocab`, 3.4), scaled by √d, plus the interleaved sinusoids (3.5); dropout on
the embeddings and on each sublayer's output only, as our blocks (torch.nn's also drop attention
weights and the feed-forward's inner activations: turned off here). Every size comes from the
configs `benchmarks.anchors.harness` wrote beside the batches. Training: the label-smoothed
cross-entropy over the real target tokens, then Adam with the settings of our optimizer's config
(`transformer_adam`; torch's `fused=True`, its fastest on CPU), after scaling each gradient to its
norm limit on its own (Keras's `clipnorm`, not `clip_grad_norm_`'s global norm), with ε where Keras
puts it, at the job's learning rate of each step. bfloat16: `torch.autocast("cpu", torch.bfloat16)`
against our `mixed_bfloat16` policy; `--compile`: `torch.compile` of the forward pass and the loss
(AOTAutograd compiles the backward pass with them; the optimizer stays eager, as ours).

`--check` builds the job's task in float32 with dropout off, copies its initial weights into the
PyTorch model, compares the first batch's gradients, then trains both on the first batches: each
step's loss (before its update) in both and their difference, and how far apart the weights end.
`--time` runs ours and each PyTorch variant (eager and compiled, float32 and bfloat16) in processes
of their own, in turn (`harness.alternate_processes`), and prints a table of target tokens/s.
`--profile`: torch.profiler's top ops by self CPU time over a few training steps (ours: `python -m
benchmarks.profile_step --case transformer-train`).
"""

import argparse
import itertools
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.anchors import harness

VARIANTS = (
    "keras:float32",
    "torch:float32",
    "torch.compile:float32",
    "keras:mixed_bfloat16",
    "torch:bfloat16",
    "torch.compile:bfloat16",
)


def sinusoids(length, width, max_wavelength=10000.0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos
    / 10000^(2i/d)) (3.5), `(length, width)`.
    """
    angles = torch.arange(length, dtype=torch.float32)[:, None] * max_wavelength ** (
        -torch.arange(0, width, 2, dtype=torch.float32) / width
    )
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(1)  # interleaved


class Transformer(nn.Module):
    """Our `TransformerBackbone` (post-norm, one shared embedding
    table) from torch.nn's blocks: ids in, logits out.
    """

    family = "transformer"  # the job's model it copies (`harness`)

    def __init__(
        self,
        vocabulary_size,
        max_sequence_length,
        num_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        dropout,
        activation,
        layer_norm_epsilon,
    ):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.embedding = nn.Embedding(vocabulary_size, hidden_dim)
        self.register_buffer(
            "positions", sinusoids(max_sequence_length, hidden_dim), persistent=False
        )
        self.dropout = nn.Dropout(dropout)
        block = dict(
            d_model=hidden_dim,
            nhead=num_heads,
            dim_feedforward=intermediate_dim,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_epsilon,
            batch_first=True,
            norm_first=False,
        )
        self.encoder = nn.TransformerEncoder(
            residual_dropout_only(nn.TransformerEncoderLayer(**block)),
            num_layers,
            enable_nested_tensor=False,
        )
        self.decoder = nn.TransformerDecoder(
            residual_dropout_only(nn.TransformerDecoderLayer(**block)), num_layers
        )

    @classmethod
    def of(cls, spec, dropout=None):
        """The model `harness.write` described (`spec`); `dropout` overrides its rate."""
        backbone, layers = spec["backbone"], spec["layers"]
        block, embedding = layers["encoder_block_0"], layers["source_embedding"]
        assert (
            backbone["share_embeddings"] and backbone["tie_output"] and not backbone["norm_first"]
        )
        assert embedding["position"] == "sinusoidal" and embedding["scale_by_sqrt_dim"]
        assert (
            block["attention_dropout"] == 0
            and backbone["num_decoder_layers"] == backbone["num_layers"]
        )
        return cls(
            backbone["source_vocabulary_size"],
            backbone["max_sequence_length"],
            backbone["num_layers"],
            backbone["hidden_dim"],
            backbone["num_heads"],
            backbone["intermediate_dim"],
            backbone["dropout"] if dropout is None else dropout,
            block["activation"],
            block["layer_norm_epsilon"],
        )

    def embed(self, ids):
        """Dropout(E[token] · √d + PE[position]) (3.4, 3.5)."""
        return self.dropout(
            self.embedding(ids) * math.sqrt(self.hidden_dim) + self.positions[: ids.shape[1]]
        )

    def forward(self, source, target_in):
        # True: masked
        source_padding, target_padding = (
            source == harness.PAD_ID,
            target_in == harness.PAD_ID,
        )
        length = target_in.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=target_in.device).triu(1)
        memory = self.encoder(self.embed(source), src_key_padding_mask=source_padding)
        y = self.decoder(
            self.embed(target_in),
            memory,
            tgt_mask=future,
            tgt_is_causal=True,
            tgt_key_padding_mask=target_padding,
            memory_key_padding_mask=source_padding,
        )
        # the transposed embedding as the output projection (3.4)
        return F.linear(y, self.embedding.weight)

    @staticmethod
    def compile_training(loss):
        """`torch.compile` of what it compiles for training: here the forward pass with the loss."""
        return torch.compile(loss)

    def load_keras_weights(self, backbone):
        """Copies our `TransformerBackbone`'s weights (`copy_weights`)."""
        copy_weights(backbone, self)


def residual_dropout_only(layer):
    """`layer` without the dropout torch.nn adds where ours has none:
    on attention weights, inside the FFN.
    """
    for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
        if attention is not None:
            attention.dropout = 0.0
    layer.dropout = nn.Identity()  # _ff_block: linear2(dropout(activation(linear1(x))))
    return layer


def training_loss(model, batch, label_smoothing):
    """Mean label-smoothed cross-entropy over the batch's real target
    tokens (our `MaskedSparseCrossEntropy`).
    """
    logits = model(batch["source"], batch["target_in"])
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        batch["target_out"].flatten(),
        ignore_index=harness.PAD_ID,
        label_smoothing=label_smoothing,
    )


def clip_each_norm_(parameters, max_norm):
    """Keras's `clipnorm`: each gradient g becomes g · max_norm / max(‖g‖, max_norm), on its own."""
    gradients = [p.grad for p in parameters if p.grad is not None]
    scales = (max_norm / torch.stack(torch._foreach_norm(gradients))).clamp(max=1.0)
    torch._foreach_mul_(gradients, list(scales.unbind()))


def trainer(model, spec, precision="float32", compiled=False):
    """`step(batch, learning_rate) -> loss`: one training step of
    `model` as the job's, in `precision`.
    """
    settings, label_smoothing = spec["optimizer"], spec["loss"]["label_smoothing"]
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.Adam(
        parameters,
        lr=0.0,
        betas=(settings["beta_1"], settings["beta_2"]),
        eps=settings["epsilon"],
        fused=True,
    )
    loss_of = model.compile_training(training_loss) if compiled else training_loss
    steps = itertools.count(1)

    def step(batch, learning_rate):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            loss = loss_of(model, batch, label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_each_norm_(parameters, settings["clipnorm"])
        # Keras adds ε to √v before v's bias correction (Kingma and Ba's ε̂), torch after it.
        epsilon = settings["epsilon"] / math.sqrt(1 - settings["beta_2"] ** next(steps))
        for group in optimizer.param_groups:
            group.update(lr=learning_rate, eps=epsilon)
        optimizer.step()
        return loss.detach()

    return step


def as_tensors(batch):
    return {key: torch.from_numpy(value.astype(np.int64)) for key, value in batch.items()}


def time_torch(
    model_class,
    variant,
    threads=harness.THREADS,
    warmup=5,
    steps=30,
    cache=harness.CACHE,
    warm_pass=False,
):
    """PyTorch's training tokens/s (`harness.measure`) of `variant`,
    e.g. `"torch.compile:bfloat16"`.
    """
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kind, precision = variant.split(":")
    batches, spec = harness.load(model_class.family, cache)
    step = trainer(model_class.of(spec).train(), spec, precision, compiled=kind == "torch.compile")
    tensors = [as_tensors(batch) for batch in batches]
    return harness.measure(
        lambda i: step(tensors[i], spec["rates"][i]), batches, warmup, steps, warm_pass
    )


# ----------------------------------------------------------------------
# The same function: our initial weights in the PyTorch model.


def copy_weights(backbone, model):
    """Copies our `TransformerBackbone`'s weights into `model` (a
    Keras kernel is (in, out), torch's (out, in)).
    """

    def put(parameter, value):
        with torch.no_grad():
            parameter.copy_(torch.from_numpy(np.asarray(value, dtype=np.float32)))

    def dense(linear, layer):
        put(linear.weight, np.asarray(layer.kernel).T)
        put(linear.bias, layer.bias)

    def norm(layer_norm, add_and_norm):
        put(layer_norm.weight, add_and_norm.layer_norm.gamma)
        put(layer_norm.bias, add_and_norm.layer_norm.beta)

    def heads(kernel):  # (d, h, d_k) → (h·d_k, d)
        return np.asarray(kernel).reshape(kernel.shape[0], -1).T

    def attention(torch_attention, ours):
        put(
            torch_attention.in_proj_weight,
            np.concatenate(
                [heads(ours.query_kernel), heads(ours.key_kernel), heads(ours.value_kernel)]
            ),
        )
        put(
            torch_attention.in_proj_bias,
            np.concatenate(
                [
                    np.asarray(bias).reshape(-1)
                    for bias in (ours.query_bias, ours.key_bias, ours.value_bias)
                ]
            ),
        )
        put(
            torch_attention.out_proj.weight,
            np.asarray(ours.output_kernel).reshape(-1, ours.output_kernel.shape[-1]).T,
        )
        put(torch_attention.out_proj.bias, ours.output_bias)

    put(model.embedding.weight, backbone.source_embedding.token_embedding.embeddings)
    for layer, block in zip(model.encoder.layers, backbone.encoder_blocks):
        attention(layer.self_attn, block.self_attention)
        norm(layer.norm1, block.self_attention_norm)
        dense(layer.linear1, block.feed_forward.inner)
        dense(layer.linear2, block.feed_forward.outer)
        norm(layer.norm2, block.feed_forward_norm)
    for layer, block in zip(model.decoder.layers, backbone.decoder_blocks):
        attention(layer.self_attn, block.self_attention)
        norm(layer.norm1, block.self_attention_norm)
        attention(layer.multihead_attn, block.cross_attention)
        norm(layer.norm2, block.cross_attention_norm)
        dense(layer.linear1, block.feed_forward.inner)
        dense(layer.linear2, block.feed_forward.outer)
        norm(layer.norm3, block.feed_forward_norm)


def check(model_class, steps=4, cache=harness.CACHE, log=print):
    """Each of the first `steps` steps' loss (before its update) in
    ours and in PyTorch, float32, dropout off.

    Logs first how far apart the first batch's gradients are (`_compare_first_gradients`). Both
    start from our task's initial weights and train on the same batches at the same learning rates
    (the schedule's first is 0: the first update moves only Adam's moments).

    Returns:
        `([(ours, torch)] one pair a step, how far the weights are
        apart after the steps relative to how far they moved)`.
    """
    batches, spec = harness.load(model_class.family, cache)
    train = harness.job_steps(
        harness.job_config(model_class.family, cache, dropout=0.0), spec, batches
    )
    model, initial, trained = (model_class.of(spec, dropout=0.0) for _ in range(3))
    for each in (model, initial):
        each.load_keras_weights(train.model.backbone)
    _compare_first_gradients(
        train.model, model_class.of(spec, dropout=0.0), model, batches[0], spec, log
    )
    step = trainer(model.train(), spec)
    iterator = iter(harness.held(batches))
    losses = []
    for i, batch in enumerate(batches[:steps]):
        inputs, targets = harness.as_keras_batch(batch)
        ours = float(
            train.model.compute_loss(x=inputs, y=targets, y_pred=train.model(inputs, training=True))
        )
        train.train(iterator)
        theirs = float(step(as_tensors(batch), spec["rates"][i]))
        losses.append((ours, theirs))
        log(
            f"step {i + 1} (learning rate {spec['rates'][i]:.2g}): ours {ours:.6f}, PyTorch "
            f"{theirs:.6f}, difference {ours - theirs:+.2e}"
        )
    trained.load_keras_weights(train.model.backbone)  # ours after the steps
    with torch.no_grad():
        apart, moved = (
            _squared_distances(model.named_parameters(), trained),
            _squared_distances(trained.named_parameters(), initial),
        )
    difference = _log_apart(
        f"weights after {steps} steps", apart, moved, "of how far they moved", log
    )
    return losses, difference


def _squared_distances(named, others):
    return {name: float(((p - q) ** 2).sum()) for (name, p), q in zip(named, others.parameters())}


def _log_apart(what, apart, scale, of, log, norms=False):
    """Logs √(Σ apart / Σ scale) over all weights and the three weights with the largest √(apart /
    scale) (`norms`: with each one's √scale)."""
    difference = math.sqrt(sum(apart.values()) / sum(scale.values()))
    worst = sorted((math.sqrt(apart[name] / scale[name]), name) for name in scale if scale[name])[
        ::-1
    ][:3]
    log(
        f"{what}: apart by {_share(difference)} {of}; most: "
        + ", ".join(
            f"{name} {_share(share)}" + (f" (norm {math.sqrt(scale[name]):.1e})" if norms else "")
            for share, name in worst
        )
    )
    return difference


def _share(fraction):
    return f"{fraction:.2%}" if fraction >= 1e-4 else f"{fraction:.1e}"


def _compare_first_gradients(task, ours, model, batch, spec, log):
    """Logs how far the first batch's gradients are apart, ‖g_torch −
    g_ours‖ / ‖g_ours‖ (float32, dropout off).

    Ours are copied into `ours`, a PyTorch model of the same class, as the weights are
    (`load_keras_weights`), an embedding's slices summed; `model` computes PyTorch's own.
    """
    import tensorflow as tf

    inputs, targets = harness.as_keras_batch(batch)
    with tf.GradientTape() as tape:
        loss = task.compute_loss(x=inputs, y=targets, y_pred=task(inputs, training=True))
    weights = task.trainable_variables
    kept = [weight.numpy() for weight in weights]
    for weight, gradient in zip(weights, tape.gradient(loss, weights)):
        weight.assign(tf.zeros_like(weight) if gradient is None else tf.convert_to_tensor(gradient))
    ours.load_keras_weights(task.backbone)
    for weight, value in zip(weights, kept):
        weight.assign(value)
    model.zero_grad()
    training_loss(model, as_tensors(batch), spec["loss"]["label_smoothing"]).backward()
    mine = dict(ours.named_parameters())
    with torch.no_grad():
        apart = {
            name: float(((p.grad - mine[name]) ** 2).sum())
            for name, p in model.named_parameters()
            if p.grad is not None
        }
        size = {name: float((mine[name] ** 2).sum()) for name in apart}
    model.zero_grad()
    _log_apart("the first batch's gradients", apart, size, "of their size", log, norms=True)


def profile(
    model_class,
    precision,
    compiled,
    steps=3,
    warmup=5,
    threads=harness.THREADS,
    cache=harness.CACHE,
    top=15,
):
    """torch.profiler's top ops by self CPU time over `steps` training steps after `warmup`."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    torch.set_num_threads(threads)
    batches, spec = harness.load(model_class.family, cache)
    step = trainer(model_class.of(spec).train(), spec, precision, compiled)
    tensors = [as_tensors(batch) for batch in batches]
    for i in range(warmup):
        step(tensors[i], spec["rates"][i])
    with profiler(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(warmup, warmup + steps):
            step(tensors[i], spec["rates"][i])
    print(
        f"torch.profiler, {steps} steps ({precision}{', torch.compile' if compiled else ''}, "
        f"{threads} threads):"
    )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def main(model_class=Transformer, description=__doc__):
    """The command line of an anchor: `--check`, `--time`,
    `--profile`, or one timing process (`--run`).
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=(
            "compare the first batch's gradients, the first steps' losses and the weights after "
            "them with ours"
        ),
    )
    parser.add_argument(
        "--time", action="store_true", help="time ours and PyTorch, alternating processes"
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--profile", action="store_true", help="torch.profiler's top ops of a training step"
    )
    parser.add_argument(
        "--precision", choices=["float32", "bfloat16"], default="float32", help="with --profile"
    )
    parser.add_argument("--compile", action="store_true", help="with --profile: torch.compile")
    parser.add_argument(
        "--run",
        choices=[v for v in VARIANTS if not v.startswith(harness.OURS)],
        help="one timing process (what --time starts)",
    )
    harness.add_timing_flags(parser)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    family, module = model_class.family, model_class.__module__
    if module == "__main__":  # run as `python -m benchmarks.anchors.NAME`
        module = sys.modules["__main__"].__spec__.name
    if args.check:
        check(model_class, cache=args.cache)
    if args.run:
        print(
            json.dumps(
                time_torch(
                    model_class,
                    args.run,
                    args.threads,
                    args.warmup,
                    args.steps,
                    args.cache,
                    args.warm_pass,
                )
            )
        )
    if args.profile:
        profile(
            model_class,
            args.precision,
            args.compile,
            warmup=args.warmup,
            threads=args.threads,
            cache=args.cache,
        )
    if args.time:
        harness.load(family, args.cache)  # written once, before any timing
        commands = {
            variant: harness.ours_command(family, variant.split(":")[1], args)
            if variant.startswith(harness.OURS)
            else [sys.executable, "-m", module, "--run", variant, *harness.process_flags(args)]
            for variant in args.variants
        }
        results = harness.alternate_processes(commands, args.rounds)
        print(harness.table(results))
        print(
            f"\n{harness.describe_machine(args.threads)}\n    python -m {module} "
            f"{' '.join(sys.argv[1:])}"
        )


if __name__ == "__main__":
    main()
