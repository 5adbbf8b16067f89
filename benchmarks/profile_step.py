"""Where a step's time goes: the TensorFlow profiler over a few training or decoding steps.

    python -m benchmarks.profile_step --case seq2seq-train
    python -m benchmarks.profile_step --case seq2seq-train --precision mixed_bfloat16
    python -m benchmarks.profile_step --case transformer-train [--precision mixed_bfloat16]
    python -m benchmarks.profile_step --case transformer-train --anchors   # the anchors' batches
    python -m benchmarks.profile_step --case transformer-beam4
    python -m benchmarks.profile_step --case seq2seq-beam4
    python -m benchmarks.profile_step --case transformer-greedy1 --searches 20 [--compiled]
    python -m benchmarks.profile_step --case seq2seq-train --top 40 --by op   # raw ops
    python -m benchmarks.profile_step --case encoder-block --precision mixed_bfloat16 [--anchor]

Benchmark-only requirement: the `xprof` package (`pip install xprof`; not a
dependency of keras-attn). It turns the profiler's `*.xplane.pb` into
per-op self-times (its `framework_op_stats` tool); where it is missing or
fails, the script reads the XSpace itself with the protobufs TensorFlow ships
(`tensorflow.tsl.profiler.protobuf.xplane_pb2`). The XSpace is read in any
case for what op statistics leave out: the executor's own time between ops
and the time in which no TensorFlow op runs at all (Python, `fit`'s loop,
waiting).

Cases, on Multi30k de-en from ../shared/data/multi30k/raw (8000-token
WordPiece vocabularies learned from the training text, about 20 s;
`--synthetic` uses random ids of the same lengths instead):

- `transformer-train`: `TransformerBackbone(..., preset="small")`, batch 64, `model.fit` steps with
  the job's optimizer (`transformer_adam`) and the label-smoothed loss, over the first `--steps`
  batches of the pipeline held in memory (tf.data runs far ahead of training), warmed up on those
  same batches so no step retraces.
- `seq2seq-train`: `Seq2SeqBackbone(..., preset="small", attention="bahdanau")`,
  batch 128, the same loss and optimizer.
- `transformer-greedy1`: greedy search of one source (the first test
  sentence), the latency case, otherwise as the beam cases.
- `transformer-beam4`, `seq2seq-beam4`: `keras_attn.decoding.beam_search`, width 4, over
  32 test2016 sources through `decoding.Stepper`, a `tf.function` with the export's
  `(None, None)` signature and the export's step budget (`max_decode_length`, 1.5 S +
  10). The weights are random, so `eos_id=-1` (never emitted) makes every search run its
  whole budget; times are per decode step (one token for all 128 hypotheses).

- `encoder-block`, `decoder-block`: one layer's forward + backward step as
  `benchmarks/layers.py` times it (batch 32, length 64, width 256, 8 heads,
  FFN 1024, dropout 0; the decoder block with cross-attention), ours or,
  with `--anchor`, keras-hub's `TransformerEncoder` / `TransformerDecoder`.
  No corpus is read.

Each case warms up (traces), then profiles `--steps` steps (training) or
`--searches` whole searches (decoding), and prints the wall time per step
and two tables: op categories and the top ops, in ms per step (summed over
TensorFlow's threads, so they can add up to more than the wall time when
ops overlap) and in % of the wall time of a step.
"""

import argparse
import collections
import functools
import glob
import json
import os
import re
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn import decoding  # noqa: E402
from keras_attn.losses import MaskedSparseCrossEntropy
from keras_attn.models import Seq2SeqBackbone, TransformerBackbone  # noqa: E402
from keras_attn.optimizers import transformer_adam
from keras_attn.schedules import TransformerSchedule  # noqa: E402
from pipelines import synthetic, text, tokenizers, translation  # noqa: E402
from pipelines.special_tokens import SPECIAL_TOKENS  # noqa: E402

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "raw"
CASES = (
    "transformer-train",
    "seq2seq-train",
    "transformer-beam4",
    "seq2seq-beam4",
    "transformer-greedy1",
    "encoder-block",
    "decoder-block",
)
BLOCK_CASES = {"encoder-block": "encoder block", "decoder-block": "decoder block + cross"}
BATCH = {"transformer": 64, "seq2seq": 128}
MAX_LENGTH, VOCAB, BEAM_WIDTH, DECODE_BATCH = 64, 8000, 4, 32

# ----------------------------------------------------------------------
# Data and models.


def corpus():
    if (MULTI30K / "train.de.gz").exists():
        train = text.read_parallel(MULTI30K / "train.de.gz", MULTI30K / "train.en.gz")
        test = text.read_parallel(
            MULTI30K / "test_2016_flickr.de.gz", MULTI30K / "test_2016_flickr.en.gz"
        )
        return "Multi30k de-en", train, test
    built_in = synthetic.translation_corpus()
    return "built-in corpus", built_in["train"], built_in["test"]


class SyntheticTokenizer(tokenizers.SubwordTokenizer):
    """Random ids with the lengths of whitespace tokens × 1.15 (about WordPiece's)."""

    def __init__(self, seed):
        super().__init__()
        self.seed = seed
        self.lowercase = False
        self._vocabulary = list(SPECIAL_TOKENS) + [
            f"piece{i}" for i in range(len(SPECIAL_TOKENS), VOCAB)
        ]
        self._tokens = tf.constant(self._vocabulary)

    def tokenize(self, strings):
        words = tf.strings.split(strings)
        lengths = tf.cast(tf.math.ceil(tf.cast(words.row_lengths(), tf.float32) * 1.15), tf.int64)
        ids = tf.random.stateless_uniform(
            [tf.reduce_sum(lengths)],
            [self.seed, 0],
            minval=len(SPECIAL_TOKENS),
            maxval=VOCAB,
            dtype=tf.int32,
        )
        return tf.RaggedTensor.from_row_lengths(ids, lengths)


def make_tokenizers(train, synthetic_ids):
    if synthetic_ids:
        return SyntheticTokenizer(1), SyntheticTokenizer(2)
    return (
        tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(train.sources, VOCAB)),
        tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(train.targets, VOCAB)),
    )


def build_model(kind, vocab_sizes, dropout):
    if kind == "seq2seq":
        return Seq2SeqBackbone(*vocab_sizes, preset="small", attention="bahdanau", dropout=dropout)
    return TransformerBackbone(
        *vocab_sizes, max_sequence_length=MAX_LENGTH, preset="small", dropout=dropout
    )


# ----------------------------------------------------------------------
# The profiled work.


def training_case(kind, train, source_tokenizer, target_tokenizer, steps, optimizer):
    data = translation.translation_dataset(
        train.sources,
        train.targets,
        source_tokenizer,
        target_tokenizer,
        batch_size=BATCH[kind],
        max_length=MAX_LENGTH,
        repeat=True,
    )
    vocab_sizes = (source_tokenizer.vocabulary_size, target_tokenizer.vocabulary_size)
    model = build_model(kind, vocab_sizes, dropout=0.1)
    model.compile(
        optimizer=transformer_adam(TransformerSchedule(256, 4000), fused=optimizer == "fused"),
        loss=MaskedSparseCrossEntropy(0.1),
    )
    # The profiled batches, held in memory: a `fit` call over the pipeline itself
    # would start a fresh iterator and refill its whole-dataset shuffle buffer
    # every time, which training does once per run, not per step. Warming up
    # on the very batches that are then timed traces every shape beforehand.
    batches = list(data.take(steps))
    held = functools.reduce(
        lambda a, b: a.concatenate(b), [tf.data.Dataset.from_tensors(b) for b in batches]
    ).prefetch(2)
    model.fit(held, epochs=1, verbose=0)

    def run():
        model.fit(held, epochs=1, verbose=0)

    lengths = [(inputs["source"].shape[1], inputs["target_in"].shape[1]) for inputs, _ in batches]
    source_len, target_len = np.mean(lengths, axis=0)
    shape = f"batch {BATCH[kind]}, padded lengths S {source_len:.1f} / T {target_len:.1f} (mean)"
    return run, steps, "training step", shape


def anchors_training_case(kind, steps, precision):
    """The job's own training step (`benchmarks/anchors`' harness) on the anchors'
    cached batches: the batches `python -m benchmarks.anchors.torch_transformer
    --profile` (or `torch_seq2seq`) profiles PyTorch on."""
    from benchmarks.anchors import harness

    batches, spec = harness.load(kind)
    batches = batches[:steps]
    train = harness.job_steps(
        harness.job_config(kind, mixed_precision=precision == "mixed_bfloat16"), spec, batches
    )

    def run():
        iterator = iter(harness.held(batches))
        for _ in batches:
            loss = train.train(iterator)["loss"]
        float(loss)

    run()  # every batch shape traced and compiled (the loss's XLA cluster) before the timing
    lengths = np.mean([(b["source"].shape[1], b["target_in"].shape[1]) for b in batches], axis=0)
    shape = (
        f"the anchors' batches ({kind}: {len(batches[0]['source'])} a batch), padded lengths S "
        f"{lengths[0]:.1f} / T {lengths[1]:.1f} (mean)"
    )
    return run, steps, "training step", shape


def block_case(case_name, anchor, steps):
    """`benchmarks/layers.py`'s step of one block (ours, or keras-hub's with `anchor`)."""
    from benchmarks import layers as layer_benchmark

    case = {case.name: case for case in layer_benchmark.CASES}[BLOCK_CASES[case_name]]
    x, memory = layer_benchmark.random_inputs()
    layer = case.anchor() if anchor else case.ours()
    step = layer_benchmark.training_step(layer, case.call, x, memory, jit_compile=False)
    for _ in range(3):
        step(x, memory)[0].numpy()

    def run():
        for _ in range(steps):
            loss = step(x, memory)[0]
        loss.numpy()

    who = "keras-hub's" if anchor else "ours"
    batch, length, width = x.shape
    return run, steps, "training step", f"{who}, batch {batch}, length {length}, width {width}"


def beam_case(
    kind,
    train,
    test,
    source_tokenizer,
    target_tokenizer,
    searches,
    warmup,
    width=BEAM_WIDTH,
    compiled=False,
):
    vocab_sizes = (source_tokenizer.vocabulary_size, target_tokenizer.vocabulary_size)
    model = build_model(kind, vocab_sizes, dropout=0.0)
    stepper = decoding.Stepper(model)
    sources = DECODE_BATCH if width > 1 else 1  # greedy: one sentence, the latency case
    ids = source_tokenizer.tokenize(tf.constant(test.sources[:sources]))
    ids = ids[:, :MAX_LENGTH].to_tensor(default_value=0)
    source = tf.cast(ids, tf.int32)

    compiled_search = decoding.CompiledSearch(stepper, MAX_LENGTH, eos_id=-1) if compiled else None

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def search(source):
        if compiled_search:  # as the export's translate_compiled: one XLA program
            return compiled_search(source, width)
        return decoding.search(
            stepper,
            source,
            decoding.max_decode_length(source, cap=MAX_LENGTH),
            width,
            eos_id=-1,
        )

    for _ in range(warmup):
        search(source)["tokens"].numpy()
    decode_steps = int(search(source)["tokens"].shape[1])

    def run():
        for _ in range(searches):
            search(source)["tokens"].numpy()

    shape = (
        f"{sources} test2016 source(s) (S = {source.shape[1]} padded), beam {width} "
        f"= {sources * width} rows, {decode_steps} decode steps a search, "
        f"{searches} searches profiled{', compiled by XLA' if compiled else ''}"
    )
    return run, searches * decode_steps, "decode step", shape


# ----------------------------------------------------------------------
# Reading the profile.
#
# The profiler's host plane has one line per thread. TensorFlow's executor
# runs a function's ops on its inter-op threads (`tf_Compute`), each op
# inside an `ExecutorState::Process` event and recorded as `name:Type`; the
# op's own parallel work goes to the intra-op (Eigen) threads and counts in
# the op's time. tf.data runs on its own threads, overlapped with the step.


def xprof_op_stats(xplane_path):
    """`[(type, name, occurrences, self µs)]` of host ops, from xprof's framework_op_stats."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane_path], "framework_op_stats", {})
    tables = json.loads(data)
    table = tables[0] if isinstance(tables, list) else tables
    columns = [column["id"] for column in table["cols"]]
    rows = []
    for row in table["rows"]:
        values = dict(zip(columns, (cell.get("v") for cell in row["c"])))
        occurrences, self_us = int(values["occurrences"]), values["total_self_time"]
        rows.append((values["type"], values["operation"], occurrences, self_us))
    return rows


def read_xspace(xplane_path):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as file:
        space.ParseFromString(file.read())
    return next(plane for plane in space.planes if plane.name == "/host:CPU")


def _events(plane, lines=""):
    """`(name, start ns, end ns)` of the events on the threads whose name starts with `lines`."""
    for line in plane.lines:
        if not line.name.startswith(lines):
            continue
        for event in line.events:
            start = line.timestamp_ns + event.offset_ps // 1000
            end = start + event.duration_ps // 1000
            yield plane.event_metadata[event.metadata_id].name, start, end


def _is_op(name):
    wrappers = ("ExecutorState", "ThreadpoolListener", "Eager", "TFE_")
    return ":" in name and not name.startswith(wrappers)


def own_op_stats(plane):
    """The fallback of `xprof_op_stats`: op times read from the XSpace (graph ops do not nest)."""
    totals = collections.defaultdict(lambda: [0, 0.0])
    for lines in ("tf_Compute", "tf_data"):
        for name, start, end in _events(plane, lines):
            if _is_op(name):
                op_name, _, op_type = name.rpartition(":")
                op_type = "Dataset" if lines == "tf_data" and "Iterator" in op_name else op_type
                totals[(op_type, op_name)][0] += 1
                totals[(op_type, op_name)][1] += (end - start) / 1e3
    return [(t, n, count, us) for (t, n), (count, us) in totals.items()]


def _union_us(intervals):
    total, current_start, current_end = 0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total / 1e3


def executor_time(plane):
    """µs on the compute threads: in `ExecutorState::Process` (summed, and as a union over
    threads), and inside ops (summed over threads, nested events counted once)."""
    process, in_ops = [], 0.0
    for line in plane.lines:
        if line.name.startswith("tf_Compute"):
            events = [(name, start, end) for name, start, end in _events(plane, line.name)]
            process += [(s, e) for name, s, e in events if name == "ExecutorState::Process"]
            in_ops += _union_us([(start, end) for name, start, end in events if _is_op(name)])
    return sum(end - start for start, end in process) / 1e3, _union_us(process), in_ops


# ----------------------------------------------------------------------
# Categories (what kind of op) and regions (where in the model).

CONTROL_TYPES = {
    "Enter",
    "Exit",
    "Merge",
    "Switch",
    "NextIteration",
    "LoopCond",
    "Identity",
    "IdentityN",
    "StopGradient",
    "NoOp",
    "ControlTrigger",
    "_SwitchN",
}
REDUCTIONS = {"Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ArgMax", "ArgMin", "Cumsum"}
SHAPE_TYPES = {
    "Reshape",
    "Transpose",
    "_MklTranspose",
    "ConcatV2",
    "Concat",
    "Split",
    "SplitV",
    "Pack",
    "Unpack",
    "Slice",
    "StridedSlice",
    "StridedSliceGrad",
    "Shape",
    "ShapeN",
    "Size",
    "Rank",
    "ExpandDims",
    "Squeeze",
    "Tile",
    "BroadcastTo",
    "BroadcastArgs",
    "BroadcastGradientArgs",
    "Range",
    "Const",
    "Pad",
    "PadV2",
    "ZerosLike",
    "OnesLike",
    "Fill",
    "Where",
    "TensorScatterUpdate",
    "DynamicStitch",
    "InvertPermutation",
    "_MklReshape",
}
IO_TYPES = {
    "ReadVariableOp",
    "VarHandleOp",
    "_Recv",
    "_Send",
    "_Arg",
    "_Retval",
    "_HostRecv",
    "_HostSend",
    "IteratorGetNext",
    "OptionalGetValue",
    "OptionalHasValue",
    "IteratorGetNextAsOptional",
    "IteratorGetNextSync",
}
OPTIMIZER = re.compile(r"(^|/)(adam|optimizer|sgd)(/|_\d|$)")


def is_optimizer(op_type, op_name):
    return (
        bool(OPTIMIZER.search(op_name.lower()))
        or op_type.startswith(("ResourceApply", "ResourceScatter"))
        or op_type in ("AssignAddVariableOp", "AssignSubVariableOp", "AssignVariableOp")
    )


def category(op_type, op_name):
    """The kind of work an op does."""
    if op_type == "Dataset":
        return "tf.data (own threads)"
    if is_optimizer(op_type, op_name):
        return "optimizer update (Adam)"
    if op_type in ("UnsortedSegmentSum", "ScatterNd", "SparseSegmentSum", "TensorScatterAdd"):
        if "loss" in op_name or "cross_entropy" in op_name:
            return "scatter-add: loss gather gradient densified"
        return "scatter-add: embedding gradients densified"
    if op_type.startswith(("TensorList", "TensorArray", "Stack")):
        return "while-loop TensorList/TensorArray"
    if op_type in CONTROL_TYPES:
        return "while-loop control (Enter/Merge/Switch/…)"
    if re.search(r"(MatMul|Einsum)", op_type):
        return "MatMul / BatchMatMul / Einsum"
    if re.search(r"Softmax", op_type):
        return "softmax / log-softmax kernels"
    if "Gather" in op_type:
        return "gathers"
    if op_type.startswith("TopK"):
        return "top-k"
    if op_type in IO_TYPES:
        return "variable reads / iterator"
    if op_type in REDUCTIONS:
        return "reductions (Sum/Mean/Max…)"
    if op_type in SHAPE_TYPES:
        return "shape / copy (concat, transpose, broadcast, slice)"
    if op_type == "AddN":
        return "AddN (gradient accumulation)"
    return "elementwise (add, mul, tanh, sigmoid, exp, cast, random…)"


def region(op_type, op_name):
    """Where in the model an op sits, from its name scope (best effort)."""
    if op_type == "Dataset":
        return "tf.data"
    if is_optimizer(op_type, op_name):
        return "optimizer"
    lower = op_name.lower()
    backward = " bwd" if "gradient_tape" in lower else ""
    if "compile_loss" in lower or "cross_entropy" in lower:
        return "loss" + backward
    in_loop = "/while" in lower or lower.startswith("while")
    if lower.startswith("while/"):  # the search's own loop (decoding cases)
        last = lower.rsplit("while/", 1)[-1]  # the name inside the loop body
        if re.search(r"(MatMul|Einsum)", op_type) and (
            "/" not in last or "target_embedding" in last
        ):
            return "search: vocabulary projection"
        if "/" in last:
            return "search: decoder step (layers)"
        return "search: beam bookkeeping (log-softmax, top-k, reorder)"
    if "encoder" in lower:
        return ("encoder LSTM loop" if in_loop else "encoder") + backward
    if re.search(r"decoder(_\d+)?/(tensordot|add\b|add/|transpose_2)", lower) or re.search(
        r"(output_projection|target_embedding[^/]*/(tensordot|transpose))", lower
    ):
        return "output projection (vocabulary)" + backward
    if "decoder" in lower:
        return ("decoder time loop" if in_loop else "decoder") + backward
    return "other" + backward


# ----------------------------------------------------------------------


def profile(run, logdir):
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    return wall, max(paths, key=os.path.getmtime)


def table(title, unit, totals, steps, total_us, top=None, min_ms=0.05):
    print(f"\n| {title} | ms / {unit} | % |")
    print("|---|---:|---:|")
    for label, us in sorted(totals.items(), key=lambda item: -item[1])[:top]:
        if us / 1e3 / steps >= min_ms:
            print(f"| {label} | {us / 1e3 / steps:.1f} | {100 * us / total_us:.1f} |")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=CASES, required=True)
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    parser.add_argument("--steps", type=int, default=10, help="training steps profiled")
    parser.add_argument(
        "--anchor",
        action="store_true",
        help="block cases: profile keras-hub's block instead of ours",
    )
    parser.add_argument(
        "--optimizer",
        choices=["fused", "keras"],
        default="fused",
        help="training: the job's FusedAdam or keras.optimizers.Adam",
    )
    parser.add_argument("--searches", type=int, default=2, help="beam searches profiled")
    parser.add_argument("--warmup", type=int, default=2, help="searches run first (beam cases)")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="the search compiled by XLA (decoding.CompiledSearch), as translate_compiled runs it",
    )
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--by",
        choices=["region", "op", "type"],
        default="region",
        help="top table: op type × model region, every op by name, or op type",
    )
    parser.add_argument("--synthetic", action="store_true", help="random ids, Multi30k's lengths")
    parser.add_argument(
        "--anchors",
        action="store_true",
        help="training cases: the job's step on benchmarks/anchors' cached batches (PyTorch's)",
    )
    parser.add_argument("--no-xprof", action="store_true", help="read the XSpace without xprof")
    parser.add_argument("--logdir", default=None, help="keep the trace here (TensorBoard/xprof)")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(args.precision)
    kind, _, what = args.case.partition("-")
    started = time.perf_counter()
    if args.case in BLOCK_CASES:
        run, steps, unit, shape = block_case(args.case, args.anchor, args.steps)
        data_name = "random inputs"
    elif args.anchors and what == "train":
        run, steps, unit, shape = anchors_training_case(kind, args.steps, args.precision)
        data_name = "Multi30k en-de tok/, shared BPE 10,000"
    else:
        name, train, test = corpus()
        source_tokenizer, target_tokenizer = make_tokenizers(train, args.synthetic)
        data_name = f"{name}{' (synthetic ids)' if args.synthetic else ''}"
        if what == "train":
            run, steps, unit, shape = training_case(
                kind, train, source_tokenizer, target_tokenizer, args.steps, args.optimizer
            )
        else:
            run, steps, unit, shape = beam_case(
                kind,
                train,
                test,
                source_tokenizer,
                target_tokenizer,
                args.searches,
                args.warmup,
                width=1 if what.startswith("greedy") else BEAM_WIDTH,
                compiled=args.compiled,
            )
    setup = time.perf_counter() - started

    start = time.perf_counter()
    run()  # the same work unprofiled: the profiler's own cost
    plain = (time.perf_counter() - start) / steps
    logdir = args.logdir or tempfile.mkdtemp(prefix="profile_step_")
    wall, xplane = profile(run, logdir)

    plane = read_xspace(xplane)
    source = "xprof framework_op_stats"
    if args.no_xprof:
        rows, source = own_op_stats(plane), "XSpace read directly"
    else:
        try:
            rows = xprof_op_stats(xplane)
        except Exception as error:  # noqa: BLE001  (whatever went wrong: read it ourselves)
            print(
                f"xprof could not read the trace ({type(error).__name__}: {error}); "
                "reading it directly"
            )
            rows, source = own_op_stats(plane), "XSpace read directly"
    data_rows = [row for row in rows if row[0] == "Dataset"]
    rows = [row for row in rows if row[0] not in ("Dataset", "IDLE")]
    op_us = sum(us for *_, us in rows)
    process_us, busy_us, in_ops_us = executor_time(plane)
    # 100% = the compute threads' time in the executor (summed over threads:
    # with 2 busy threads a 1-second step can hold 2 s of it) + the wall time
    # in which no thread runs any op (Python, fit's loop, the search's host
    # side, waiting for data).
    executor_us = max(process_us - in_ops_us, 0.0)
    idle_us = max(wall * 1e6 - busy_us, 0.0)
    total_us = op_us + executor_us + idle_us

    print(f"\n{args.case}, {args.precision}, {data_name}: {shape}")
    print(
        f"wall {wall / steps * 1e3:.1f} ms per {unit} profiled ({plain * 1e3:.1f} ms unprofiled); "
        f"100% = {total_us / 1e3 / steps:.1f} thread-ms per {unit} (ops + executor + idle); "
        f"tf.data alongside {sum(us for *_, us in data_rows) / 1e3 / steps:.1f} ms; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
        f"setup {setup:.0f} s; op times: {source}"
    )
    overheads = {
        "executor overhead (in Process, between ops)": executor_us,
        "idle: no op on any thread (Python, loop, waits)": idle_us,
    }
    categories, regions = collections.Counter(), collections.Counter()
    groups, calls = collections.Counter(), collections.Counter()
    for op_type, op_name, count, us in rows:
        categories[category(op_type, op_name)] += us
        regions[region(op_type, op_name)] += us
        detail = {"region": region(op_type, op_name), "op": op_name, "type": "all"}[args.by]
        key = f"{op_type} | {detail}"
        groups[key] += us
        calls[key] += count
    table("category", unit, dict(categories, **overheads), steps, total_us)
    table("region", unit, dict(regions, **overheads), steps, total_us)
    where = {"region": "region", "op": "op", "type": "where"}[args.by]
    print(f"\n| op type | {where} | calls / {unit} | ms / {unit} | % |")
    print("|---|---|---:|---:|---:|")
    for key, us in groups.most_common(args.top):
        print(
            f"| {key} | {calls[key] / steps:.1f} | {us / 1e3 / steps:.2f} "
            f"| {100 * us / total_us:.1f} |"
        )
    if args.logdir:
        print(f"\ntrace: {xplane}")


if __name__ == "__main__":
    main()
