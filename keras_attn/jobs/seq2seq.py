"""The RNN Seq2Seq translation job: the translation job with another model.

`run(Seq2SeqConfig(...))` is what `keras-attn train seq2seq` runs. Data,
vocabularies, the runner (every strategy, backups, resume), evaluation and
export are the translation job's (`keras_attn.jobs.translation`); this file
only says which model it trains, how it decodes, and the scheduled-sampling
callback.
"""

import dataclasses

from keras_attn.errors import UserError
from keras_attn.jobs.translation import BOUND_SETTINGS, TranslationConfig, run  # noqa: F401
from keras_attn.models import SEQ2SEQ_PRESETS, Seq2SeqBackbone
from keras_attn.training import ScheduledSampling, teacher_forcing_schedule

from keras_attn.choices import ATTENTIONS, CELLS, DECAYS, LOCALS, SCORES


@dataclasses.dataclass
class Seq2SeqConfig(TranslationConfig):
    """The translation job's settings, with the RNN model's.

    Attributes:
        attention: `"bahdanau"`, `"luong"` or `"none"` (the fixed-context
            baseline).
        cell: `"lstm"` or `"gru"`.
        score: Luong's score, `"dot"`, `"general"`, `"scaled_general"` or `"concat"`.
        local: Luong's local attention, `None`, `"monotonic"` or
            `"predictive"`.
        window: the half-width D of local attention.
        bidirectional: a bidirectional encoder.
        scheduled_sampling: `None`, or the decay of the teacher-forcing
            ratio: `"linear"`, `"exponential"` or `"inverse_sigmoid"`.
        decay_parameters: the decay's parameters that differ from its
            defaults (`keras_attn.training.scheduled_sampling`), e.g.
            `{"k": 1000.0}`.
    """

    run_dir: str = "runs/seq2seq"
    name: str = "seq2seq"
    attention: str = "bahdanau"
    cell: str = "lstm"
    score: str = "general"
    local: str = None
    window: int = 10
    bidirectional: bool = False
    scheduled_sampling: str = None
    decay_parameters: dict = None

    def __post_init__(self):
        for field, choices in (
            ("attention", ATTENTIONS), ("cell", CELLS), ("score", SCORES),
            ("local", (None, *LOCALS)), ("scheduled_sampling", (None, *DECAYS)),
            ("preset", tuple(SEQ2SEQ_PRESETS)),
        ):
            if getattr(self, field) not in choices:
                shown = ", ".join(c for c in choices if c)
                raise UserError(f"--{field.replace('_', '-')} must be one of {shown}, got {getattr(self, field)!r}")
        if self.decay_parameters and not self.scheduled_sampling:
            raise UserError("--decay-parameters: a decay's parameters need --scheduled-sampling")
        if self.scheduled_sampling:
            try:
                teacher_forcing_schedule(self.scheduled_sampling, **(self.decay_parameters or {}))
            except ValueError as error:
                raise UserError(f"--scheduled-sampling: {error}") from None

    def build_backbone(self, source_vocabulary_size, target_vocabulary_size, dropout):
        return Seq2SeqBackbone(
            source_vocabulary_size, target_vocabulary_size, preset=self.preset,
            cell=self.cell, bidirectional=self.bidirectional, attention=self.attention,
            score=self.score, local=self.local, window=self.window, dropout=dropout,
            scheduled_sampling="argmax" if self.scheduled_sampling else None,
        )

    def hidden_dim(self):
        return SEQ2SEQ_PRESETS[self.preset]["hidden_dim"]

    def callbacks(self):
        if not self.scheduled_sampling:
            return []
        return [ScheduledSampling(teacher_forcing_schedule(self.scheduled_sampling, **(self.decay_parameters or {})))]

    def bound_settings(self):
        # scheduled_sampling too: it adds a weight (the sampling probability) to the model.
        return BOUND_SETTINGS + (
            "attention", "cell", "score", "local", "window", "bidirectional", "scheduled_sampling",
        )
