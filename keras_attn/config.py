"""Every job's settings in one place: the fields, their defaults, choices and help.

A job is told what to do by one of these dataclasses; `keras-attn`
generates each command's flags from them (`--batch-size` from
`batch_size`, with its default, its check and its help), so a setting is
written once, here. A field with `help` is a flag; the others are set in
Python only. Each list of choices is imported from the module that implements it (so importing
this module imports the package, TensorFlow with it). Derived fields (`run_dir` from `name`,
`batch_size` from `batch_tokens`) are resolved then: `dataclasses.replace`
keeps them, so pass them again (or `None`) with a new `name` or budget.

    >>> config = TranslationConfig(preset="small", epochs=2)
    >>> config.run_dir, config.batch_size
    ('runs/transformer', 64)
"""

import dataclasses

from keras_attn.decoding import MAX_BEAM_WIDTH  # noqa: F401  (the CLI's and jobs' bound)
from keras_attn.errors import UserError
from keras_attn.layers.attention import LOCAL_ALIGNMENTS, LUONG_SCORES
from keras_attn.layers.caption_decoder import HARD_ESTIMATORS
from keras_attn.layers.rnn_decoder import ATTENTIONS
from keras_attn.layers.rnn_encoder import CELLS
from keras_attn.models.bert import MAX_TOP_K  # noqa: F401  (the CLI's bound)
from keras_attn.models.captioner import ATTENTIONS as CAPTION_ATTENTIONS
from keras_attn.models.captioner import POOLINGS as CAPTION_POOLINGS
from keras_attn.presets import PRESETS, architecture
from keras_attn.serving.store import MODEL_NAME
from keras_attn.training.precision import PRECISIONS
from keras_attn.training.scheduled_sampling import DECAYS
from keras_attn.training.strategy import STRATEGIES
from pipelines.scenes import SPLIT_SIZES as SCENE_SPLITS

SCHEDULES = ("cosine", "inverse_sqrt")  # the translation jobs' learning-rate schedules
# The translation jobs' subwords: WordPiece (pipelines/tokenizers.py), SentencePiece's two
# (pipelines/sentencepiece_tokenizer.py).
SUBWORDS = ("wordpiece", "bpe", "unigram")
# The weight types a CTranslate2 export can store (`keras-attn export-ct2 --quantization`).
CT2_QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)

# The constraints a flag's value is checked against (the CLI refuses others in one line).
AT_LEAST_0, AT_LEAST_1, AT_LEAST_2, AT_LEAST_8, AT_LEAST_10 = (
    ("at_least", n) for n in (0, 1, 2, 8, 10)
)
FRACTION = "in [0, 1)"
RATE = "in (0, 1)"
POSITIVE = "> 0"
NON_NEGATIVE = ">= 0"
PORT = ("between", 0, 65535)


PAIRS_PER_BATCH = 64  # the translation jobs' batch without --batch-size or --batch-tokens


def setting(default, help=None, group=None, check=None, **flag):
    """A dataclass field; with `help`, a command-line flag.

    Args:
        default: the field's default.
        help: what the flag does (the CLI appends its default).
        group: the heading it is listed under in `--help`.
        check: the constraint its value must meet (`AT_LEAST_1`, `FRACTION`, ...).
        **flag: other `argparse.add_argument` arguments (`choices`,
            `nargs`, `metavar`), or `flag="--name"` for another name than
            the field's.
    """
    return dataclasses.field(
        default=default, metadata=dict(help=help, group=group, check=check, **flag)
    )


def flags(config_class):
    """`(field, metadata)` of each of `config_class`'s flags, in declaration order."""
    return [
        (field, field.metadata)
        for field in dataclasses.fields(config_class)
        if field.metadata.get("help")
    ]


def _refuse_unused(*given, unless, needs):
    """Refuses in one line the flags of `given` (`(flag, whether it
    was set)`) that do nothing `unless` holds.
    """
    unused = [flag for flag, is_set in given if is_set]
    if unused and not unless:
        raise UserError(f"{', '.join(unused)}: only for {needs}")


def check_model_name(name, what):
    """Refuses in one line a model name `serve` would not read
    (`MODEL_NAME`): `what` names where it came from.
    """
    if not MODEL_NAME.fullmatch(name):
        raise UserError(
            f"{what} {name!r}: a model's folder name under the export root: letters, digits, '.', "
            "'_' and '-', starting with a letter or digit (what serve reads)"
        )


def flag_name(field):
    """The command-line name of a `setting` field: `--batch-size` for `batch_size`, unless it names
    another flag; a positional argument's own name."""
    if field.metadata.get("positional"):
        return field.name
    return field.metadata.get("flag", "--" + field.name.replace("_", "-"))


TRAINING, OUTPUT = "training", "output"


@dataclasses.dataclass
class RunConfig:
    """What the runner needs to know, beyond the job itself.

    Attributes:
        run_dir: folder for backups, best weights and logs (default
            `runs/<name>`). Running the same command again resumes from its
            latest backup.
        name: the model's name: its run folder's and its export's.
        epochs: total epochs (including those already done when resuming).
        batch_size: examples per replica; the global batch is this times the
            number of replicas.
        strategy: one of `STRATEGIES`.
        devices: devices for `one_device` / `mirrored`.
        mixed_precision: train under the `mixed_bfloat16` policy (the CLI's
            `--precision`, one of `PRECISIONS`).
        jit_compile: compile the model's forward and backward pass with XLA.
        seed: seeds Python, NumPy and TensorFlow.
        verbose: progress display: 1 a progress bar, 2 one line per epoch,
            0 nothing, `"auto"` a bar on a terminal and lines otherwise (so
            a log file gets no carriage returns or colour codes).
        backup_every: also back up every this many steps within an epoch
            (0: only at the end of each epoch).
        keep_checkpoints: how many backups to keep.
        average_epochs: after each epoch, also validate the mean of the
            last this many epochs' weights (checkpoint averaging), which
            becomes the best weights when its validation loss is lower
            (logged as `val_loss_averaged`); 1: off.
        max_updates: the run's length in optimizer updates instead of
            `epochs` (its last epoch cut short); `None`: whole epochs.
        average_last: the run's model is the mean of the last this many
            of the weights kept every `backup_every` updates (counted over
            the run) and at its last update; 1: off.
    """

    run_dir: str = setting(
        None, "backups, best weights and logs (default: runs/<name>); rerun to resume", OUTPUT
    )
    name: str = setting("run", "model name under the export root and runs/", OUTPUT)
    epochs: int = setting(
        10, "passes over the training data, those of a resumed run included", TRAINING, AT_LEAST_1
    )
    batch_size: int = setting(PAIRS_PER_BATCH, "examples per replica", TRAINING, AT_LEAST_1)
    strategy: str = setting(
        "auto",
        "auto: all local GPUs, else the CPU; multi_worker: the hosts of TF_CONFIG",
        TRAINING,
        choices=STRATEGIES,
    )
    devices: list = setting(
        None, "devices for one_device/mirrored, e.g. /gpu:0 /gpu:1", TRAINING, nargs="+"
    )
    mixed_precision: bool = setting(
        False,
        "auto: mixed_bfloat16 where the hardware runs bfloat16 natively",
        TRAINING,
        flag="--precision",
        choices=PRECISIONS,
        cli_default="auto",
    )
    jit_compile: bool = setting(
        False,
        "compile the train step with XLA (off by default: slower than without on the CPUs "
        "measured, compilations included: docs/benchmarks/training-speed.md)",
        TRAINING,
    )
    seed: int = setting(0, "seeds the data order, the initial weights and dropout", TRAINING)
    verbose: object = "auto"
    backup_every: int = setting(
        500,
        "back up every STEPS steps as well as after each epoch (0: epochs only)",
        OUTPUT,
        AT_LEAST_0,
        metavar="STEPS",
    )
    keep_checkpoints: int = 2
    average_epochs: int = setting(
        1,
        "also validate the mean of the last K epochs' weights after each epoch; the best of it "
        "and the single epochs is kept (checkpoint averaging, Vaswani et al. 2017; 1: off)",
        TRAINING,
        AT_LEAST_1,
        metavar="K",
    )
    max_updates: int = setting(
        None,
        "train N optimizer updates in all instead of --epochs, the last epoch cut short (fairseq's "
        "--max-update)",
        TRAINING,
        AT_LEAST_1,
        metavar="N",
    )
    average_last: int = setting(
        1,
        "the model is the mean of the weights kept every --backup-every updates (counted over "
        "the run) and at the last: the last N of them, validated and exported (fairseq's "
        "average_checkpoints.py --num-update-checkpoints; 1: off)",
        TRAINING,
        AT_LEAST_1,
        metavar="N",
    )
    # Where the job exports its model: versions go to
    # `<export_root>/<name>/<n>`, only when the model changed.
    export_root: str = setting(
        "saved_models",
        "export root (ROOT/<name>/<version>/); a new version only when "
        "the model changed (or --force-export)",
        OUTPUT,
        flag="--export",
        metavar="ROOT",
    )
    export: bool = setting(True, "do not export", OUTPUT, flag="--no-export")
    force_export: bool = setting(
        False, "export a new version even when the newest one holds the same model", OUTPUT
    )

    # The model trains through a TensorFlow loop (an RNN's recurrence), whose
    # gradient needs the loop's saved steps: XLA cannot hand them from a compiled
    # forward pass to the gradient ("TensorList crossing the XLA/TF boundary"),
    # so such a job has no --jit-compile and refuses jit_compile=True.
    recurrent = False

    def __post_init__(self):
        check_model_name(self.name, "--name")
        if self.run_dir is None:
            self.run_dir = f"runs/{self.name}"
        if self.jit_compile and self.recurrent:
            raise UserError(
                f"jit_compile: the {self.family} trains through the loop of its recurrence, whose "
                "gradient XLA cannot take from a compiled forward pass"
            )
        if self.average_last > 1 and not self.backup_every:
            raise UserError(
                "--average-last averages the backups every --backup-every updates: give it above 0"
            )
        for field, metadata in flags(type(self)):
            value = getattr(self, field.name)
            if "choices" not in metadata or field.type is bool or value is None:
                continue
            for one in value if isinstance(value, list) else [value]:
                if one not in metadata["choices"]:
                    shown = ", ".join(map(str, metadata["choices"]))
                    raise UserError(f"{flag_name(field)} must be one of {shown}, got {one!r}")


DATA = "data (default: the built-in generated corpus)"
# Training data in one file larger than this is read as a stream, not into memory.
STREAM_ABOVE_MB = 512
# Pairs (sentences for BERT) a streamed corpus's vocabulary is learned from.
STREAMED_VOCAB_SAMPLE = 1_000_000
# Documents of a streamed BERT corpus's first file held out for validation.
STREAMED_VALID_DOCUMENTS = 1000
MODEL = "model and optimization"


@dataclasses.dataclass
class GenerationConfig(RunConfig):
    """What the jobs that train a `Seq2SeqLM` (translation,
    captioning) share: vocabulary and optimization.
    """

    vocabulary_size: int = setting(
        8000,
        "subword vocabulary size, special tokens included",
        DATA,
        AT_LEAST_10,
        flag="--vocab-size",
        metavar="N",
    )
    lowercase: bool = setting(False, "lowercase before tokenizing", DATA)
    max_sequence_length: int = setting(
        64, "longest sequence in tokens", DATA, AT_LEAST_2, flag="--max-length", metavar="N"
    )
    label_smoothing: float = setting(
        0.1, "probability mass spread over the other tokens of each target", MODEL, FRACTION
    )
    schedule: str = setting(
        "cosine",
        "cosine: linear warm-up, then cosine decay to the end of the run; inverse_sqrt: "
        "linear warm-up, then peak x sqrt(warm-up steps / step), the Transformer paper's shape "
        "(fairseq's inverse_sqrt)",
        MODEL,
        choices=SCHEDULES,
    )
    learning_rate: float = setting(2e-3, "peak learning rate", MODEL, POSITIVE)
    warmup_steps: int = setting(200, "steps of linear learning-rate warm-up", MODEL, AT_LEAST_1)
    beam_width: int = setting(
        4, "beam search width for the test split and samples (1: greedy)", OUTPUT, AT_LEAST_1
    )
    samples: int = 5


@dataclasses.dataclass
class TranslationConfig(GenerationConfig):
    """Everything `keras-attn train transformer` can be told; its flags are these fields.

    Each config says which model it trains (`family`, a family of `Seq2SeqLM.BACKBONES`, built with
    `Seq2SeqLM.from_preset(preset, ..., **backbone_arguments(dropout))`), its callbacks and which of
    its fields bind a run folder (`bound_settings`); `Seq2SeqConfig` overrides them.
    """

    family = "transformer"

    name: str = setting("transformer", "model name under the export root and runs/", OUTPUT)
    epochs: int = setting(
        8, "passes over the training data, those of a resumed run included", TRAINING, AT_LEAST_1
    )
    batch_size: int = setting(
        None,
        f"examples per replica (default: {PAIRS_PER_BATCH}; with --batch-tokens: the most a "
        "batch may hold, by default as many as fit)",
        TRAINING,
        AT_LEAST_1,
    )
    src: str = setting(
        None,
        "training source text, one sentence a line (.gz allowed): a file, or shards as a glob "
        f"or a folder (read as a stream, as is a file over {STREAM_ABOVE_MB} MB)",
        DATA,
    )
    tgt: str = setting(
        None,
        "training target text, line-aligned with --src (shards: the i-th with --src's i-th)",
        DATA,
    )
    data: str = setting(
        None, "training pairs as TSV, source<TAB>target: a file, or shards as --src", DATA
    )
    vocab_sample: int = setting(
        None,
        "learn the vocabulary from N pairs, the first N/shards of each shard "
        f"(default: all of a corpus read into memory, {STREAMED_VOCAB_SAMPLE} of a streamed one)",
        DATA,
        AT_LEAST_1,
        metavar="N",
    )
    prepared: str = setting(
        None,
        "a streamed corpus tokenized once into this folder (resumed if killed) and read from "
        "it every epoch: the same batches without tokenizing; a later run with the same data and "
        "vocabulary reuses it",
        DATA,
        metavar="DIR",
    )
    builtin_size: int = setting(20000, "training pairs of the built-in corpus", DATA, AT_LEAST_10)
    builtin_eval_size: int = setting(
        500,
        "pairs in each of the built-in corpus's validation and test splits",
        DATA,
        AT_LEAST_1,
        metavar="N",
    )
    valid_src: str = setting(None, "validation source (default: 2% of training)", DATA)
    valid_tgt: str = setting(None, "validation target", DATA)
    test_src: str = setting(
        None, "test source, scored at the end (default: the validation pairs)", DATA
    )
    test_tgt: str = setting(None, "test target", DATA)
    shared_vocab: bool = setting(
        False,
        "one vocabulary, learned over both languages, and one embedding for the "
        "encoder's input, the decoder's input and its output",
        DATA,
    )
    subword: str = setting(
        "wordpiece",
        "wordpiece: BERT's pieces of words split at spaces and punctuation; bpe, "
        "unigram: SentencePiece's over the text as written, spaces included (detokenized exactly)",
        DATA,
        choices=SUBWORDS,
    )
    separate_embeddings: bool = setting(
        False,
        "with --shared-vocab: the encoder keeps a table of its own (the decoder's input and "
        "output stay one)",
        MODEL,
    )
    preset: str = setting(
        "tiny",
        "model size: tiny (2+2 layers, width 128), small (3+3, 256), base (6+6, 512: the paper's)",
        MODEL,
        choices=tuple(PRESETS["transformer"]),
    )
    batch_tokens: int = setting(
        None,
        "batches of up to N ids per replica (pairs x padded length) instead of --batch-size "
        "pairs: short pairs share a batch with more of their kind",
        TRAINING,
        AT_LEAST_1,
        metavar="N",
    )
    dropout: float = setting(
        None, "dropout rate (default: 0.1, or 0 on the noise-free built-in corpus)", MODEL, FRACTION
    )
    num_layers: int = setting(
        None,
        "layers of the encoder and of the decoder (default: the preset's)",
        MODEL,
        AT_LEAST_1,
        metavar="N",
    )
    hidden_dim: int = setting(
        None,
        "model width: embeddings and hidden states (default: the preset's)",
        MODEL,
        AT_LEAST_1,
        metavar="N",
    )
    num_heads: int = setting(
        None, "attention heads (default: the preset's)", MODEL, AT_LEAST_1, metavar="N"
    )
    intermediate_dim: int = setting(
        None,
        "width of the feed-forward blocks (default: the preset's)",
        MODEL,
        AT_LEAST_1,
        metavar="N",
    )
    compiled_search: bool = setting(
        True,
        "export a Transformer without translate_compiled, the search compiled by XLA that "
        "keras-attn serve runs one text through",
        OUTPUT,
        flag="--no-compiled-search",
    )

    # the fields that override the preset
    ARCHITECTURE = (
        "num_layers",
        "hidden_dim",
        "num_heads",
        "intermediate_dim",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.family == "transformer" and (self.num_heads or self.hidden_dim):
            chosen = architecture(
                "transformer", self.preset, {}, num_heads=self.num_heads, hidden_dim=self.hidden_dim
            )
            if chosen["hidden_dim"] % chosen["num_heads"]:
                raise UserError(
                    f"--num-heads {chosen['num_heads']} does not divide --hidden-dim "
                    f"{chosen['hidden_dim']} (with the preset's values for what is not given)"
                )
        if self.batch_size is None and self.batch_tokens is None:
            self.batch_size = PAIRS_PER_BATCH
        # with --batch-tokens alone: as many pairs as the budget can hold
        elif self.batch_size is None:
            from pipelines.translation import most_pairs

            self.batch_size = most_pairs(self.batch_tokens)

    def backbone_arguments(self, dropout):
        """The backbone's arguments beside its preset and the preprocessor's sizes."""
        share = self.shared_vocab and not self.separate_embeddings
        return dict(dropout=dropout, share_embeddings=share, **self.architecture())

    def architecture(self):
        """The architecture fields given, which win over the preset's."""
        return {
            name: getattr(self, name)
            for name in self.ARCHITECTURE
            if getattr(self, name) is not None
        }

    def callbacks(self):
        """Keras callbacks the runner adds to the job's."""
        return []

    def bound_settings(self):
        """Fields a run folder keeps: a rerun with other values would train the saved model on
        other data, or restore weights of another shape, and is refused."""
        return (
            "vocabulary_size",
            "shared_vocab",
            "separate_embeddings",
            "subword",
            "lowercase",
            "preset",
            *self.ARCHITECTURE,
            "max_sequence_length",
            "batch_tokens",
        )


SEQ2SEQ = "the recurrent network and its attention"


@dataclasses.dataclass
class Seq2SeqConfig(TranslationConfig):
    """`keras-attn train seq2seq`: the translation job's settings, with the RNN model's.

    Attributes:
        decay_parameters: the scheduled-sampling decay's parameters that
            differ from its defaults (`keras_attn.training.scheduled_sampling`),
            e.g. `{"k": 1000.0}`.
    """

    name: str = setting("seq2seq", "model name under the export root and runs/", OUTPUT)
    preset: str = setting(
        "tiny",
        "model size: tiny (1 x 128 LSTM), small (2 x 256), base (4 x 1000, Luong et al.)",
        MODEL,
        choices=tuple(PRESETS["seq2seq"]),
    )
    shared_vocab: bool = setting(False, "one vocabulary, learned over both languages", DATA)
    attention: str = setting(
        "bahdanau",
        "bahdanau: additive, from the previous state; luong: multiplicative, from the current "
        "state, input feeding; none: the fixed-context baseline",
        SEQ2SEQ,
        choices=ATTENTIONS,
    )
    cell: str = setting("lstm", "recurrent cell", SEQ2SEQ, choices=CELLS)
    score: str = setting("general", "Luong's score function", SEQ2SEQ, choices=LUONG_SCORES)
    local: str = setting(
        None,
        "Luong's local attention, local-m or local-p (default: global)",
        SEQ2SEQ,
        choices=LOCAL_ALIGNMENTS,
    )
    window: int = setting(10, "half-width D of local attention", SEQ2SEQ, AT_LEAST_0)
    bidirectional: bool = setting(
        False,
        "a bidirectional encoder (both attentions learned more slowly with one on Multi30k: "
        "docs/benchmarks/quality.md)",
        SEQ2SEQ,
    )
    scheduled_sampling: str = setting(
        None,
        "feed the model's own predictions with a probability that rises as the teacher-forcing "
        "ratio decays this way (Bengio et al. 2015)",
        SEQ2SEQ,
        choices=DECAYS,
    )
    family = "seq2seq"
    recurrent = True
    jit_compile: bool = False  # not a flag of this job (`recurrent`)
    decay_parameters: dict = setting(
        None,
        "the decay's parameters, e.g. k=1000 (each decay's parameters and defaults: "
        "keras_attn/training/scheduled_sampling.py)",
        SEQ2SEQ,
        nargs="+",
        metavar="NAME=X",
    )

    def __post_init__(self):
        super().__post_init__()
        _refuse_unused(
            ("--score", self.score != type(self).score),
            ("--local", self.local),
            unless=self.attention == "luong",
            needs="Luong's attention: --attention luong",
        )
        _refuse_unused(
            ("--window", self.window != type(self).window),
            unless=self.local,
            needs="local attention: --local monotonic or predictive",
        )
        if self.decay_parameters and not self.scheduled_sampling:
            raise UserError("--decay-parameters: a decay's parameters need --scheduled-sampling")
        if self.scheduled_sampling:
            from keras_attn.training.scheduled_sampling import teacher_forcing_schedule

            try:
                teacher_forcing_schedule(self.scheduled_sampling, **(self.decay_parameters or {}))
            except ValueError as error:
                raise UserError(f"--scheduled-sampling: {error}") from None

    # Not flags of this job: the RNN has no attention heads and no feed-forward blocks.
    num_heads: int = None
    intermediate_dim: int = None
    # Nor this: the RNN's encoder and decoder have tables of their own.
    separate_embeddings: bool = False
    ARCHITECTURE = ("num_layers", "hidden_dim")

    def backbone_arguments(self, dropout):
        return dict(
            cell=self.cell,
            bidirectional=self.bidirectional,
            attention=self.attention,
            score=self.score,
            local=self.local,
            window=self.window,
            dropout=dropout,
            scheduled_sampling="argmax" if self.scheduled_sampling else None,
            **self.architecture(),
        )

    def callbacks(self):
        if not self.scheduled_sampling:
            return []
        from keras_attn.training.scheduled_sampling import (
            ScheduledSampling,
            teacher_forcing_schedule,
        )

        return [
            ScheduledSampling(
                teacher_forcing_schedule(self.scheduled_sampling, **(self.decay_parameters or {}))
            )
        ]

    def bound_settings(self):
        # scheduled_sampling too: it adds a weight (the sampling probability) to the model.
        return super().bound_settings() + (
            "attention",
            "cell",
            "score",
            "local",
            "window",
            "bidirectional",
            "scheduled_sampling",
        )


CAPTION_DATA = "data (default: the built-in generated scenes)"
CAPTION_MODEL = "model (default for each: the preset's or the model's)"


@dataclasses.dataclass
class CaptionConfig(GenerationConfig):
    """Everything `keras-attn train captioner` can be told; its flags are these fields.

    The model is a `Captioner` (Show, Attend and Tell); the fields left
    `None` take the `CaptionerBackbone`'s defaults.
    """

    family = "captioner"
    recurrent = True
    jit_compile: bool = False  # not a flag of this job (`recurrent`)

    name: str = setting("captioner", "model name under the export root and runs/", OUTPUT)
    data: str = setting(
        None, "the folder of the images that --captions names", CAPTION_DATA, metavar="FOLDER"
    )
    captions: str = setting(
        None,
        "image<TAB>caption lines (several per image allowed) or COCO's captions JSON",
        CAPTION_DATA,
        metavar="FILE",
    )
    valid_captions: str = setting(
        None,
        "validation captions of images in --data (default: 5% of the images)",
        CAPTION_DATA,
        metavar="FILE",
    )
    test_captions: str = setting(
        None,
        "test captions, scored at the end (default: the validation ones)",
        CAPTION_DATA,
        metavar="FILE",
    )
    builtin_scenes: int = setting(
        SCENE_SPLITS["train"], "training scenes of the built-in corpus", CAPTION_DATA, AT_LEAST_10
    )
    builtin_objects: int = setting(
        None,
        "the most objects in a built-in scene (default: the corpus's, 4)",
        CAPTION_DATA,
        AT_LEAST_1,
        metavar="N",
    )
    builtin_eval_size: int = setting(
        None,
        "scenes in each of the built-in corpus's validation, test and held-out "
        f"test splits (default: {SCENE_SPLITS['valid']:,}, {SCENE_SPLITS['test']:,} and "
        f"{SCENE_SPLITS['held_out']:,})",
        CAPTION_DATA,
        AT_LEAST_1,
        metavar="N",
    )
    valid_fraction: float = 0.05
    vocabulary_size: int = setting(
        5000,
        "WordPiece vocabulary size",
        CAPTION_DATA,
        AT_LEAST_10,
        flag="--vocab-size",
        metavar="N",
    )
    lowercase: bool = True
    max_sequence_length: int = setting(
        32, "longest caption in tokens", CAPTION_DATA, AT_LEAST_2, flag="--max-length", metavar="N"
    )
    image_size: int = setting(
        64, "the side the images are resized to (a square; pixels)", CAPTION_DATA, AT_LEAST_8
    )
    preset: str = setting(
        "small",
        "tiny (encoder 16-32-64, LSTM 128), small (32-64-128, 256)",
        CAPTION_MODEL,
        choices=tuple(PRESETS["captioner"]),
    )
    attention: str = setting(
        "soft",
        "soft: Show, Attend and Tell's weighted mean of the cells; hard: one sampled "
        "cell a word (the argmax cell at inference); none: the baseline that reads "
        "only the starting state (see --pooling)",
        CAPTION_MODEL,
        choices=CAPTION_ATTENTIONS,
    )
    hard_estimator: str = setting(
        HARD_ESTIMATORS[0],
        "hard attention's gradient: gumbel: straight-through "
        "Gumbel-softmax (the sampled cell forward, the relaxed sample's gradient "
        "backward); reinforce: the paper's REINFORCE with a moving-average baseline",
        CAPTION_MODEL,
        choices=HARD_ESTIMATORS,
    )
    pooling: str = setting(
        CAPTION_POOLINGS[0],
        "how the grid's cells make the LSTM's starting state: mean (the "
        "paper's) or max (each feature's largest value over the cells)",
        CAPTION_MODEL,
        choices=CAPTION_POOLINGS,
    )
    gate: bool = setting(
        True, "no gating scalar beta on the attention's context", CAPTION_MODEL, flag="--no-gate"
    )
    attention_regularization: float = setting(
        None,
        "lambda of the doubly stochastic regularizer",
        CAPTION_MODEL,
        NON_NEGATIVE,
        metavar="LAMBDA",
    )
    attention_supervision: float = setting(
        None,
        "lambda of the attention's supervision by the regions the "
        "captions' words name (Liu et al. 2017): the built-in scenes' objects, "
        "or a captions file's regions column",
        CAPTION_MODEL,
        NON_NEGATIVE,
        metavar="LAMBDA",
    )
    stage_depth: int = setting(
        None, "3x3 convolutions per encoder stage", CAPTION_MODEL, AT_LEAST_1
    )
    dropout: float = setting(None, "dropout rate", CAPTION_MODEL, FRACTION)
    beam_width: int = setting(
        1, "beam search width for the test split and samples (1: greedy)", OUTPUT, AT_LEAST_1
    )

    def __post_init__(self):
        super().__post_init__()
        if bool(self.data) != bool(self.captions):
            raise UserError(
                "--data and --captions must be given together: the images' folder and their "
                "captions"
            )
        if (self.valid_captions or self.test_captions) and not self.captions:
            raise UserError("--valid-captions and --test-captions need --data and --captions")
        _refuse_unused(
            ("--hard-estimator", self.hard_estimator != type(self).hard_estimator),
            unless=self.attention == "hard",
            needs="hard attention: --attention hard",
        )
        if self.attention_supervision and self.attention == "none":
            raise UserError(
                "--attention-supervision needs attention to supervise: --attention soft or hard"
            )
        if self.builtin_objects:
            from pipelines.scenes import MAX_OBJECTS

            if self.builtin_objects > MAX_OBJECTS:
                raise UserError(
                    f"--builtin-objects: a built-in scene has at most {MAX_OBJECTS} objects, "
                    f"got {self.builtin_objects}"
                )

    def backbone_arguments(self, dropout=None):
        """The backbone's arguments beside its preset and the preprocessor's sizes."""
        chosen = dict(
            attention=self.attention,
            hard_estimator=self.hard_estimator,
            pooling=self.pooling,
            gate=self.gate,
            attention_regularization=self.attention_regularization,
            stage_depth=self.stage_depth,
            dropout=self.dropout,
        )
        return {key: value for key, value in chosen.items() if value is not None}

    def callbacks(self):
        return []

    def bound_settings(self):
        return (
            "vocabulary_size",
            "max_sequence_length",
            "image_size",
            "preset",
            "attention",
            "gate",
            "stage_depth",
        )


BERT_DATA = "data (default: the built-in generated documents)"
BERT_MODEL = "model"


@dataclasses.dataclass
class PretrainConfig(RunConfig):
    """Everything `keras-attn pretrain bert` can be told; its flags are these fields."""

    name: str = setting("bert", "model name under the export root and runs/", OUTPUT)
    epochs: int = setting(
        10, "passes over the training data, those of a resumed run included", TRAINING, AT_LEAST_1
    )
    batch_size: int = setting(32, "examples per replica", TRAINING, AT_LEAST_1)
    data: list = setting(
        None,
        "text files or folders (.gz allowed); blank lines separate documents",
        BERT_DATA,
        nargs="+",
        metavar="PATH",
    )
    one_document_per_file: bool = setting(False, "each file is one document", BERT_DATA)
    builtin_documents: int = setting(
        3000, "documents of the built-in corpus", BERT_DATA, AT_LEAST_10
    )
    valid_fraction: float = 0.05
    vocabulary_size: int = setting(
        8000,
        "uncased WordPiece vocabulary size",
        BERT_DATA,
        AT_LEAST_10,
        flag="--vocab-size",
        metavar="N",
    )
    max_sequence_length: int = setting(
        None,
        "tokens per sentence pair (default: 128, or 64 on the built-in documents)",
        BERT_DATA,
        AT_LEAST_8,
        flag="--max-length",
        metavar="N",
    )
    max_predictions: int = setting(
        None,
        "most masked tokens per pair (default: --mask-rate of --max-length, rounded up)",
        BERT_DATA,
        AT_LEAST_1,
    )
    mask_rate: float = setting(
        0.15,
        "fraction of each pair's tokens masked (BERT: 0.15; see --max-predictions)",
        BERT_DATA,
        RATE,
    )
    whole_word: bool = setting(False, "mask all pieces of a word together", BERT_DATA)
    short_sequence_probability: float = 0.1
    pairs_per_epoch: int = setting(
        None,
        "sentence pairs per epoch (default: the corpus's tokens / (max-length - 3))",
        BERT_DATA,
        AT_LEAST_1,
    )
    preset: str = setting(
        "tiny",
        "tiny (L2/H128), mini (L4/H256), small (L4/H512), medium (L8/H512), base (L12/H768)",
        BERT_MODEL,
        choices=tuple(PRESETS["bert"]),
    )
    norm_first: bool = setting(
        False, "pre-norm blocks and a final LayerNorm instead of BERT's post-norm", BERT_MODEL
    )
    warmup_steps: int = setting(200, "steps of linear warm-up", BERT_MODEL, AT_LEAST_0)
    nsp_weight: float = setting(
        1.0,
        "weight of the next-sentence loss beside the masked LM's (BERT: 1; 0: MLM alone)",
        BERT_MODEL,
        NON_NEGATIVE,
    )
    learning_rate: float = setting(1e-3, "peak learning rate (AdamW)", TRAINING, POSITIVE)
    dropout: float = setting(0.1, "dropout rate", TRAINING, FRACTION)
    weight_decay: float = 0.01

    def bound_settings(self):
        """Fields a run folder keeps: a rerun with other values is refused."""
        return (
            "vocabulary_size",
            "preset",
            "norm_first",
            "max_sequence_length",
            "max_predictions",
            "whole_word",
            "mask_rate",
        )


@dataclasses.dataclass
class FinetuneConfig(RunConfig):
    """Everything `keras-attn finetune` can be told; its flags are these fields.

    Attributes:
        model_dir: a pretraining export (`saved_models/bert/<version>`),
            pretraining run folder (`runs/bert`, its best weights), or a
            Hugging Face or keras-hub BERT folder.
        train, valid, test: TSV files (`label<TAB>text` or
            `label<TAB>text_a<TAB>text_b`); without `valid`, 10% of the
            training examples are held out.
    """

    name: str = setting("bert-classifier", "model name under the export root and runs/", OUTPUT)
    epochs: int = setting(
        3, "passes over the training data, those of a resumed run included", TRAINING, AT_LEAST_1
    )
    batch_size: int = setting(32, "examples per replica", TRAINING, AT_LEAST_1)
    model_dir: str = setting(
        None,
        "a pretraining export (saved_models/bert/<version>), run folder (runs/bert), "
        "or Hugging Face or keras-hub BERT folder",
        positional=True,
    )
    train: str = setting(None, "label<TAB>text or label<TAB>text_a<TAB>text_b lines", required=True)
    valid: str = setting(None, "validation examples, same format (default: 10% of --train)")
    test: str = setting(None, "test examples, scored once at the end")
    max_sequence_length: int = setting(
        None,
        "tokens per example (default: the pretraining's)",
        check=AT_LEAST_8,
        flag="--max-length",
        metavar="N",
    )
    learning_rate: float = setting(
        None,
        "peak learning rate (AdamW; default: 1e-3 for a tiny backbone, the "
        "default pretraining's, else 1e-4)",
        TRAINING,
        POSITIVE,
    )
    dropout: float = setting(0.1, "dropout rate", TRAINING, FRACTION)
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01

    def bound_settings(self):
        return ("model_dir", "max_sequence_length")


SERVER = "server"
BATCHING = "dynamic batching (as TensorFlow Serving's --enable_batching)"
LIMITS = "limits (over them: 413 with a JSON error)"


@dataclasses.dataclass
class ServeConfig:
    """Everything `keras-attn serve` can be told; its flags are these fields.

    Attributes:
        model_root: the folder of `<name>/<version>/` exports, every one served.
        threads: the model calls that may run at once (off the event loop).
    """

    model_root: str = setting(
        "saved_models",
        "the exports to serve: MODEL_ROOT/<name>/<version>/",
        positional=True,
        nargs="?",
    )
    host: str = setting("127.0.0.1", "address to listen on (0.0.0.0: every interface)", SERVER)
    port: int = setting(8501, "port to listen on (TensorFlow Serving's REST port)", SERVER, PORT)
    poll_seconds: float = setting(
        2.0,
        "look for new exports under the root this often (0: only at start)",
        SERVER,
        NON_NEGATIVE,
        metavar="S",
    )
    compiled_widths: tuple = setting(
        (1, TranslationConfig.beam_width),
        "beam widths at which a translation of one text runs compiled by XLA, "
        "compiled after a model loads (given empty: none)",
        SERVER,
        AT_LEAST_1,
        nargs="*",
        metavar="W",
    )
    max_batch_size: int = setting(
        32,
        "merge concurrent requests of a signature up to N rows (1: no batching)",
        BATCHING,
        AT_LEAST_1,
        metavar="N",
    )
    batch_timeout_ms: float = setting(
        5.0,
        "how long a request waits for others to batch with",
        BATCHING,
        NON_NEGATIVE,
        metavar="MS",
    )
    max_request_bytes: int = setting(
        1 << 20, "the largest request body", LIMITS, AT_LEAST_1, metavar="N"
    )
    max_instances: int = setting(
        256, "the most rows (instances) in one request", LIMITS, AT_LEAST_1, metavar="N"
    )
    threads: int = 2

    def __post_init__(self):
        from keras_attn.serving.compiled_routes import COMPILED_WIDTH

        wide = [width for width in self.compiled_widths if not 1 <= width <= COMPILED_WIDTH]
        if wide:
            raise UserError(
                f"--compiled-widths {' '.join(map(str, wide))}: the compiled search takes beam "
                f"widths 1 to {COMPILED_WIDTH}"
            )
