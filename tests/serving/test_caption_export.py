"""The captioning export: encoded bytes in, caption and attention out,
in a process with TensorFlow alone.
"""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests import fresh_process

pytest_plugins = ["tests.fixtures_export"]


def png(array):
    stream = io.BytesIO()
    Image.fromarray(array).save(stream, "PNG")
    return stream.getvalue()


@pytest.fixture(scope="module")
def loaded(tiny_captioner):
    """The captioner's export, loaded once for the module."""
    return tf.saved_model.load(tiny_captioner[2])


@pytest.mark.slow
def test_the_export_captions_as_the_task_does_and_hostile_rows_change_nothing_else(
    tiny_captioner, loaded
):
    task, scenes, _ = tiny_captioner
    images = [png(image) for image in scenes.images]
    hostile = [b"", b"GIF89a and then nothing", images[0][:100]]
    out = loaded.signatures["caption"](
        image=tf.constant(images + hostile), beam_width=tf.constant(1)
    )
    assert out["readable"].numpy().tolist() == [True] * len(images) + [False] * len(hostile)
    captions = [text.decode() for text in out["caption"].numpy()]
    assert captions == task.generate(scenes.images, max_length=10) + [""] * len(hostile)
    assert (out["score"].numpy()[len(images) :] == 0).all() and (
        out["score"].numpy()[: len(images)] < 0
    ).all()
    alone = loaded.signatures["caption"](image=tf.constant(images[:1]), beam_width=tf.constant(1))
    np.testing.assert_allclose(alone["attention"][0], out["attention"][0], atol=1e-6)

    attention, tokens = out["attention"].numpy(), out["output_tokens"].numpy()
    assert attention.shape[2:] == task.backbone.encoder.grid_shape
    written = tokens != b"[PAD]"
    # each token's weights: one whole
    np.testing.assert_allclose(attention.sum((2, 3))[written], 1.0, atol=1e-5)
    assert not attention[~written].any() and not written[len(images) :].any()


def test_the_attention_is_the_one_the_search_used(tiny_captioner, loaded):
    """The export's attention (one teacher-forced pass over the chosen
    caption) equals greedy search's own.
    """
    from keras_attn.decoding import greedy_search

    task, scenes, _ = tiny_captioner
    out = loaded.signatures["caption"](
        image=tf.constant([png(scenes.images[1])]), beam_width=tf.constant(1)
    )
    searched = greedy_search(
        task.stepper, task.preprocessor.images(scenes.images[1:2]), 10, return_attention=True
    )
    steps = int((out["output_tokens"].numpy()[0] != b"[PAD]").sum())
    np.testing.assert_allclose(
        out["attention"].numpy()[0, :steps].reshape(steps, -1),
        searched["attention"].numpy()[0, :steps, 0, 0],
        atol=1e-5,
    )


def test_a_beam_and_an_empty_batch(tiny_captioner, loaded):
    _, scenes, _ = tiny_captioner
    beam = loaded.signatures["caption"](
        image=tf.constant([png(scenes.images[2])]), beam_width=tf.constant(4)
    )
    assert beam["readable"].numpy().tolist() == [True] and beam["score"].numpy()[0] < 0
    empty = loaded.signatures["caption"](
        image=tf.constant([], tf.string), beam_width=tf.constant(4)
    )
    assert empty["caption"].shape == (0,) and empty["attention"].shape[0] == 0


@pytest.mark.slow
def test_it_loads_and_captions_with_tensorflow_alone(tiny_captioner):
    _, scenes, path = tiny_captioner
    code = (
        "import sys, tensorflow as tf, tensorflow_text; m = tf.saved_model.load(sys.argv[1]); "
        "out = m.signatures['caption'](image=tf.constant([open(sys.argv[2], 'rb').read()]), "
        "beam_width=tf.constant(1)); "
        "assert not [k for k in sys.modules if k.split('.')[0] in ('keras_attn', 'keras_hub', "
        "'pipelines')]; print(out['caption'].numpy()[0].decode())"
    )
    image = f"{path}/../scene.png"
    with open(image, "wb") as file:
        file.write(png(scenes.images[0]))
    printed = fresh_process.run(code, path, image)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert printed.stdout.strip() == tiny_captioner[0].generate(scenes.images[:1], max_length=10)[0]


def test_keras_attn_serve_captions_base64_images_over_rest(tiny_captioner):
    """TensorFlow Serving's REST API: binary inputs as {"b64": ...}; a
    non-image row answers readable=false.
    """
    import base64
    import os

    from starlette.testclient import TestClient

    from keras_attn.config import ServeConfig
    from keras_attn.serving.server import create_app

    task, scenes, path = tiny_captioner
    root = os.path.dirname(os.path.dirname(path))
    images = [png(scenes.images[0]), b"plain text, not an image"]
    rows = [
        {"image": {"b64": base64.b64encode(image).decode()}, "beam_width": 1} for image in images
    ]
    with TestClient(create_app(ServeConfig(root, poll_seconds=0))) as client:
        answer = client.post(
            "/v1/models/captioner:predict", json={"signature_name": "caption", "instances": rows}
        )
        assert answer.status_code == 200, answer.text
        first, second = answer.json()["predictions"]
        assert (
            first["caption"] == task.generate(scenes.images[:1], max_length=10)[0]
            and first["readable"]
        )
        assert second["caption"] == "" and second["readable"] is False
        bad = client.post(
            "/v1/models/captioner:predict",
            json={
                "signature_name": "caption",
                "instances": [{"image": {"b64": "%%"}, "beam_width": 1}],
            },
        )
        assert bad.status_code == 400 and "base64" in bad.json()["error"]
