import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from benchmarks.measures import uncached_greedy_search
from keras_attn.decoding import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Stepper,
    beam_search,
    gnmt_length_penalty,
    greedy_search,
    max_decode_length,
    search,
)
from keras_attn.models import Seq2SeqBackbone, TransformerBackbone

SIGNATURE = [tf.TensorSpec([None, None], tf.int32)]  # as in an exported model

# ---------------------------------------------------------------------------
# A toy decoder with known probabilities: the next token depends only on the
# prefix, through a table per prefix (a trie).

A, B, C, D = 4, 5, 6, 7


class TrieStepper:
    """A stepper whose next-token distribution is a table per prefix.

    `tree` maps prefixes (tuples of tokens after [BOS]) to `{token:
    probability}`; unlisted tokens have probability 0 and every prefix
    not in `tree` is followed by [EOS] for sure.
    """

    def __init__(self, tree, vocab_size=8):
        self.nodes = {prefix: i for i, prefix in enumerate(tree)}
        leaf = len(tree)  # any prefix not in the tree
        probs = np.zeros((leaf + 1, vocab_size))
        probs[leaf, EOS_ID] = 1.0
        children = np.full((leaf + 1, vocab_size), leaf)
        for prefix, table in tree.items():
            for token, p in table.items():
                probs[self.nodes[prefix], token] = p
                children[self.nodes[prefix], token] = self.nodes.get(prefix + (token,), leaf)
        with np.errstate(divide="ignore"):
            self.log_probs = tf.constant(np.log(probs), tf.float32)
        self.children = tf.constant(children, tf.int32)
        self.root = self.nodes[()]

    def initial_state(self, source, beam_width=1):
        return {"node": tf.fill([tf.shape(source)[0] * beam_width], self.root)}

    def step(self, token_ids, state, index, return_attention_scores=False):
        children = tf.gather(self.children, state["node"])
        child = tf.gather(children, token_ids, batch_dims=1)
        node = tf.where(index > 0, child, state["node"])  # [BOS] leads to the root
        return tf.gather(self.log_probs, node), {"node": node}


def log_prob(*probabilities):
    return float(np.sum(np.log(probabilities)))


# Greedy takes A (0.6) but every continuation of A is poor; B then [EOS]
# (0.4 · 0.9 = 0.36) beats A C [EOS] (0.6 · 0.34 = 0.204).
GREEDY_TRAP = {
    (): {A: 0.6, B: 0.4},
    (A,): {C: 0.34, D: 0.33, EOS_ID: 0.33},
    (B,): {EOS_ID: 0.9, C: 0.1},
}

# A [EOS] (log-prob -1.0) finishes two steps before B C D [EOS] (-1.15): it
# wins without a length penalty and loses with α = 1, where
# -1.0 / lp(2) = -0.857 < -1.15 / lp(4) = -0.767. B C (-1.05) cannot beat
# A [EOS] once the latter finishes if α = 0, but can if α = 1, although
# -1.05 / lp(2) = -0.9 is below -0.857 now: the bound must use lp(max_length).
SHORT_OR_LONG = {
    (): {A: 0.5, B: 0.45, C: 0.05},
    (A,): {EOS_ID: math.exp(-1.0) / 0.5, D: 1 - math.exp(-1.0) / 0.5},
    (B,): {C: math.exp(-1.05) / 0.45, D: 1 - math.exp(-1.05) / 0.45},
    (B, C): {D: math.exp(-0.05), EOS_ID: 1 - math.exp(-0.05)},
    (B, C, D): {EOS_ID: math.exp(-0.05), C: 1 - math.exp(-0.05)},
}
SHORT = [A, EOS_ID]
LONG = [B, C, D, EOS_ID]

# A [EOS] (-2.0) finishes at step 2 while both extensions of B C, B C A
# (-0.72) and B C B (-1.13), score higher; every continuation of those then
# ends below -2.0 (six equally likely tokens, then [EOS]).
OUTSCORED_WHEN_FINISHED = {
    (): {A: 0.15, B: 0.85},
    (A,): {EOS_ID: math.exp(-2.0) / 0.15, C: 1 - math.exp(-2.0) / 0.15},
    (B,): {C: 0.95, D: 0.05},
    (B, C): {A: 0.6, B: 0.4},
    (B, C, A): {token: 1 / 6 for token in (1, 2, 4, 5, 6, 7)},
    (B, C, B): {token: 1 / 6 for token in (1, 2, 4, 5, 6, 7)},
}

ONE_SOURCE = np.array([[9, 9, 3]], "int32")  # ignored by the toy stepper


def test_toy_probabilities_are_as_designed():
    stepper = TrieStepper(SHORT_OR_LONG)
    assert np.isclose(score_of(stepper, SHORT), -1.0, atol=1e-6)
    assert np.isclose(score_of(stepper, LONG), -1.15, atol=1e-6)


def score_of(stepper, tokens):
    """The stepper's log-probability of `tokens`, fed one at a time."""
    state = stepper.initial_state(ONE_SOURCE)
    total, previous = 0.0, 2
    for index, token in enumerate(tokens):
        logits, state = stepper.step(tf.constant([previous]), state, tf.constant(index))
        total += float(tf.nn.log_softmax(logits)[0, token])
        previous = token
    return total


def test_beam_search_finds_what_greedy_misses():
    stepper = TrieStepper(GREEDY_TRAP)
    greedy = greedy_search(stepper, ONE_SOURCE, max_length=6)
    np.testing.assert_array_equal(greedy["tokens"], [[A, C, EOS_ID]])
    np.testing.assert_allclose(greedy["scores"], [log_prob(0.6, 0.34, 1.0)], atol=1e-6)
    beam = beam_search(stepper, ONE_SOURCE, max_length=6, beam_width=2, length_penalty=0.0)
    # Two steps only: then A C (-1.59) could no longer beat B [EOS] (-1.02).
    np.testing.assert_array_equal(beam["tokens"], [[B, EOS_ID]])
    np.testing.assert_allclose(beam["scores"], [log_prob(0.4, 0.9)], atol=1e-6)
    np.testing.assert_array_equal(beam["lengths"], [2])


@pytest.mark.parametrize(
    "alpha, best, other",
    [(0.0, SHORT, LONG[:2]), (1.0, LONG, SHORT + [PAD_ID, PAD_ID])],
)
def test_finished_hypotheses_are_frozen_and_ranked_with_length_penalty(alpha, best, other):
    stepper = TrieStepper(SHORT_OR_LONG)
    out = beam_search(
        stepper,
        ONE_SOURCE,
        max_length=8,
        beam_width=2,
        length_penalty=alpha,
        return_all_beams=True,
    )
    np.testing.assert_array_equal(out["tokens"][0, : len(best)], best)
    np.testing.assert_array_equal(out["beam_tokens"][0, 1], other)
    # The short hypothesis kept its log-probability after it finished.
    short = 0 if alpha == 0.0 else 1
    np.testing.assert_allclose(out["beam_log_probs"][0, short], -1.0, atol=1e-5)
    np.testing.assert_array_equal(out["beam_lengths"][0, short], 2)
    np.testing.assert_allclose(
        out["beam_scores"][0, short], -1.0 / ((5 + 2) / 6) ** alpha, atol=1e-5
    )
    if alpha == 0.0:
        # B C cannot end above -1.0: stopped early, ranked after A [EOS].
        np.testing.assert_allclose(out["beam_log_probs"][0, 1], -1.05, atol=1e-5)
    else:
        np.testing.assert_allclose(out["scores"], [-1.15 / 1.5], atol=1e-5)
    # Greedy stops at A [EOS], the same either way.
    greedy = greedy_search(stepper, ONE_SOURCE, max_length=8)
    np.testing.assert_array_equal(greedy["tokens"], [SHORT])


def test_a_finished_hypothesis_keeps_its_place():
    stepper = TrieStepper(OUTSCORED_WHEN_FINISHED)
    out = beam_search(stepper, ONE_SOURCE, max_length=8, beam_width=2, length_penalty=0.0)
    np.testing.assert_array_equal(out["tokens"], [SHORT + [PAD_ID, PAD_ID]])
    np.testing.assert_allclose(out["log_probs"], [-2.0], atol=1e-5)


def test_a_finished_hypothesis_beats_one_cut_off_by_max_length():
    stepper = TrieStepper(
        {(): {A: 0.5, B: 0.5}, (A,): {EOS_ID: 0.5, C: 0.5}, (B,): {C: 0.9, D: 0.1}}
    )
    out = beam_search(
        stepper,
        ONE_SOURCE,
        max_length=2,
        beam_width=2,
        length_penalty=0.0,
        return_all_beams=True,
    )
    np.testing.assert_array_equal(out["beam_tokens"], [[SHORT, [B, C]]])
    np.testing.assert_allclose(
        out["beam_log_probs"], [[log_prob(0.5, 0.5), log_prob(0.5, 0.9)]], atol=1e-6
    )


def test_early_stopping_when_every_sequence_has_ended():
    stepper = TrieStepper(GREEDY_TRAP)
    source = np.zeros((3, 4), "int32")
    greedy = greedy_search(stepper, source, max_length=10)
    assert greedy["tokens"].shape == (3, 3)
    np.testing.assert_array_equal(greedy["lengths"], [3, 3, 3])
    beam = beam_search(stepper, source, max_length=10, beam_width=3)
    assert beam["tokens"].shape[1] < 10
    np.testing.assert_array_equal(beam["lengths"], [2, 2, 2])


def test_padding_is_never_emitted():
    stepper = TrieStepper({(): {PAD_ID: 0.5, A: 0.3, B: 0.2}})
    greedy = greedy_search(stepper, ONE_SOURCE, max_length=4)
    np.testing.assert_array_equal(greedy["tokens"], [[A, EOS_ID]])
    np.testing.assert_allclose(greedy["scores"], [math.log(0.3)], atol=1e-6)
    beam = beam_search(stepper, ONE_SOURCE, max_length=4, beam_width=2)
    np.testing.assert_array_equal(beam["tokens"], [[A, EOS_ID]])


@pytest.mark.slow
def test_max_length_as_a_tensor_input_zero_included():
    stepper = TrieStepper(GREEDY_TRAP)
    length = tf.TensorSpec([], tf.int32)
    greedy = tf.function(
        lambda source, n: greedy_search(stepper, source, n),
        input_signature=SIGNATURE + [length],
    )
    beam = tf.function(
        lambda source, n: beam_search(stepper, source, n, beam_width=2),
        input_signature=SIGNATURE + [length],
    )
    for n, expected in ((0, []), (1, [A]), (2, [A, C]), (5, [A, C, EOS_ID])):
        np.testing.assert_array_equal(greedy(ONE_SOURCE, n)["tokens"], [expected])
    assert beam(ONE_SOURCE, 0)["tokens"].shape == (1, 0)
    np.testing.assert_array_equal(beam(ONE_SOURCE, 5)["tokens"], [[B, EOS_ID]])


def test_pad_and_bos_are_never_emitted():
    stepper = TrieStepper({(): {BOS_ID: 0.6, PAD_ID: 0.3, A: 0.1}})
    np.testing.assert_array_equal(
        greedy_search(stepper, ONE_SOURCE, max_length=4)["tokens"], [[A, EOS_ID]]
    )
    beam = beam_search(stepper, ONE_SOURCE, max_length=4, beam_width=3)
    np.testing.assert_array_equal(beam["tokens"], [[A, EOS_ID]])


def test_beam_width_larger_than_the_choices():
    # Only two tokens follow [BOS]: the other beams stay empty (-inf).
    stepper = TrieStepper(GREEDY_TRAP)
    out = beam_search(
        stepper, ONE_SOURCE, max_length=6, beam_width=6, length_penalty=0.0, return_all_beams=True
    )
    np.testing.assert_array_equal(out["tokens"], [[B, EOS_ID]])
    finite = np.isfinite(out["beam_scores"][0])
    np.testing.assert_array_equal(finite, [True] * 5 + [False])
    np.testing.assert_allclose(
        np.sort(out["beam_log_probs"][0, :5])[::-1],
        [
            log_prob(0.4, 0.9),
            log_prob(0.6, 0.34),
            log_prob(0.6, 0.33),
            log_prob(0.6, 0.33),
            log_prob(0.4, 0.1),
        ],
        atol=1e-5,
    )


# ---------------------------------------------------------------------------
# A randomly initialised Transformer.

SOURCE = np.array(
    [
        [5, 6, 7, 8, 9, 10, 3],
        [11, 12, 3, 0, 0, 0, 0],
        [13, 14, 15, 16, 3, 0, 0],
        [17, 18, 19, 20, 21, 3, 0],
    ],
    "int32",
)
MAX_LENGTH = 12


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    # An untied output projection: a random tied model just repeats its input.
    return TransformerBackbone(
        40,
        40,
        max_sequence_length=32,
        num_layers=2,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        tie_output=False,
    )


@pytest.fixture(scope="module")
def stepper(model):
    return Stepper(model)


@pytest.fixture(scope="module")
def eos_id(stepper):
    """A token the model emits mid-way in some rows: they end there."""
    tokens = np.asarray(greedy_search(stepper, SOURCE, MAX_LENGTH, eos_id=-1)["tokens"])
    for token in np.unique(tokens[:, 2:-2]):
        rows_ending = [token in row[: MAX_LENGTH - 1] for row in tokens]
        if 0 < sum(rows_ending) < len(tokens):
            return int(token)
    pytest.fail(f"no token ends some rows but not all: {tokens}")


def test_stepper_steps_give_the_full_model_logits(model, stepper):
    """Cached steps equal the full pass; the source side passes through as is."""
    state = stepper.initial_state(SOURCE)
    for layer in range(2):  # (B, h, L, d/h): no step yet, or the source
        for name in ("key", "value"):
            assert state["cache"][layer][name].shape == (4, 4, 0, 8)
            assert state["encoded"]["memory"][layer][name].shape == (4, 4, SOURCE.shape[1], 8)
    tokens = np.random.default_rng(0).integers(4, 40, size=(4, MAX_LENGTH - 1))
    target_in = np.concatenate([np.full((4, 1), 2), tokens], axis=1).astype("int32")
    full = np.asarray(model({"source": SOURCE, "target_in": target_in}))
    for index in range(MAX_LENGTH):
        logits, new_state = stepper.step(
            tf.constant(target_in[:, index]), state, tf.constant(index)
        )
        np.testing.assert_allclose(logits, full[:, index], atol=1e-4)
        # Beam search reorders only the tensors a step changed.
        for new, old in zip(
            tf.nest.flatten(new_state["encoded"]), tf.nest.flatten(state["encoded"])
        ):
            assert new is old
        for new in tf.nest.flatten(new_state["cache"]):
            assert new.shape == (4, 4, index + 1, 8)  # one more step
        state = new_state


@pytest.mark.slow
def test_cached_greedy_equals_uncached_greedy(model, stepper, eos_id):
    cached = greedy_search(stepper, SOURCE, MAX_LENGTH, eos_id=eos_id)
    uncached = uncached_greedy_search(model, SOURCE, MAX_LENGTH, eos_id=eos_id)
    np.testing.assert_array_equal(cached["tokens"], uncached["tokens"])
    np.testing.assert_array_equal(cached["lengths"], uncached["lengths"])
    np.testing.assert_allclose(cached["scores"], uncached["scores"], rtol=1e-5)
    lengths = np.asarray(cached["lengths"])
    assert lengths.min() < MAX_LENGTH == lengths.max()  # some rows ended
    tokens = np.asarray(cached["tokens"])
    for row, length in zip(tokens, lengths):
        if length < MAX_LENGTH:
            assert row[length - 1] == eos_id and np.all(row[length:] == PAD_ID)
        assert eos_id not in row[: length - 1] and PAD_ID not in row[:length]


def test_greedy_stops_when_every_row_has_ended(stepper):
    tokens = np.asarray(greedy_search(stepper, SOURCE, MAX_LENGTH, eos_id=-1)["tokens"])
    # The earliest position by which some token has appeared in every row.
    first = {}
    for token in np.unique(tokens):
        where = [np.flatnonzero(row == token) for row in tokens]
        if all(len(w) for w in where):
            first[token] = max(w[0] for w in where) + 1
    eos_id = min(first, key=first.get)
    out = greedy_search(stepper, SOURCE, MAX_LENGTH, eos_id=int(eos_id))
    assert first[eos_id] < MAX_LENGTH
    assert out["tokens"].shape == (4, first[eos_id])
    assert np.asarray(out["lengths"]).max() == first[eos_id]


def test_beam_width_one_is_greedy(stepper, eos_id):
    greedy = greedy_search(stepper, SOURCE, MAX_LENGTH, eos_id=eos_id)
    beam = beam_search(stepper, SOURCE, MAX_LENGTH, beam_width=1, length_penalty=0.6, eos_id=eos_id)
    np.testing.assert_array_equal(beam["tokens"], greedy["tokens"])
    np.testing.assert_array_equal(beam["lengths"], greedy["lengths"])
    np.testing.assert_allclose(beam["log_probs"], greedy["scores"], rtol=1e-6)
    np.testing.assert_allclose(
        beam["scores"],
        greedy["scores"] / gnmt_length_penalty(greedy["lengths"], 0.6),
        rtol=1e-6,
    )


def test_beam_scores_are_the_model_log_probs(model, stepper, eos_id):
    """Rescoring every beam with the full model checks the state reordering."""
    out = beam_search(
        stepper, SOURCE, MAX_LENGTH, beam_width=3, eos_id=eos_id, return_all_beams=True
    )
    tokens = np.asarray(out["beam_tokens"]).reshape(12, -1)
    lengths = np.asarray(out["beam_lengths"]).reshape(12)
    target_in = np.concatenate([np.full((12, 1), 2), tokens[:, :-1]], 1)
    logits = model({"source": np.repeat(SOURCE, 3, 0), "target_in": target_in})
    token_log_probs = np.take_along_axis(
        np.asarray(tf.nn.log_softmax(logits)), tokens[..., None], -1
    )[..., 0]
    positions = np.arange(tokens.shape[1]) < lengths[:, None]
    expected = np.where(positions, token_log_probs, 0.0).sum(1).reshape(4, 3)
    np.testing.assert_allclose(out["beam_log_probs"], expected, rtol=1e-4)
    for beams in tokens.reshape(4, 3, -1):  # no duplicate hypotheses
        assert len({tuple(row) for row in beams}) == 3


@pytest.mark.slow
def test_searches_in_tf_function_with_a_tensor_beam_width_and_in_a_saved_model_signature(
    stepper, eos_id, tmp_path
):
    greedy = tf.function(
        lambda source: greedy_search(stepper, source, MAX_LENGTH, eos_id=eos_id),
        input_signature=SIGNATURE,
    )
    beam = tf.function(
        lambda source, width: beam_search(
            stepper,
            source,
            max_decode_length(source, cap=MAX_LENGTH),
            beam_width=width,
            eos_id=eos_id,
        ),
        input_signature=SIGNATURE + [tf.TensorSpec([], tf.int32)],
    )
    eager_greedy = greedy_search(stepper, SOURCE, MAX_LENGTH, eos_id=eos_id)
    np.testing.assert_array_equal(greedy(SOURCE)["tokens"], eager_greedy["tokens"])
    for width in (1, 3):
        eager = beam_search(stepper, SOURCE, MAX_LENGTH, beam_width=width, eos_id=eos_id)
        graph = beam(SOURCE, tf.constant(width))
        np.testing.assert_array_equal(graph["tokens"], eager["tokens"])
        np.testing.assert_allclose(graph["scores"], eager["scores"], rtol=1e-5)
    # One source of another length, through the same traced graph.
    single = beam(SOURCE[1:2, :3], tf.constant(3))
    np.testing.assert_array_equal(
        single["tokens"],
        beam_search(stepper, SOURCE[1:2, :3], MAX_LENGTH, 3, eos_id=eos_id)["tokens"],
    )
    # The traced beam search as a SavedModel's signature, reloaded: the same outputs.
    module = tf.Module()
    module.model = stepper.backbone  # its variables
    tf.saved_model.save(module, str(tmp_path), signatures={"translate": beam})
    translate = tf.saved_model.load(str(tmp_path)).signatures["translate"]
    out = translate(source=tf.constant(SOURCE), width=tf.constant(3))
    np.testing.assert_array_equal(out["tokens"], eager["tokens"])
    np.testing.assert_allclose(out["scores"], eager["scores"], rtol=1e-5)


def test_attention_weights(stepper, eos_id):
    search = tf.function(
        lambda source: greedy_search(
            stepper, source, MAX_LENGTH, eos_id=eos_id, return_attention=True
        ),
        input_signature=SIGNATURE,
    )
    out = search(SOURCE)
    steps = out["tokens"].shape[1]
    assert out["attention"].shape == (4, steps, 2, 4, SOURCE.shape[1])
    attention = np.asarray(out["attention"])
    emitted = np.arange(steps) < np.asarray(out["lengths"])[:, None]  # (B, L)
    sums = attention.sum(-1)
    np.testing.assert_allclose(sums[emitted], 1.0, atol=1e-5)
    np.testing.assert_array_equal(sums[~emitted], 0.0)
    padding = SOURCE == 0
    assert np.all(attention.transpose(0, 4, 1, 2, 3)[padding] == 0.0)


def test_max_decode_length_is_per_source():
    # The sources have 7, 3, 5 and 6 tokens ([EOS] included).
    lengths = np.array([7, 3, 5, 6])
    np.testing.assert_array_equal(max_decode_length(SOURCE), np.ceil(1.5 * lengths) + 10)
    np.testing.assert_array_equal(
        max_decode_length(SOURCE, ratio=1.2, extra=0), np.ceil(1.2 * lengths)
    )
    np.testing.assert_array_equal(max_decode_length(SOURCE, cap=17), [17, 15, 17, 17])
    np.testing.assert_array_equal(max_decode_length(np.zeros((2, 5), "int32")), [10, 10])
    traced = tf.function(max_decode_length, input_signature=SIGNATURE)
    assert traced(SOURCE).dtype == tf.int32
    np.testing.assert_array_equal(traced(SOURCE), max_decode_length(SOURCE))
    assert traced(np.zeros((0, 3), "int32")).shape == (0,)


def test_length_penalty():
    np.testing.assert_allclose(gnmt_length_penalty(1, 0.6), 1.0)
    np.testing.assert_allclose(gnmt_length_penalty(7, 0.6), 2.0**0.6, rtol=1e-6)
    np.testing.assert_allclose(gnmt_length_penalty([3, 13], 0.0), [1.0, 1.0])


# ---------------------------------------------------------------------------
# Beam search against exhaustive search, on random tries.

TOKENS = (EOS_ID, 4, 5, 6, 7)  # what may follow a prefix
DEPTH = 4  # prefixes of up to 4 tokens; after that, [EOS] for sure


class RandomTries:
    """One random trie per source: `source[:, 0]` says which.

    Every prefix of up to `DEPTH` tokens from 4..7 has a random distribution
    over `TOKENS`; the stepper's state is the node of the prefix so far.
    """

    def __init__(self, count, seed):
        rng = np.random.default_rng(seed)
        self.tables = []  # per source: prefix -> {token: probability}
        for _ in range(count):
            tree = {}
            frontier = [()]
            while frontier:
                prefix = frontier.pop()
                if len(prefix) == DEPTH:
                    tree[prefix] = {EOS_ID: 1.0}
                    continue
                probs = rng.dirichlet(np.full(len(TOKENS), 0.7))
                tree[prefix] = dict(zip(TOKENS, probs))
                frontier.extend(prefix + (t,) for t in TOKENS if t != EOS_ID)
            self.tables.append(tree)
        nodes = [(b, prefix) for b, tree in enumerate(self.tables) for prefix in tree]
        index = {node: i for i, node in enumerate(nodes)}
        dead = len(nodes)  # after [EOS]: only [EOS] again
        log_probs = np.full((dead + 1, 8), -np.inf)
        log_probs[dead, EOS_ID] = 0.0
        children = np.full((dead + 1, 8), dead)
        for (b, prefix), i in index.items():
            for token, p in self.tables[b][prefix].items():
                log_probs[i, token] = np.log(p)
                children[i, token] = index.get((b, prefix + (token,)), dead)
        self.log_probs = tf.constant(log_probs, tf.float32)
        self.children = tf.constant(children, tf.int32)
        self.roots = tf.constant([index[(b, ())] for b in range(count)], tf.int32)

    def initial_state(self, source, beam_width=1):
        roots = tf.gather(self.roots, source[:, 0])
        return {"node": tf.repeat(roots, beam_width)}

    def step(self, token_ids, state, index, return_attention_scores=False):
        child = tf.gather(tf.gather(self.children, state["node"]), token_ids, batch_dims=1)
        node = tf.where(index > 0, child, state["node"])
        return tf.gather(self.log_probs, node), {"node": node}

    def exhaustive(self, b, max_length, alpha):
        """Every finished hypothesis of source `b` within `max_length`, best first."""
        found = []

        def visit(prefix, log_prob):
            for token, p in self.tables[b][prefix].items():
                sequence = prefix + (token,)
                if len(sequence) > max_length:
                    continue
                if token == EOS_ID:
                    score = (log_prob + np.log(p)) / ((5 + len(sequence)) / 6) ** alpha
                    found.append((score, sequence))
                else:
                    visit(sequence, log_prob + np.log(p))

        visit((), 0.0)
        return sorted(found, reverse=True)


COUNT = 16  # sources, each with its own trie


@pytest.mark.parametrize("alpha", [0.0, 0.6, 3.0])  # 3: long hypotheses win late
@pytest.mark.parametrize("max_length", [3, DEPTH + 1])
def test_beam_search_equals_exhaustive_search(alpha, max_length):
    tries = RandomTries(count=COUNT, seed=0)
    source = np.array([[b, 9, 3] for b in range(COUNT)], "int32")
    # Wide enough to keep every prefix: 4^4 alive at depth 4, plus all finished.
    width = sum(4**d for d in range(DEPTH + 1)) + 4**DEPTH
    out = beam_search(
        tries, source, max_length, beam_width=width, length_penalty=alpha, return_all_beams=True
    )
    for b in range(COUNT):
        best_score, best = tries.exhaustive(b, max_length, alpha)[0]
        length = len(best)
        np.testing.assert_array_equal(out["tokens"][b, :length], best)
        assert np.all(np.asarray(out["tokens"][b, length:]) == PAD_ID)
        np.testing.assert_allclose(out["scores"][b], best_score, rtol=1e-5)
        assert out["lengths"][b] == length


def test_beam_search_equals_exhaustive_search_with_row_budgets():
    tries = RandomTries(count=3, seed=11)
    source = np.array([[b, 9, 3] for b in range(3)], "int32")
    budgets = tf.constant([2, 5, 3])
    out = beam_search(tries, source, budgets, beam_width=400, length_penalty=0.6)
    greedy = greedy_search(tries, source, budgets)
    for b, budget in enumerate(budgets.numpy()):
        best_score, best = tries.exhaustive(b, budget, 0.6)[0]
        np.testing.assert_array_equal(out["tokens"][b, : len(best)], best)
        np.testing.assert_allclose(out["scores"][b], best_score, rtol=1e-5)
        assert greedy["lengths"][b] <= budget


@pytest.mark.parametrize("vocab", [3000, 8001])
@pytest.mark.parametrize("k", [1, 4, 7])
def test_block_top_k_equals_tf_top_k(vocab, k):
    from keras_attn.decoding import blockwise_top_k

    rng = np.random.default_rng(vocab + k)
    rows = rng.normal(size=(6, vocab)).astype("float32")
    rows[1] = np.round(rows[1])  # a few values, many ties
    rows[2] = 0.5  # all tied
    rows[3, rng.random(vocab) < 0.9] = -np.inf  # mostly -inf
    rows[4] = -np.inf  # all -inf
    rows[5, : vocab - 3] = -np.inf  # fewer finite values than k
    values, indices = blockwise_top_k(tf.constant(rows), k)
    expected_values, expected_indices = tf.math.top_k(rows, k)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


# ---------------------------------------------------------------------------
# Cached decoding in every model configuration; padding and batch invariance.

CONFIGS = {
    "tied output": dict(),
    "pre-norm": dict(norm_first=True, tie_output=False),
    "shared embeddings": dict(share_embeddings=True),
}


def _teacher_forced(model, stepper, steps=8, **preallocated):
    """The full pass's logits and the cached steps'; `preallocated`: `initial_state`'s `beam_width`
    and `cache_length` for caches of a fixed length."""
    rng = np.random.default_rng(1)
    target_in = np.concatenate(
        [np.full((4, 1), BOS_ID), rng.integers(4, 40, size=(4, steps - 1))], axis=1
    ).astype("int32")
    full = np.asarray(model({"source": SOURCE, "target_in": target_in}), "float32")
    state = stepper.initial_state(SOURCE, **preallocated)
    cached = []
    for index in range(steps):
        logits, state = stepper.step(
            tf.constant(target_in[:, index]),
            state,
            tf.constant(index),
            preallocated=bool(preallocated),
        )
        cached.append(np.asarray(logits, "float32"))
    return full, np.stack(cached, axis=1)


def _small_transformer(**options):
    keras.utils.set_random_seed(3)
    return TransformerBackbone(
        40,
        40,
        max_sequence_length=32,
        num_layers=2,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        **options,
    )


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_cached_steps_equal_the_teacher_forced_pass(config):
    model = _small_transformer(**CONFIGS[config])
    full, cached = _teacher_forced(model, Stepper(model))
    np.testing.assert_allclose(cached, full, atol=1e-4)


PREALLOCATED_CONFIGS = {  # and Marian's (an imported OPUS-MT model): tied, with an output bias
    **CONFIGS,
    "marian": dict(
        share_embeddings=True, output_bias=True, position="sinusoidal_halves", activation="silu"
    ),
}


@pytest.mark.parametrize("config", sorted(PREALLOCATED_CONFIGS))
# a tensor: as for a beam, the output table transposed
@pytest.mark.parametrize("beam_width", [1, tf.constant(1)])
def test_preallocated_cached_steps_equal_the_teacher_forced_pass(config, beam_width):
    model = _small_transformer(**PREALLOCATED_CONFIGS[config])
    stepper = Stepper(model)
    assert stepper.preallocates and not Stepper(Seq2SeqBackbone(40, 40, hidden_dim=8)).preallocates
    full, cached = _teacher_forced(model, stepper, beam_width=beam_width, cache_length=11)
    np.testing.assert_allclose(cached, full, atol=1e-4)


@pytest.mark.slow
def test_cached_steps_under_mixed_bfloat16():
    """bfloat16 steps equal the bfloat16 full pass, and float32 within 0.1 (logits of size ~3)."""
    model = _small_transformer(tie_output=False)
    reference, _ = _teacher_forced(model, Stepper(model))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    half = _small_transformer(tie_output=False)
    keras.mixed_precision.set_global_policy("float32")
    half.set_weights(model.get_weights())
    full, cached = _teacher_forced(half, Stepper(half))
    assert half.decoder_blocks[0].compute_dtype == "bfloat16"
    np.testing.assert_allclose(cached, full, atol=0.1)
    np.testing.assert_allclose(full, reference, atol=0.1)
    assert np.abs(full - reference).mean() < 0.02
    # The largest logit (what greedy search picks) agrees almost everywhere.
    assert np.mean(full.argmax(-1) == reference.argmax(-1)) >= 0.9
    # A search in bfloat16: an untrained model has near-ties, where bfloat16
    # may pick the other token and go on from there, so its path is not
    # compared with float32's; its score is. The float32 model rescores the
    # bfloat16 search's tokens (teacher-forced) to the search's score.
    ours = greedy_search(Stepper(half), SOURCE, MAX_LENGTH, eos_id=-1)
    tokens = np.asarray(ours["tokens"])
    target_in = np.concatenate([np.full((len(tokens), 1), BOS_ID), tokens[:, :-1]], axis=1)
    logits = np.asarray(model({"source": SOURCE, "target_in": target_in}), "float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    rescored = np.take_along_axis(log_probs, tokens[..., None], axis=-1).sum(axis=(1, 2))
    np.testing.assert_allclose(ours["scores"], rescored, rtol=0.01)  # measured: 0.22% at most


def test_extra_padding_columns_leave_the_logits_unchanged(model):
    target_in = np.array([[BOS_ID, 5, 6, 7]] * 4, "int32")
    logits = model({"source": SOURCE, "target_in": target_in})
    padded = np.pad(SOURCE, [(0, 0), (0, 5)])
    padded_target = np.pad(target_in, [(0, 0), (0, 3)])
    padded_logits = model({"source": padded, "target_in": padded_target})
    np.testing.assert_allclose(padded_logits[:, :4], logits, atol=1e-5)


@pytest.mark.slow
def test_search_gives_beam_searchs_outputs_and_scores_the_greedy_way_for_width_one(stepper, eos_id):
    """`search`: greedy search for width 1 (a Python int or a tensor), with beam search's
    length-normalized scores; one traced graph for every width."""
    in_graph = tf.function(lambda source, w: search(stepper, source, MAX_LENGTH, w, 0.6, eos_id))
    for width in (1, 3):
        beam = beam_search(
            stepper, SOURCE, MAX_LENGTH, beam_width=width, length_penalty=0.6, eos_id=eos_id
        )
        for found in (
            search(stepper, SOURCE, MAX_LENGTH, width, 0.6, eos_id),
            in_graph(SOURCE, tf.constant(width)),
        ):
            np.testing.assert_array_equal(found["tokens"], beam["tokens"])
            np.testing.assert_allclose(found["scores"], beam["scores"], rtol=1e-6)
    assert in_graph.experimental_get_tracing_count() == 1


NEVER = -1  # an end token never emitted: every row runs to its budget


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_sentence_translates_the_same_alone_and_in_a_batch(stepper, search):
    """Per-row step budgets: longer neighbours do not give a sentence more steps."""

    def run(source):
        budget = max_decode_length(source, ratio=1.0, extra=2)
        if search == "greedy":
            return greedy_search(stepper, source, budget, eos_id=NEVER)
        return beam_search(stepper, source, budget, beam_width=3, eos_id=NEVER)

    alone = run(SOURCE[1:2, :3])
    together = run(SOURCE)
    length = int(alone["lengths"][0])
    assert length == 5  # 3 source tokens + 2: cut at its own budget
    np.testing.assert_array_equal(together["tokens"][1, :length], alone["tokens"][0])
    assert int(together["lengths"][1]) == length
    assert np.all(np.asarray(together["tokens"][1, length:]) == PAD_ID)
    np.testing.assert_allclose(together["scores"][1], alone["scores"][0], rtol=1e-5)
