"""Attention masks: padding, causal, and their combination; the masked softmax.

Every mask in keras_attn is boolean with `True` meaning "may attend" (the
convention of `keras.layers.MultiHeadAttention`). Masks are shaped
`(B, Tq, Tk)` (or broadcastable to it) before the head axis is added.
"""

from keras import backend, ops


def causal_mask(query_length, key_length=None, query_start=0):
    """Lower-triangular `(1, Tq, Tk)` mask: query `i` may see keys `<= i`.

    Args:
        query_length: int or scalar int tensor. Tq, the number of queries.
        key_length: int or scalar int tensor. Tk, the number of keys; `query_length`
            when not given. Defaults to None.
        query_start: int or scalar int tensor. Absolute position of the first query.
            In cached decoding the queries are the newest `Tq` positions of a cache
            of `Tk` keys, so query `i` sits at position `query_start + i`.
            Defaults to 0.

    Returns:
        A bool tensor of shape `(1, Tq, Tk)`, `True` where query `i` may see the key.
    """
    key_length = query_length if key_length is None else key_length
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_start, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    mask = ops.greater_equal(query_positions[:, None], key_positions[None, :])
    return mask[None, :, :]


def merge_masks(*masks):
    """Logical AND of the masks that are not `None`.

    Args:
        *masks: tensors or None. Masks broadcastable to one another, cast to bool;
            None entries are skipped.

    Returns:
        A bool tensor of their broadcast shape, or None if all masks are None.
    """
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def attention_mask(query_mask=None, key_mask=None, causal=None):
    """Combines `(B, Tq)`/`(B, Tk)` padding masks and a causal mask.

    Args:
        query_mask: bool tensor of shape `(B, Tq)`. `True` for real queries.
            Defaults to None.
        key_mask: bool tensor of shape `(B, Tk)`. `True` for real keys.
            Defaults to None.
        causal: bool tensor broadcastable to `(B, Tq, Tk)`, e.g. from `causal_mask`.
            Defaults to None.

    Returns:
        A bool tensor broadcastable to `(B, Tq, Tk)`, or None if all three are None.
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
        scores: tensor. Attention logits.
        mask: bool tensor broadcastable to `scores`, `True` = keep. None keeps every
            position. Defaults to None.
        axis: int. The axis the weights sum to 1 over. Defaults to -1.

    Returns:
        A tensor of the shape and dtype of `scores`: the attention weights.
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
