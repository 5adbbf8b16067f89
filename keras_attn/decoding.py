"""Autoregressive decoding: greedy search and beam search over a stepper.

The search code knows nothing about the model. It drives a *stepper*, an
object with two methods (`Stepper` makes one of any encoder-decoder
backbone, the Transformer's and the RNN's):

- `initial_state(source, beam_width=1)` → `state`: a nested structure
  (dicts, lists) of tensors whose first axis is the row, for `B ·
  beam_width` rows (the hypotheses of source `b` are rows `b · beam_width`
  to `b · beam_width + beam_width - 1`). Tensors that depend on the source
  alone (an encoder's outputs) may keep one row per source. Every axis but
  the first may change from step to step (caches grow), never the rank:
  the state is a `tf.while_loop` variable.
- `step(token_ids, state, index, return_attention_scores=False)` →
  `(logits, new_state)`, or `(logits, new_state, attention)` when asked:
  `token_ids` `(R,)` are the previous outputs of the `R` rows ([BOS]
  first), `index` is the int32 step (the position of `token_ids` in the
  output), `logits` `(R, V)` score the next token and `attention` is a
  list, one per decoder layer, of `(R, heads, S)` cross-attention weights.
  A tensor of the state that a step does not change must come back as the
  same object (`dict(state, cache=...)`): beam search reorders the others
  only.

Every search is one `tf.while_loop`: it runs eagerly and inside
`tf.function` (so it can be exported in a SavedModel signature), and
`max_length` and `beam_width` may be Python ints or scalar int32 tensors.
`max_length` may also be a `(B,)` budget per source (`max_decode_length`
gives one), so a sentence decodes the same alone as beside longer ones.

Fixed shapes, for XLA: with `cache_length` (a Python int), `greedy_search`
and `beam_search` keep every row to the end and ask the stepper for caches
preallocated to that many steps (`initial_state(..., cache_length=)` and
`step(..., preallocated=True)`, which `Stepper` offers when its backbone
does: `Stepper.preallocates`), so no loop variable changes its shape.
`CompiledSearch` runs them as one XLA program per shape bucket: on CPU a
step of one sentence then costs about its matrix products, as
CTranslate2's does; from about 8 rows on, TensorFlow's own matrix products
are the faster. Each program compiles (seconds) when a process first
meets its shape.

Conventions: [PAD] (id 0) is never emitted before [EOS]; outputs exclude
[BOS], include [EOS] and are padded with [PAD] after it; a log-probability
or length counts the tokens up to and including [EOS].
"""

import inspect
import math

import tensorflow as tf
from keras import ops

from keras_attn import graph
from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

_INF = math.inf
LENGTH_PENALTY = 0.6  # GNMT's α (Wu et al., 2016): beam search's default
MAX_BEAM_WIDTH = 32  # the widest beam an export searches with (a request's memory and time)


class Stepper:
    """The stepper of an encoder-decoder backbone: the encoder once, then one token a step.

    Works with any model that has the three decoding methods of
    `keras_attn.models.TransformerBackbone` and `Seq2SeqBackbone`:
    `call_encoder(source, rows_per_source)` (what depends on the source
    alone, computed once per source), `initial_cache(encoded,
    rows_per_source)` (what each decoded row carries from step to step:
    attention caches, RNN states) and `call_decoder_with_cache(token_ids,
    encoded, cache, index)`. The state is `{"encoded": ..., "cache": ...}`;
    a step returns `encoded` as the very same tensors, so beam search
    reorders only the cache.

    Args:
        backbone: a `keras.Model` with the three decoding methods above, e.g. a
            `TransformerBackbone` or a `Seq2SeqBackbone`. The model to decode with.

    Example:

        >>> from keras_attn.models import TransformerBackbone
        >>> stepper = Stepper(TransformerBackbone(1000, 1000, preset="tiny"))
        >>> state = stepper.initial_state(tf.constant([[5, 6, 3]]), beam_width=2)
        >>> logits, state = stepper.step(tf.constant([2, 2]), state, 0)
        >>> logits.shape
        TensorShape([2, 1000])
    """

    def __init__(self, backbone):
        self.backbone = backbone

    @property
    def preallocates(self):
        """Whether the backbone's caches can be preallocated (`initial_cache(..., length=)`: the
        Transformer's), which the searches with `cache_length` and `CompiledSearch` need."""
        return "length" in inspect.signature(self.backbone.initial_cache).parameters

    def initial_state(self, source, beam_width=1, cache_length=None):
        """Encodes `source`; the state of `beam_width` rows a source.

        Args:
            source: int tensor of shape `(B, S)`. The source token ids, 0 as padding (or what
                else the backbone's `call_encoder` takes, e.g. images).
            beam_width: int or scalar int32 tensor. The decoded rows per source. Defaults to 1.
            cache_length: int or `None`. A Python int: the caches are allocated for that many
                steps and `step(..., preallocated=True)` writes into them, so the state keeps
                its shapes from step to step; `None`: the caches grow. Defaults to `None`.

        Returns:
            A dict: `"encoded"`, the backbone's `call_encoder` output, and `"cache"`, its
                `initial_cache`.
        """
        encoded = self.backbone.call_encoder(source, rows_per_source=beam_width)
        length = {} if cache_length is None else {"length": cache_length}
        return {
            "encoded": encoded,
            "cache": self.backbone.initial_cache(encoded, rows_per_source=beam_width, **length),
        }

    def step(self, token_ids, state, index, return_attention_scores=False, preallocated=False):
        """Feeds `token_ids` at position `index`.

        Args:
            token_ids: int tensor of shape `(R,)`. The previous token of each of the `R` rows.
            state: dict. `initial_state`'s, then this method's previous one.
            index: int or scalar int32 tensor. The position of `token_ids` in the output.
            return_attention_scores: bool. Also return the cross-attention weights. Defaults
                to `False`.
            preallocated: bool. Whether the state was made with a `cache_length`: the step is
                then written into its caches. Defaults to `False`.

        Returns:
            A tuple `(logits, new_state)`: float32 logits of shape `(R, V)` and the new state; with
                `return_attention_scores`, `(logits, new_state, attention)`, where `attention` is a
                list of `(R, heads, S)` cross-attention weights, one per decoder layer.
        """
        # (a backbone without it takes no such argument)
        kwargs = {"preallocated": True} if preallocated else {}
        logits, cache, attention = self.backbone.call_decoder_with_cache(
            token_ids, state["encoded"], state["cache"], index, **kwargs
        )
        new_state = {"encoded": state["encoded"], "cache": cache}
        return (logits, new_state, attention) if return_attention_scores else (logits, new_state)


def greedy_search(
    stepper,
    source,
    max_length,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    return_attention=False,
    cache_length=None,
):
    """Decodes by taking the most likely token at every step.

    The loop stops as soon as every sequence has emitted [EOS], or after
    `max_length` steps; sequences that have finished emit [PAD] meanwhile,
    and once a quarter of the rows have finished they leave the decoder's
    batch (the later steps compute only the rows still decoding), unless
    the shapes are fixed (`cache_length`).

    Args:
        stepper: a `Stepper`, or any decoder with `initial_state(source)` and
            `step(token_ids, state, index)` (see the module docstring).
        source: int tensor of shape `(B, S)`. Source token ids, 0 as padding.
        max_length: int, int32 scalar tensor, or int32 tensor of shape `(B,)` (one per
            source). The most tokens to emit; at most what the stepper's model can take. A row
            cut off by its budget ends without [EOS].
        bos_id: int. The token fed at the first step. Defaults to 2 (`BOS_ID`).
        eos_id: int. The token that ends a sequence. Defaults to 3 (`EOS_ID`).
        return_attention: bool. Also return the cross-attention weights. Defaults to `False`.
        cache_length: int or `None`. A Python int: the caches are allocated for that many steps
            (budgets above it are cut to it), every row stays to the end, and every shape is
            fixed from step to step (for XLA: one program a `(B, S, cache_length)`); the tokens
            are then `(B, cache_length)` and `steps` (the steps run) is returned too. Not with
            `return_attention`. Defaults to `None`.

    Returns:
        A dict with `tokens` `(B, L)` int32, `scores` `(B,)` float32 (sums of log-probabilities),
            `lengths` `(B,)` int32 and, if asked, `attention` `(B, L, layers, heads, S)`: the
            weights that produced each token (zeros after [EOS]). `L <= max_length` is the number of
            steps run.

    Raises:
        ValueError: when `cache_length` is given with `return_attention`.

    Example:

        >>> from keras_attn.models import TransformerBackbone
        >>> stepper = Stepper(TransformerBackbone(1000, 1000, preset="tiny"))
        >>> source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
        >>> outputs = greedy_search(stepper, source, max_length=5)
        >>> sorted(outputs), outputs["tokens"].shape[0]
        (['lengths', 'scores', 'tokens'], 2)
    """
    if cache_length is not None:
        if return_attention:
            raise ValueError(
                "greedy_search: return_attention needs the growing caches (cache_length=None)"
            )
        return _fixed_shape_greedy_search(stepper, source, max_length, cache_length, bos_id, eos_id)
    source = tf.convert_to_tensor(source)
    batch = tf.shape(source)[0]

    def body(index, state, rows):
        if return_attention:
            logits, state, attention = stepper.step(
                rows["last"], state, index, return_attention_scores=True
            )
        else:
            logits, state = stepper.step(rows["last"], state, index)[:2]
        token, log_prob = _greedy_step(logits, rows["done"], bos_id)
        # Per source (B, ...): rows dropped earlier get [PAD], no score and no attention.
        where = rows["source_index"][:, None]
        updated = dict(
            rows,
            last=token,
            done=rows["done"] | tf.equal(token, eos_id) | (index + 1 >= rows["budget"]),
            tokens=rows["tokens"].write(index, tf.scatter_nd(where, token, [batch])),
            scores=tf.tensor_scatter_nd_add(rows["scores"], where, log_prob),
            lengths=tf.tensor_scatter_nd_add(
                rows["lengths"], where, tf.cast(~rows["done"], tf.int32)
            ),
        )
        if return_attention:
            attention = tf.cast(tf.stack(attention, axis=1), tf.float32)  # (R, layers, heads, S)
            attention = tf.where(rows["done"][:, None, None, None], 0.0, attention)
            shape = tf.concat([[batch], tf.shape(attention)[1:]], 0)
            updated["attention"] = rows["attention"].write(
                index, tf.scatter_nd(where, attention, shape)
            )
        state, updated = _drop_finished_rows(state, updated)
        return index + 1, state, updated

    budget = _row_budgets(max_length, batch)
    rows = {
        "last": tf.fill([batch], tf.cast(bos_id, tf.int32)),  # the latest token of each row
        "done": budget <= 0,  # emitted [EOS] or spent its budget
        "budget": budget,
        "source_index": tf.range(batch),  # the source of each row
        "scores": tf.zeros([batch], tf.float32),  # per source: sums of log-probs
        "lengths": tf.zeros([batch], tf.int32),
    }
    rows["tokens"] = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
    if return_attention:
        rows["attention"] = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    rows = _decode_loop(body, stepper.initial_state(source), rows, tf.reduce_max(budget))
    outputs = {
        "tokens": _batch_major(rows["tokens"], tf.zeros([batch, 0], tf.int32)),
        "scores": rows["scores"],
        "lengths": rows["lengths"],
    }
    if return_attention:
        outputs["attention"] = _batch_major(rows["attention"], tf.zeros([batch, 0, 0, 0, 0]))
    return outputs


def _fixed_shape_greedy_search(stepper, source, max_length, cache_length, bos_id, eos_id):
    """`greedy_search(..., cache_length=)`: no row leaves the batch
    and the caches are written in place.
    """
    source = tf.convert_to_tensor(source)
    batch = tf.shape(source)[0]
    budget = tf.minimum(_row_budgets(max_length, batch), cache_length)

    def body(index, state, last, done, tokens, scores, lengths):
        logits, state = stepper.step(last, state, index, preallocated=True)[:2]
        token, log_prob = _greedy_step(logits, done, bos_id)
        tokens = tf.tensor_scatter_nd_update(tokens, [[index]], token[None])  # (L, B): step `index`
        lengths += tf.cast(~done, tf.int32)
        done = done | tf.equal(token, eos_id) | (index + 1 >= budget)
        return index + 1, state, token, done, tokens, scores + log_prob, lengths

    loop = (
        tf.constant(0),
        stepper.initial_state(source, cache_length=cache_length),
        tf.fill([batch], tf.cast(bos_id, tf.int32)),
        budget <= 0,
        tf.fill([cache_length, batch], PAD_ID),
        tf.zeros([batch], tf.float32),
        tf.zeros([batch], tf.int32),
    )
    steps, _, _, _, tokens, scores, lengths = tf.while_loop(
        lambda index, state, last, done, *_: ~tf.reduce_all(done),
        body,
        loop,
        maximum_iterations=cache_length,
    )
    return {"tokens": tf.transpose(tokens), "scores": scores, "lengths": lengths, "steps": steps}


def _drop_finished_rows(state, rows):
    """Greedy search's state and rows without the finished rows, once
    a quarter of them have finished.

    Later steps then compute only the rows still decoding (a batch's
    sentences end at different steps); the rows' totals and outputs are
    kept per source (`source_index`). Gathering copies the state, so it
    waits until it pays.
    """
    per_row = {name: rows[name] for name in ("last", "done", "budget", "source_index")}
    alive = tf.where(~rows["done"])[:, 0]
    count = tf.shape(rows["done"])[0]

    def keep_alive():
        return tf.nest.map_structure(lambda x: tf.gather(x, alive), (state, per_row))

    state, per_row = tf.cond(4 * tf.size(alive) <= 3 * count, keep_alive, lambda: (state, per_row))
    return state, dict(rows, **per_row)


def beam_search(
    stepper,
    source,
    max_length,
    beam_width=4,
    length_penalty=LENGTH_PENALTY,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    return_all_beams=False,
    cache_length=None,
):
    """Beam search with the GNMT length penalty (Wu et al. 2016, section 7).

    Each source keeps `beam_width` hypotheses. At every step the alive
    hypotheses are extended by every token and the best extensions by
    log-probability fill the beam. A hypothesis that emits [EOS] is
    finished: it is frozen with its score and keeps its place in the beam
    (extended by [PAD] at no cost, never expanded again), so the beam
    narrows as hypotheses finish and a beam of width 1 is greedy search.
    The decoder state holds `B · beam_width` rows and, after every step,
    the tensors the step changed are reordered by the hypotheses' parents
    with one gather each.

    Finished hypotheses are ranked by log P(Y) / lp(Y), with
    lp(Y) = ((5 + |Y|) / 6)^α. A source stops early once none of its alive
    hypotheses can beat its best finished one even in the best case (no
    more log-probability lost, the largest penalty divisor); the loop ends
    when every source has stopped or after `max_length` steps. Once a
    quarter of the sources have stopped, their rows leave the decoder's
    batch (their hypotheses are kept aside).

    Args:
        stepper: a `Stepper`, or any decoder with `initial_state(source, beam_width)` and
            `step(token_ids, state, index)` (see the module docstring).
        source: int tensor of shape `(B, S)`. Source token ids, 0 as padding.
        max_length: int, int32 scalar tensor, or int32 tensor of shape `(B,)` (one per
            source). The most tokens to emit; at most what the stepper's model can take.
        beam_width: int or int32 scalar tensor. Hypotheses kept per source. Defaults to 4.
        length_penalty: float. α; 0 ranks by log-probability alone, larger values favour
            longer outputs. Defaults to 0.6 (`LENGTH_PENALTY`).
        bos_id: int. The token fed at the first step. Defaults to 2 (`BOS_ID`).
        eos_id: int. The token that ends a hypothesis. Defaults to 3 (`EOS_ID`).
        return_all_beams: bool. Also return every hypothesis, best first. Defaults to `False`.
        cache_length: int or `None`. A Python int: the caches are allocated for that many steps
            (budgets above it are cut to it), no source leaves the batch, and every shape is
            fixed from step to step (for XLA: one program a `(B, S, cache_length, beam_width)`);
            the tokens are then `(B, cache_length)` and `steps` (the steps run) is returned too.
            Defaults to `None`.

    Returns:
        A dict with the best hypothesis of each source: `tokens` `(B, L)` int32, `scores` `(B,)`
            (log-probability / lp), `log_probs` `(B,)` and `lengths` `(B,)`; with
            `return_all_beams`, also `beam_tokens` `(B, W, L)` and `beam_scores`, `beam_log_probs`,
            `beam_lengths` `(B, W)`. Finished hypotheses rank before unfinished ones (cut off by
            `max_length` or by early stopping), each group by score; a place the search never filled
            (fewer tokens than places) scores -inf. `L <= max_length` is the number of steps run.

    Example:

        >>> from keras_attn.models import TransformerBackbone
        >>> stepper = Stepper(TransformerBackbone(1000, 1000, preset="tiny"))
        >>> source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
        >>> outputs = beam_search(stepper, source, max_length=5, beam_width=4,
        ...                       return_all_beams=True)
        >>> outputs["beam_tokens"].shape[:2]
        TensorShape([2, 4])
    """
    source = tf.convert_to_tensor(source)
    batch = tf.shape(source)[0]
    width = tf.convert_to_tensor(beam_width, tf.int32)
    alpha = tf.cast(length_penalty, tf.float32)
    budget = _row_budgets(max_length, batch)
    fixed = cache_length is not None
    if fixed:
        budget = tf.minimum(budget, cache_length)
        longest = cache_length
    else:
        longest = tf.maximum(tf.reduce_max(budget), 0)  # 0 for an empty batch
    # (steppers without caches to preallocate take none)
    preallocated = {"preallocated": True} if fixed else {}

    def body(index, state, beams):
        sources = tf.shape(beams["done"])[0]  # those still searched (`_drop_stopped_sources`)
        tokens = tf.reshape(beams["last"], [-1])
        logits, new_state = stepper.step(tokens, state, index, **preallocated)[:2]
        log_probs = tf.reshape(_log_probs(logits, bos_id), [sources, width, -1])  # (B, W, V)
        parent, token, scores, grows = _best_extensions(log_probs, beams, width)
        beams = _grown_beams(beams, parent, token, scores, grows, index, eos_id, alpha)
        rows = tf.reshape(parent + width * tf.range(sources)[:, None], [-1])
        new_state = _reorder(new_state, state, rows)
        if not fixed:
            new_state, beams = _drop_stopped_sources(new_state, beams, width)
        return index + 1, new_state, beams

    state = stepper.initial_state(
        source, beam_width=width, **({"cache_length": cache_length} if fixed else {})
    )
    beams = _decode_loop(body, state, _first_beams(batch, width, budget, longest, bos_id), longest)
    # the sources searched to the end, beside those that stopped before
    beams = _keep_stopped(beams, tf.range(tf.shape(beams["done"])[0]))["stopped"]
    return _ranked(beams, alpha, fixed, return_all_beams)


def _first_beams(batch, width, budget, longest, bos_id):
    """The beams before the first step: only beam 0 is alive, so its first extensions all differ."""
    first_scores = tf.where(tf.range(width) == 0, 0.0, -_INF)
    beams = {
        "last": tf.fill([batch, width], tf.cast(bos_id, tf.int32)),
        "scores": tf.tile(first_scores[None], [batch, 1]),  # sums of log-probs
        "finished": tf.zeros([batch, width], tf.bool),  # emitted [EOS]
        "lengths": tf.zeros([batch, width], tf.int32),
        "history": tf.zeros([batch, width, longest], tf.int32),
        "done": budget <= 0,  # the source has stopped
        "budget": budget,
        "source_index": tf.range(batch),  # the source of each row of these tensors
    }
    # per source, of those no longer searched
    beams["stopped"] = {name: beams[name] for name in _BEAMS_KEPT}
    return beams


def _best_extensions(log_probs, beams, width):
    """`(parent, token, scores, grows)`, each `(B, W)`: the hypotheses of the next step.

    The best `width` extensions of the alive hypotheses by one token take the places the frozen
    ones (finished, or of a source that has stopped) do not keep; a frozen hypothesis keeps its
    place, extended by [PAD] at no cost.
    """
    sources, vocab_size = tf.shape(log_probs)[0], tf.shape(log_probs)[-1]
    scores = beams["scores"]  # (B, W)
    frozen = beams["finished"] | beams["done"][:, None]
    extensions = log_probs + tf.where(frozen, -_INF, scores)[..., None]
    extension_scores, best = blockwise_top_k(tf.reshape(extensions, [sources, -1]), width)
    _, pick = tf.math.top_k(
        tf.concat([tf.where(frozen, _INF, -_INF), extension_scores], axis=1), k=width
    )
    candidates = (  # `width` frozen ones, then `width` extensions
        (tf.broadcast_to(tf.range(width), [sources, width]), best // vocab_size),
        (tf.fill([sources, width], PAD_ID), best % vocab_size),
        (tf.where(frozen, scores, -_INF), extension_scores),
        (tf.zeros_like(frozen), extension_scores > -_INF),
    )
    parent, token, scores, grows = [
        tf.gather(tf.concat(pair, axis=1), pick, batch_dims=1) for pair in candidates
    ]
    return parent, tf.where(grows, token, PAD_ID), scores, grows


def _grown_beams(beams, parent, token, scores, grows, index, eos_id, alpha):
    """The beams after a step: each hypothesis its parent's, grown by `token` where it `grows`;
    a source stops when none of its alive hypotheses can beat its best finished one
    (log-probabilities only fall, and lp is largest at one end) or its budget is spent."""

    def from_parent(x):
        return tf.gather(x, parent, batch_dims=1)

    finished = from_parent(beams["finished"]) | tf.equal(token, eos_id)
    lengths = from_parent(beams["lengths"]) + tf.cast(grows, tf.int32)
    history = tf.where(  # (B, W, longest), the token written at `index`
        tf.range(tf.shape(beams["history"])[-1]) == index,
        token[..., None],
        from_parent(beams["history"]),
    )
    normalized = scores / gnmt_length_penalty(lengths, alpha)
    best_finished = tf.reduce_max(tf.where(finished, normalized, -_INF), axis=1)
    bound = scores / tf.maximum(
        gnmt_length_penalty(lengths + 1, alpha),
        gnmt_length_penalty(beams["budget"], alpha)[:, None],
    )
    alive = (scores > -_INF) & ~finished
    can_improve = alive & (bound > best_finished[:, None])
    done = beams["done"] | ~tf.reduce_any(can_improve, axis=1) | (index + 1 >= beams["budget"])
    return dict(
        beams,
        last=token,
        scores=scores,
        finished=finished,
        lengths=lengths,
        history=history,
        done=done,
    )


def _ranked(beams, alpha, fixed, return_all_beams):
    """Beam search's outputs: each source's hypotheses by score, finished ones first."""
    log_probs, lengths = beams["scores"], beams["lengths"]
    scores = log_probs / gnmt_length_penalty(lengths, alpha)
    # The steps run: while a source has not stopped, its best hypotheses grow.
    steps = tf.reduce_max(tf.concat([tf.reshape(lengths, [-1]), [0]], 0))
    ranked = {
        "tokens": beams["history"] if fixed else beams["history"][:, :, :steps],
        "scores": scores,
        "log_probs": log_probs,
        "lengths": lengths,
    }
    order = _best_first(scores, beams["finished"])
    ranked = {name: tf.gather(x, order, batch_dims=1) for name, x in ranked.items()}
    outputs = {name: x[:, 0] for name, x in ranked.items()}
    if return_all_beams:
        outputs.update({f"beam_{name}": x for name, x in ranked.items()})
    if fixed:
        outputs["steps"] = steps
    return outputs


_BEAMS_KEPT = ("scores", "finished", "lengths", "history")  # what beam search's results are made of


def _drop_stopped_sources(state, beams, width):
    """Beam search's state and beams without the sources that have
    stopped, once a quarter of them have.

    Their hypotheses are kept in `beams["stopped"]` (per source, by
    `source_index`). The state's tensors hold `width` rows a source, or one
    (what a stepper keeps per source).
    """
    sources = tf.shape(beams["done"])[0]
    alive = tf.where(~beams["done"])[:, 0]

    def keep_alive():
        alive_rows = tf.reshape(
            alive[:, None] * tf.cast(width, tf.int64) + tf.range(tf.cast(width, tf.int64)), [-1]
        )

        def rows_of(x):
            one_per_source = tf.equal(tf.shape(x)[0], sources)
            return tf.cond(
                one_per_source, lambda: tf.gather(x, alive), lambda: tf.gather(x, alive_rows)
            )

        stopped = _keep_stopped(beams, tf.where(beams["done"])[:, 0])["stopped"]
        per_source = {name: tf.gather(x, alive) for name, x in beams.items() if name != "stopped"}
        return tf.nest.map_structure(rows_of, state), dict(per_source, stopped=stopped)

    return tf.cond(4 * tf.size(alive) <= 3 * sources, keep_alive, lambda: (state, beams))


def _keep_stopped(beams, which):
    """`beams` with the hypotheses of its sources `which` written into `beams["stopped"]`."""
    where = tf.gather(beams["source_index"], which)[:, None]

    def update(kept, current):
        return tf.cond(  # (scattering into a tensor of no elements fails: a history of no steps)
            tf.size(kept) > 0,
            lambda: tf.tensor_scatter_nd_update(kept, where, tf.gather(current, which)),
            lambda: kept,
        )

    return dict(
        beams, stopped={name: update(beams["stopped"][name], beams[name]) for name in _BEAMS_KEPT}
    )


def search(stepper, source, max_length, beam_width, length_penalty=LENGTH_PENALTY, eos_id=EOS_ID):
    """Greedy search for a beam width of 1, else beam search: the best output of each source and
    its score.

    Beam search of width 1 finds greedy search's outputs (see `beam_search`)
    with more work a step (8% more time for one sentence); `beam_width` may
    be a scalar int32 tensor (then both searches are in the graph and the
    width picks one: a bigger graph to trace, save and load, which is why
    the exports' signatures run `beam_search` alone).

    Args:
        stepper: a `Stepper`, or any decoder with its methods (see the module docstring).
        source: int tensor of shape `(B, S)`. Source token ids, 0 as padding.
        max_length: int, int32 scalar tensor, or int32 tensor of shape `(B,)` (one per
            source). The most tokens to emit.
        beam_width: int or int32 scalar tensor. 1 for greedy search, more for beam search.
        length_penalty: float. GNMT's α, for both searches' scores. Defaults to 0.6
            (`LENGTH_PENALTY`).
        eos_id: int. The token that ends a sequence. Defaults to 3 (`EOS_ID`).

    Returns:
        `{"tokens": (B, L) int32, "scores": (B,)}`, scores as beam search's: log-probability / lp.
    """

    def greedy():
        outputs = greedy_search(stepper, source, max_length, eos_id=eos_id)
        return outputs["tokens"], outputs["scores"] / gnmt_length_penalty(
            outputs["lengths"], length_penalty
        )

    def beam():
        outputs = beam_search(
            stepper, source, max_length, beam_width, length_penalty=length_penalty, eos_id=eos_id
        )
        return outputs["tokens"], outputs["scores"]

    if isinstance(beam_width, int):
        tokens, scores = greedy() if beam_width == 1 else beam()
    else:
        tokens, scores = tf.cond(tf.equal(beam_width, 1), greedy, beam)
    return {"tokens": tokens, "scores": scores}


def gnmt_length_penalty(length, alpha):
    """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, eq. 14), as float32.

    Args:
        length: int or int tensor of any shape. |Y|, the lengths.
        alpha: float or float32 scalar tensor. α.

    Returns:
        A float32 tensor shaped like `length`.
    """
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def max_decode_length(source, ratio=1.5, extra=10, cap=None):
    """A step budget per source: `min(cap, ceil(ratio · S_b) + extra)`.

    Args:
        source: int tensor of shape `(B, S)`. Source token ids, 0 as padding.
        ratio: float. Output tokens allowed per source token. Defaults to 1.5.
        extra: int. Tokens added to the budget (room for short sources and [EOS]). Defaults to
            10.
        cap: int, int scalar tensor or `None`. An upper bound, e.g. what the decoder's caches
            hold; `None` for none. Defaults to `None`.

    Returns:
        An int32 tensor of shape `(B,)`: `S_b` is the unpadded length of source `b`, so a sentence
            gets the same budget whatever it is batched with.

    Example:

        >>> max_decode_length(np.array([[5, 6, 7, 3], [8, 9, 3, 0]]))
        <tf.Tensor: shape=(2,), dtype=int32, numpy=array([16, 15], dtype=int32)>
    """
    source_lengths = ops.sum(ops.cast(ops.not_equal(source, PAD_ID), "int32"), axis=1)
    return _budget(source_lengths, ratio, extra, cap)


def _budget(source_length, ratio=1.5, extra=10, cap=None):
    """`max_decode_length`'s budget of sources of `source_length` tokens (int32, any shape)."""
    length = ops.cast(ops.ceil(ratio * ops.cast(source_length, "float32")), "int32") + extra
    if cap is not None:
        length = ops.minimum(length, ops.cast(cap, "int32"))
    return ops.convert_to_tensor(length, "int32")


# --------------------------------------------------------------------------
# Shared pieces.


def _decode_loop(body, state, sequences, max_length):
    """Runs `body(index, state, sequences)` until all `sequences["done"]`.

    Or for `max_length` steps. Every axis of the loop variables may change.
    """
    max_length = tf.cast(max_length, tf.int32)
    _, _, sequences = tf.while_loop(
        lambda index, state, sequences: (index < max_length) & ~tf.reduce_all(sequences["done"]),
        body,
        (tf.constant(0), state, sequences),
        shape_invariants=(
            tf.TensorShape([]),
            tf.nest.map_structure(_any_shape, state),
            tf.nest.map_structure(_any_shape, sequences),
        ),
    )
    return sequences


def _row_budgets(max_length, batch):
    """`max_length` as int, scalar or `(B,)` → a `(B,)` int32 budget per row."""
    max_length = tf.cast(max_length, tf.int32)
    return tf.broadcast_to(max_length, [batch])


def _greedy_step(logits, done, bos_id):
    """`(token, its log-probability)` of each row: the most likely;
    finished rows get [PAD] at no cost.
    """
    log_probs = _log_probs(logits, bos_id)
    token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
    token_log_prob = tf.gather(log_probs, token, batch_dims=1)
    return tf.where(done, PAD_ID, token), tf.where(done, 0.0, token_log_prob)


def _log_probs(logits, bos_id):
    """Log-softmax of `(..., V)` logits; [PAD] and [BOS] get -inf (never emitted)."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
    ids = tf.range(tf.shape(log_probs)[-1])
    never = tf.equal(ids, PAD_ID) | tf.equal(ids, tf.cast(bos_id, tf.int32))
    # Adding a (V,) row is faster than a `tf.where` that broadcasts it.
    return log_probs + tf.where(never, -_INF, 0.0)


def _batch_major(tensor_array, empty):
    """Stacks per-step `(B, ...)` outputs into `(B, steps, ...)`.

    `empty` is returned when no step ran (stacking nothing fails).
    """

    def stack():
        stacked = tensor_array.stack()  # (steps, B, ...)
        perm = tf.concat([[1, 0], tf.range(2, tf.rank(stacked))], axis=0)
        return tf.transpose(stacked, perm)

    return tf.cond(tensor_array.size() > 0, stack, lambda: empty)


def _reorder(new_state, state, rows):
    """Gathers the state rows of each hypothesis' parent.

    A tensor the stepper passed through unchanged (e.g. the encoder's keys
    and values) is the same for all the hypotheses of a source, and may
    have one row per source: it stays as it is.
    """
    return tf.nest.map_structure(
        lambda new, old: new if new is old else tf.gather(new, rows),
        new_state,
        state,
    )


def _any_shape(x):
    if isinstance(x, tf.TensorArray):
        return tf.TensorShape(None)
    return tf.TensorShape([None] * x.shape.rank)


def blockwise_top_k(x, k, block_size=128):
    """`tf.math.top_k(x, k)` of long rows, by blocks.

    On CPU `top_k` costs about 3 ns an element: 3 ms a step for 4 beams
    over 8000 tokens. The `k` best elements of a row lie in the `k` blocks
    with the highest maxima, so only those `k · block_size` candidates go
    through `top_k`, ten times faster; ties still go to the lowest index.

    Args:
        x: float tensor of shape `(B, N)`. The rows.
        k: int or int32 scalar tensor. The elements kept per row.
        block_size: int. The elements a block, cut to `N // k` (at least 1) for short rows.
            Defaults to 128.

    Returns:
        A tuple `(values, indices)`, each of shape `(B, k)`, as `tf.math.top_k`'s.
    """
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    block_size = tf.maximum(1, tf.minimum(block_size, length // k))
    blocks = -(-length // block_size)  # ceil
    x = tf.pad(x, [[0, 0], [0, blocks * block_size - length]], constant_values=-_INF)
    x = tf.reshape(x, [batch, blocks, block_size])
    _, top_blocks = tf.math.top_k(tf.reduce_max(x, axis=-1), k=k)
    top_blocks = tf.sort(top_blocks, axis=1)  # candidates in index order
    candidates = tf.reshape(tf.gather(x, top_blocks, batch_dims=1), [batch, -1])
    values, positions = tf.math.top_k(candidates, k=k)
    indices = top_blocks[..., None] * block_size + tf.range(block_size)
    return values, tf.gather(tf.reshape(indices, [batch, -1]), positions, batch_dims=1)


def _best_first(scores, finished):
    """Beam order `(B, W)`: finished hypotheses first, each group by score."""
    order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
    finished_first = tf.argsort(
        tf.cast(tf.gather(finished, order, batch_dims=1), tf.int32),
        axis=1,
        direction="DESCENDING",
        stable=True,
    )
    return tf.gather(order, finished_first, batch_dims=1)


# --------------------------------------------------------------------------
# The search compiled by XLA.

# the source lengths CompiledSearch pads to (and its max_length)
SOURCE_BUCKETS = (
    16,
    32,
    64,
    128,
    256,
    512,
)


class CompiledSearch:
    """Greedy and beam search compiled by XLA: one program per shape bucket.

    A call pads the batch to a power of two rows and the source to the
    first of `SOURCE_BUCKETS` that holds it (or to `max_length`), then runs
    `greedy_search` (width 1) or `beam_search` with `cache_length` in a
    `tf.function(jit_compile=True)`: `greedy_program` or `beam_program`,
    each traced once (in a signature, for any shape), which XLA compiles
    once per shape and beam width. Each row's budget is
    `max_decode_length(source, cap=max_length)`, and the caches hold the
    budget of a source that fills the bucket (`cache_lengths`), so each
    (rows, source bucket, beam width) has exactly one program, compiled
    (seconds) the first time a process meets it. The outputs equal
    `search`'s. Callable eagerly and inside a `tf.function` (a SavedModel
    signature, whose programs XLA compiles after loading).

    Worth it for one sentence or a few: on CPU a step then costs about its
    matrix products; from about 8 rows on, TensorFlow's graph (`search`) is
    the faster.

    Args:
        stepper: a `Stepper` with preallocated caches (`Stepper` of a `TransformerBackbone`).
        max_length: int. A Python int: the longest source and output (e.g. the preprocessor's
            `max_length`).
        length_penalty: float. Beam search's α; greedy scores are normalized alike. Defaults to
            0.6 (`LENGTH_PENALTY`).
        eos_id: int. The token that ends a hypothesis. Defaults to 3 (`EOS_ID`).

    Example:

        >>> from keras_attn.models import TransformerBackbone
        >>> backbone = TransformerBackbone(1000, 1000, preset="tiny", max_sequence_length=64)
        >>> compiled = CompiledSearch(Stepper(backbone), max_length=64)
        >>> # a source of 17 to 32 tokens: caches of 58 steps
        >>> compiled.source_lengths, compiled.cache_lengths
        ((16, 32, 64), (34, 58, 64))
        >>> outputs = compiled(np.array([[5, 6, 7, 3]], "int32"), beam_width=4)  # doctest: +SKIP
    """

    def __init__(self, stepper, max_length, length_penalty=LENGTH_PENALTY, eos_id=EOS_ID):
        self.stepper, self.max_length, self.length_penalty, self.eos_id = (
            stepper,
            max_length,
            length_penalty,
            eos_id,
        )
        self.source_lengths = tuple(n for n in SOURCE_BUCKETS if n < max_length) + (max_length,)
        with tf.init_scope():  # (eagerly, even while a signature is traced)
            self.cache_lengths = tuple(int(_budget(n, cap=max_length)) for n in self.source_lengths)
        self.greedy_program = graph.function(self._greedy, jit_compile=True)
        self.beam_program = graph.function(self._beam, jit_compile=True)

    def _cache_length(self, source):
        # The budget of a source that fills the padded width: from the
        # shape, which XLA compiles as a constant.
        return _budget(tf.shape(source)[1], cap=self.max_length)

    def _greedy(self, source, budget):
        outputs = greedy_search(
            self.stepper,
            source,
            budget,
            eos_id=self.eos_id,
            cache_length=self._cache_length(source),
        )
        scores = outputs["scores"] / gnmt_length_penalty(outputs["lengths"], self.length_penalty)
        return outputs["tokens"], scores, outputs["steps"]

    def _beam(self, source, budget, beam_width):
        # `beam_width` is an argument of the program: XLA takes it as
        # a constant, one program per value.
        outputs = beam_search(
            self.stepper,
            source,
            budget,
            beam_width,
            length_penalty=self.length_penalty,
            eos_id=self.eos_id,
            cache_length=self._cache_length(source),
        )
        return outputs["tokens"], outputs["scores"], outputs["steps"]

    def warm_up(self, beam_width=1, rows=1):
        """Compiles the programs of `rows` sources at `beam_width` for every source bucket, so
        requests of that shape compile nothing. (Runs each program once, on [UNK] sources.)

        Args:
            beam_width: int. The beam width to compile for; 1 is greedy search. Defaults to 1.
            rows: int. The sources a request holds. Defaults to 1.

        Returns:
            An int32 tensor: the bucket lengths (`source_lengths`).
        """
        runs = []
        for length in self.source_lengths:
            with tf.control_dependencies(runs):  # one at a time
                runs = [self(tf.fill([rows, length], UNK_ID), beam_width)["scores"]]
        with tf.control_dependencies(runs):
            return tf.constant(self.source_lengths)

    def __call__(self, source, beam_width=1):
        """The best output of each source and its score.

        Args:
            source: int tensor of shape `(B, S)`. Source token ids, 0 as padding,
                `S <= max_length`.
            beam_width: int or int32 scalar tensor. 1 is greedy search. Defaults to 1.

        Returns:
            `{"tokens": (B, L) int32, "scores": (B,)}` as `search`'s.

        Raises:
            tf.errors.InvalidArgumentError: when `S` exceeds `max_length` (eagerly; in a graph,
                when it runs).
        """
        source = tf.convert_to_tensor(source, tf.int32)
        batch, length = tf.shape(source)[0], tf.shape(source)[1]
        checked = tf.debugging.assert_less_equal(
            length,
            self.max_length,
            message=f"CompiledSearch takes sources of at most {self.max_length} tokens",
        )
        with tf.control_dependencies([checked]):
            bucket = tf.gather(
                self.source_lengths, tf.searchsorted(self.source_lengths, length[None])[0]
            )
        budget = max_decode_length(source, cap=self.max_length)
        rows = _next_power_of_two(batch)
        budget = tf.pad(budget, [[0, rows - batch]])  # padding rows: done before the first step
        padded = tf.pad(source, [[0, rows - batch], [0, bucket - length]])
        width = tf.cast(beam_width, tf.int32)

        def greedy():
            return self.greedy_program(padded, budget)

        def beam():
            return self.beam_program(padded, budget, width)

        if isinstance(beam_width, int):
            tokens, scores, steps = greedy() if beam_width == 1 else beam()
        else:
            tokens, scores, steps = tf.cond(tf.equal(width, 1), greedy, beam)
        return {"tokens": tokens[:batch, :steps], "scores": scores[:batch]}


def _next_power_of_two(n):
    """The smallest power of two `>= n`, for a scalar int32 tensor `n` (1 for 0)."""
    powers = tf.constant([2**i for i in range(31)], tf.int32)
    return tf.gather(powers, tf.searchsorted(powers, tf.reshape(n, [1]))[0])
