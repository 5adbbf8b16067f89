"""The memory-efficient path equals the plain one: outputs and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.layers import MultiHeadAttention, masking
from keras_attn.layers.blockwise_attention import blockwise_attention, blockwise_dropout_keep

RNG = np.random.default_rng(0)
B, H, TQ, TK, D = 2, 2, 37, 45, 8
BLOCK = 16  # 45 keys: two full blocks and a partial one
Q = tf.constant(RNG.normal(size=(B, H, TQ, D)), tf.float32)
K = tf.constant(RNG.normal(size=(B, H, TK, D)), tf.float32)
V = tf.constant(RNG.normal(size=(B, H, TK, D + 3)), tf.float32)
KEY_MASK = np.arange(TK)[None] < np.array([[30], [TK]])
QUERY_MASK = np.arange(TQ)[None] < np.array([[TQ], [20]])
DENSE = RNG.random((B, TQ, TK)) < 0.7
DENSE[0, 3] = False  # a query that sees no key at all


def plain(q, k, v, mask, keep=None):
    scores = tf.matmul(q, k, transpose_b=True) / np.sqrt(D)
    weights = masking.masked_softmax(scores, None if mask is None else mask[:, None])
    if keep is not None:
        weights = weights * keep
    return tf.matmul(weights, v)


def full_keep(seed, rate):
    blocks = -(-TK // BLOCK)
    keep = [blockwise_dropout_keep(seed, j, [B, H, TQ, BLOCK], rate) for j in range(blocks)]
    return tf.concat(keep, axis=-1)[..., :TK]


CASES = {
    "no mask": (dict(), None),
    "key padding": (dict(key_mask=KEY_MASK), KEY_MASK[:, None, :]),
    "query and key padding": (
        dict(key_mask=KEY_MASK, query_mask=QUERY_MASK),
        KEY_MASK[:, None, :] & QUERY_MASK[:, :, None],
    ),
    "causal from position 5": (
        dict(causal=True, query_start=5, key_mask=KEY_MASK),
        (np.arange(TQ)[:, None] + 5 >= np.arange(TK)[None])[None] & KEY_MASK[:, None, :],
    ),
    "dense mask with an empty row": (dict(attention_mask=DENSE), DENSE),
}


COTANGENT = tf.constant(RNG.normal(size=(B, H, TQ, D + 3)), tf.float32)


def _outputs_and_gradients(fn, cotangent=COTANGENT):
    with tf.GradientTape() as tape:
        tape.watch([Q, K, V])
        output = fn(Q, K, V)
        loss = tf.reduce_sum(output * cotangent)
    return [output, *tape.gradient(loss, [Q, K, V])]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_equals_the_plain_path(case, dropout):
    kwargs, mask = CASES[case]
    seed = tf.constant([3, 4])
    keep = full_keep(seed, dropout) if dropout else None
    ours = _outputs_and_gradients(
        lambda q, k, v: blockwise_attention(
            q, k, v, block_size=BLOCK, dropout_rate=dropout, dropout_seed=seed, **kwargs
        )
    )
    reference = _outputs_and_gradients(lambda q, k, v: plain(q, k, v, mask, keep))
    for name, a, b in zip(("output", "dQ", "dK", "dV"), ours, reference):
        np.testing.assert_allclose(a, b, atol=2e-5, err_msg=name)
    if mask is not None:  # masked-out queries give exactly zero
        empty = ~np.broadcast_to(mask, (B, TQ, TK)).any(-1)
        assert np.all(np.asarray(ours[0]).transpose(0, 2, 1, 3)[empty] == 0)


def test_inside_a_compiled_function_with_dynamic_lengths():
    fn = tf.function(
        lambda q, k, v, m: blockwise_attention(q, k, v, key_mask=m, block_size=BLOCK),
        input_signature=[
            tf.TensorSpec([None, H, None, D]),
            tf.TensorSpec([None, H, None, D]),
            tf.TensorSpec([None, H, None, D + 3]),
            tf.TensorSpec([None, None], tf.bool),
        ],
        jit_compile=True,
    )
    np.testing.assert_allclose(
        fn(Q, K, V, KEY_MASK), plain(Q, K, V, KEY_MASK[:, None, :]), atol=2e-5
    )


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_uses_it_when_asked(causal):
    x = RNG.normal(size=(2, 40, 16)).astype("float32")
    keep = np.arange(40)[None] < np.array([[40], [25]])
    plain_layer = MultiHeadAttention(4, 4, memory_efficient=False)
    blockwise_layer = MultiHeadAttention(4, 4, memory_efficient=True, key_block_size=16)
    plain_layer(x, x)
    blockwise_layer(x, x)
    blockwise_layer.set_weights(plain_layer.get_weights())

    outputs = {}
    for name, layer in (("plain", plain_layer), ("blockwise", blockwise_layer)):
        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            out = layer(inputs, inputs, query_mask=keep, value_mask=keep, use_causal_mask=causal)
            loss = tf.reduce_sum(out**2)
        outputs[name] = [out, *tape.gradient(loss, [inputs, *layer.trainable_weights])]
    for a, b in zip(outputs["blockwise"], outputs["plain"]):
        np.testing.assert_allclose(a, b, atol=5e-5)


def test_auto_switches_above_the_threshold_and_not_for_scores():
    layer = MultiHeadAttention(2, 4, key_block_size=8)
    assert layer.memory_efficient == "auto"
    assert (
        layer._blockwise(key_length=MultiHeadAttention.BLOCKWISE_FROM - 1, scores=False, cache=None)
        is False
    )
    assert (
        layer._blockwise(key_length=MultiHeadAttention.BLOCKWISE_FROM, scores=False, cache=None)
        is True
    )
    assert layer._blockwise(key_length=None, scores=False, cache=None) is False
    assert layer._blockwise(key_length=10**5, scores=True, cache=None) is False
    forced = MultiHeadAttention(2, 4, memory_efficient=True)
    assert forced._blockwise(key_length=3, scores=False, cache=None) is True
