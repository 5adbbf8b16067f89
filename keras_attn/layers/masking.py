"""Attention masks: padding, causal, and their combination; the masked softmax.

Every mask in keras_attn is boolean with `True` meaning "may attend" (the
convention of `keras.layers.MultiHeadAttention`). Masks are shaped
`(B, Tq, Tk)` (or broadcastable to it) before the head axis is added.
"""

from keras import backend, ops


def causal_mask(query_length, key_length=None, query_start=0):
    """Lower-triangular `(1, Tq, Tk)` mask: query `i` may see keys `<= i`.

    Args:
        query_length: Tq, the number of queries.
        key_length: Tk, the number of keys (defaults to `query_length`).
        query_start: absolute position of the first query. In cached
            decoding the queries are the newest `Tq` positions of a cache of
            `Tk` keys, so query `i` sits at position `query_start + i`.
    """
    key_length = query_length if key_length is None else key_length
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_start, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    mask = ops.greater_equal(query_positions[:, None], key_positions[None, :])
    return mask[None, :, :]


def merge_masks(*masks):
    """Logical AND of the masks that are not `None` (or `None` if all are)."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def attention_mask(query_mask=None, key_mask=None, causal=None):
    """Combines `(B, Tq)`/`(B, Tk)` padding masks and a causal mask.

    Returns a boolean mask broadcastable to `(B, Tq, Tk)`, or `None`.
    """
    return merge_masks(
        None if query_mask is None else ops.expand_dims(query_mask, -1),
        None if key_mask is None else ops.expand_dims(key_mask, -2),
        causal,
    )


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax over `axis` that gives masked positions exactly zero weight.

    A row whose positions are all masked gets all-zero weights (never NaN,
    never the uniform distribution a plain `-inf`/`-1e9` fill would give).

    Args:
        scores: attention logits.
        mask: booleans broadcastable to `scores`, `True` = keep.
    """
    if scores.shape[axis] == 1:
        # A single key gets all the weight (ops.softmax warns about size 1).
        weights = ops.ones_like(scores)
    elif mask is None:
        weights = ops.softmax(scores, axis=axis)
    else:
        # The most negative finite value of the dtype: exp() of it is exactly
        # 0, and it is safe in bfloat16/float16 where -1e9 would overflow.
        lowest = ops.cast(_lowest(scores.dtype), scores.dtype)
        weights = ops.softmax(ops.where(mask, scores, lowest), axis=axis)
    if mask is None:
        return weights
    return ops.where(mask, weights, ops.zeros_like(weights))


_LOWEST = {
    "bfloat16": -3.38e38,
    "float16": -65504.0,
    "float32": -3.4028235e38,
    "float64": -1.7976931348623157e308,
}


def _lowest(dtype):
    return _LOWEST[backend.standardize_dtype(dtype)]
