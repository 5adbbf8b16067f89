import numpy as np
import pytest
import tensorflow as tf

from keras_attn.losses import (
    MaskedSparseCrossEntropy,
    PretrainingLoss,
    token_cross_entropy,
    token_negative_log_likelihood,
)
from keras_attn.metrics import MaskedPerplexity, MaskedTokenAccuracy
from keras_attn.schedules import TransformerSchedule
from keras_attn.training import get_strategy

RNG = np.random.default_rng(0)
TARGETS = np.array([[5, 2, 7, 0, 0], [1, 3, 3, 3, 0]])
LOGITS = RNG.normal(size=(2, 5, 9)).astype("float32") * 3


def _numpy_loss(targets, logits, smoothing):
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    smoothed = np.full(logits.shape, smoothing / vocab)
    smoothed += (1 - smoothing) * np.eye(vocab)[targets]
    per_token = -(smoothed * log_p).sum(-1)
    mask = targets != 0
    return per_token[mask].mean()


@pytest.fixture(params=["fused op", "XLA"])
def smoothed_path(request, monkeypatch):
    """Each way the losses over the vocabulary are computed (by its size: `XLA_FROM_VOCABULARY`)."""
    from keras_attn import losses

    monkeypatch.setattr(losses, "XLA_FROM_VOCABULARY", 0 if request.param == "XLA" else 10**9)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_equals_numpy_reference(smoothing, smoothed_path):
    loss = MaskedSparseCrossEntropy(label_smoothing=smoothing)
    np.testing.assert_allclose(
        float(loss(TARGETS, LOGITS)), _numpy_loss(TARGETS, LOGITS, smoothing), rtol=1e-5
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_the_token_losss_gradient_is_p_minus_the_smoothed_target(smoothing, smoothed_path):
    logits = tf.constant(LOGITS)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        total = tf.reduce_sum(token_cross_entropy(TARGETS, logits, smoothing))
    p = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    q = smoothing / LOGITS.shape[-1] + (1 - smoothing) * np.eye(LOGITS.shape[-1])[TARGETS]
    np.testing.assert_allclose(tape.gradient(total, logits), p - q, atol=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_inside_an_xla_function_the_loss_compiles_with_it(smoothing, monkeypatch):
    """A nested XLA function with a gradient through it was compiled
    again at every call of the step.
    """
    from keras_attn import losses

    monkeypatch.setattr(losses, "XLA_FROM_VOCABULARY", 0)
    logits = tf.Variable(LOGITS)

    @tf.function(jit_compile=True)
    def gradient():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(token_cross_entropy(TARGETS, logits, smoothing))
        return tape.gradient(total, logits)

    operations = gradient.get_concrete_function().graph.get_operations()
    assert not [
        op.name for op in operations if op.type in ("PartitionedCall", "StatefulPartitionedCall")
    ]
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(token_cross_entropy(TARGETS, logits, smoothing))
    np.testing.assert_allclose(gradient(), tape.gradient(total, logits), atol=1e-6)


def test_padding_targets_do_not_count():
    loss = MaskedSparseCrossEntropy()
    changed = LOGITS.copy()
    changed[TARGETS == 0] += RNG.normal(size=changed[TARGETS == 0].shape) * 10
    np.testing.assert_allclose(
        float(loss(TARGETS, changed)), float(loss(TARGETS, LOGITS)), rtol=1e-6
    )


def test_replicas_with_different_padding_sum_to_the_global_token_mean():
    strategy = get_strategy("mirrored", ["/cpu:0", "/cpu:1"])
    loss = MaskedSparseCrossEntropy(label_smoothing=0.1)
    per_replica = strategy.experimental_distribute_values_from_function(
        lambda context: (
            TARGETS[context.replica_id_in_sync_group : context.replica_id_in_sync_group + 1],
            LOGITS[context.replica_id_in_sync_group : context.replica_id_in_sync_group + 1],
        )
    )
    losses = strategy.run(tf.function(lambda pair: loss(*pair)), args=(per_replica,))
    total = strategy.reduce("SUM", losses, axis=None)
    np.testing.assert_allclose(float(total), _numpy_loss(TARGETS, LOGITS, 0.1), rtol=1e-5)


@pytest.mark.parametrize("nsp_weight", [1.0, 0.5, 0.0])
def test_pretraining_loss_is_the_masked_lm_mean_plus_the_weighted_nsp_mean(nsp_weight):
    mlm_logits = RNG.normal(size=(2, 3, 9)).astype("float32") * 3
    mlm_labels = np.array([[4, 8, 0], [2, 0, 0]])
    mlm_weights = np.array([[1, 1, 0], [1, 0, 0]], "float32")
    nsp_logits = RNG.normal(size=(2, 2)).astype("float32") * 3
    nsp_labels = np.array([1, 0])

    def negative_log_softmax(logits, labels):
        log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -np.take_along_axis(log_p, labels[..., None], -1)[..., 0]

    mlm = (negative_log_softmax(mlm_logits, mlm_labels) * mlm_weights).sum() / mlm_weights.sum()
    nsp = negative_log_softmax(nsp_logits, nsp_labels).mean()
    loss = PretrainingLoss(nsp_weight)(
        {"mlm_labels": mlm_labels, "mlm_weights": mlm_weights, "nsp_labels": nsp_labels},
        {"mlm": mlm_logits, "nsp": nsp_logits},
    )
    np.testing.assert_allclose(float(loss), mlm + nsp_weight * nsp, rtol=1e-5)


def test_token_accuracy_and_perplexity_ignore_padding():
    accuracy = MaskedTokenAccuracy()
    logits = np.full((2, 5, 9), -5.0, "float32")
    logits[0, 0, 5] = logits[0, 1, 2] = 5  # right
    logits[0, 2, 1] = 5  # wrong
    logits[1, :, 3] = 5  # 3 of the 4 real tokens right, the padding "right" too
    accuracy.update_state(TARGETS, logits)
    assert float(accuracy.result()) == pytest.approx(5 / 7)
    perplexity = MaskedPerplexity()
    perplexity.update_state(TARGETS, LOGITS)
    np.testing.assert_allclose(
        float(perplexity.result()), np.exp(_numpy_loss(TARGETS, LOGITS, 0.0)), rtol=1e-5
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_metrics_likelihood_equals_the_fused_cross_entropy(dtype, smoothed_path):
    logits = tf.cast(RNG.normal(size=(3, 4, 50)).astype("float32") * 4, dtype)
    targets = RNG.integers(0, 50, (3, 4))
    np.testing.assert_allclose(
        token_negative_log_likelihood(targets, logits),
        token_cross_entropy(targets, logits),
        rtol=1e-5,
        atol=1e-5,
    )


def test_transformer_schedule_warms_up_then_decays():
    schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    rates = np.array([float(schedule(step - 1)) for step in (1, 2000, 4000, 16000)])
    np.testing.assert_allclose(rates[2], 512**-0.5 * 4000**-0.5, rtol=1e-5)
    np.testing.assert_allclose(rates[1], rates[2] / 2, rtol=1e-3)
    np.testing.assert_allclose(rates[3], rates[2] / 2, rtol=1e-3)


@pytest.mark.parametrize(
    "flags, native",
    [
        ("fma avx2 avx512f", False),
        ("avx512f avx512_bf16", True),
        ("amx_tile amx_bf16", True),
        ("", False),
    ],
)
def test_precision_auto_follows_the_cpu_flags(flags, native, monkeypatch):
    from keras_attn.training import precision

    monkeypatch.setattr(precision, "cpu_info", lambda: {"flags": flags})
    monkeypatch.setattr(precision.tf.config, "list_physical_devices", lambda kind=None: [])
    assert precision.resolve_mixed_precision("auto") is native
    assert precision.resolve_mixed_precision("float32") is False
    assert precision.resolve_mixed_precision("mixed_bfloat16") is True
    with pytest.raises(ValueError, match="--precision"):
        precision.resolve_mixed_precision("float16")


def test_transformer_schedule_follows_its_formula():
    """lrate = scale · d^-0.5 · min(n^-0.5, n · warmup^-1.5), n = step + 1 (paper, eq. 3)."""
    schedule = TransformerSchedule(hidden_dim=256, warmup_steps=100, scale=2.0)
    steps = np.arange(0, 1000, 7)
    n = steps + 1.0
    expected = 2.0 * 256**-0.5 * np.minimum(n**-0.5, n * 100**-1.5)
    np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-5)
    # A schedule saved before the width was called hidden_dim (in a
    # .keras file's optimizer) loads the same.
    legacy = TransformerSchedule.from_config({"d_model": 256, "warmup_steps": 100, "scale": 2.0})
    assert legacy.get_config() == schedule.get_config()


def test_with_peak_is_fairseqs_inverse_sqrt():
    """fairseq's `inverse_sqrt` (warm-up from 0): lr = peak · n / warmup up to the warm-up's end,
    then peak · sqrt(warmup / n), at update n = step + 1: `--schedule inverse_sqrt`."""
    schedule = TransformerSchedule.with_peak(128, warmup_steps=2000, peak=5e-3)
    n = np.arange(0, 9000, 37) + 1.0
    expected = np.where(n < 2000, 5e-3 * n / 2000, 5e-3 * np.sqrt(2000 / n))
    np.testing.assert_allclose([float(schedule(s)) for s in n - 1], expected, rtol=1e-5)


def test_warmup_cosine_follows_its_formula():
    """Linear warm-up to the peak, then cosine decay to 2% of it at the last step."""
    from keras_attn.schedules import warmup_cosine

    peak, warmup, total = 3e-3, 50, 400
    schedule = warmup_cosine(peak, warmup, total)
    steps = np.arange(0, total + 1, 5)
    progress = np.clip((steps - warmup) / (total - warmup), 0, 1)
    cosine = peak * (0.02 + 0.98 * 0.5 * (1 + np.cos(np.pi * progress)))
    expected = np.where(steps < warmup, peak * steps / warmup, cosine)
    np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-4, atol=1e-9)
    assert float(schedule(warmup)) == pytest.approx(peak)
    assert float(schedule(total)) == pytest.approx(0.02 * peak)
