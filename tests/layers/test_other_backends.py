"""The layers written with `keras.ops` alone give the same outputs on the JAX backend.

Each layer runs here (TensorFlow) and in a subprocess with `KERAS_BACKEND=jax`,
rebuilt from its config with the same weights and inputs. The RNN layers and
blockwise attention need TensorFlow (`tf.while_loop`, a custom gradient) and
refuse other backends with one line.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_attn import layers

pytest.importorskip("jax")
pytestmark = pytest.mark.slow  # a second process and backend

WORKER = Path(__file__).with_name("backend_worker.py")
RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 7, 16)).astype("float32")
MEMORY_MASK = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
IDS = np.array([[4, 9, 6, 5, 0], [7, 8, 3, 0, 0]], "int32")
IMAGES = RNG.random((2, 16, 16, 3)).astype("float32")

REASONS = {
    "RNNEncoder": "its recurrence is a TensorFlow loop",
    "AttentionDecoder": "its time loop is a TensorFlow loop",
    "CaptionDecoder": "its time loop is a TensorFlow loop",
    "Memory-efficient attention": "its gradient is a TensorFlow custom gradient",
}
CASES = {
    "additive": (
        layers.AdditiveAttention(units=8),
        (X, MEMORY),
        dict(value_mask=MEMORY_MASK, return_attention_scores=True),
    ),
    "luong_general": (
        layers.DotProductAttention(score="general"),
        (X, MEMORY),
        dict(value_mask=MEMORY_MASK),
    ),
    "luong_concat": (
        layers.DotProductAttention(score="concat", units=8),
        (X, MEMORY),
        dict(value_mask=MEMORY_MASK),
    ),
    "multi_head_causal": (
        layers.MultiHeadAttention(num_heads=4, key_dim=4),
        (X, X),
        dict(use_causal_mask=True),
    ),
    "encoder_block": (
        layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=32, activation="gelu"),
        (X,),
        {},
    ),
    "decoder_block": (
        layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=32, norm_first=True),
        (X, MEMORY),
        dict(encoder_padding_mask=MEMORY_MASK),
    ),
    "token_and_position": (layers.TokenAndPositionEmbedding(20, 8, 16), (IDS,), {}),
    "bert_embedding": (layers.BertEmbedding(20, 8, 2, 16), (IDS, (IDS > 5).astype("int32")), {}),
    "sinusoidal": (layers.SinusoidalPositionEncoding(8), (X,), {}),
    "learned_positions": (layers.PositionEmbedding(8), (X,), {}),
    "add_and_norm": (layers.AddAndNorm(), (X, X * 2), {}),
    "feed_forward": (layers.FeedForward(32), (X,), {}),
    "masked_lm_head": (layers.MaskedLMHead(20), (X, np.array([[1, 3], [0, 2]], "int32")), {}),
    "next_sentence_head": (layers.NextSentenceHead(), (X[:, 0],), {}),
    "image_grid_encoder": (layers.ImageGridEncoder(filters=(4, 8), feature_dim=8), (IMAGES,), {}),
}


def test_keras_ops_layers_equal_on_jax_and_tensorflow(tmp_path):
    cases, expected = {}, {}
    for name, (layer, args, kwargs) in CASES.items():
        outputs = keras.tree.flatten(layer(*args, **kwargs))
        cases[name] = dict(
            config=keras.saving.serialize_keras_object(layer),
            weights=layer.get_weights(),
            args=args,
            kwargs=kwargs,
        )
        expected.update({f"{name}/{i}": np.asarray(value) for i, value in enumerate(outputs)})
    with open(tmp_path / "cases.pkl", "wb") as f:
        pickle.dump(cases, f)
    # JAX compiles each op it runs eagerly with XLA; unoptimized, it compiles them in half the time.
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_backend_optimization_level=0",
    )
    run = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path / "cases.pkl"), str(tmp_path / "out.npz")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as jax_outputs:
        assert str(jax_outputs["backend"]) == "jax"
        outputs = sorted(
            k for k in jax_outputs.files if k.split("/")[0] not in ("backend", "refused")
        )
        assert outputs == sorted(expected)
        for key, value in expected.items():
            np.testing.assert_allclose(jax_outputs[key], value, atol=2e-5, err_msg=key)
        for name in (
            "RNNEncoder",
            "AttentionDecoder",
            "CaptionDecoder",
            "Memory-efficient attention",
        ):
            key = "refused/" + ("memory_efficient" if name.startswith("Memory") else name)
            assert str(jax_outputs[key]) == (
                f"{name} runs on the TensorFlow backend only ({REASONS[name]}); KERAS_BACKEND is "
                "'jax'."
            )
