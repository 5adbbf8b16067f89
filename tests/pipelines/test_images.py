"""Encoded images to pixels: every readable format read exactly,
hostile bytes answered, never an error.
"""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from pipelines.images import MAX_PIXELS, decode_images, read_images

PIXELS = np.random.default_rng(0).integers(0, 256, (24, 24, 3), dtype=np.uint8)


def encoded(array, image_format, **options):
    stream = io.BytesIO()
    Image.fromarray(array).save(stream, image_format, **options)
    return stream.getvalue()


def with_size(png, width, height):
    """A PNG whose header claims another size (its data unchanged)."""
    data = bytearray(png)
    data[16:20], data[20:24] = width.to_bytes(4, "big"), height.to_bytes(4, "big")
    return bytes(data)


LOSSLESS = {"png": encoded(PIXELS, "PNG"), "bmp": encoded(PIXELS, "BMP")}
READABLE = {
    **LOSSLESS,
    "jpeg": encoded(PIXELS, "JPEG"),
    "gif": encoded(PIXELS, "GIF"),
    "grayscale png": encoded(PIXELS[..., 0], "PNG"),
    "rgba png": encoded(np.dstack([PIXELS, PIXELS[..., :1]]), "PNG"),
    "animated gif": encoded(
        PIXELS, "GIF", save_all=True, append_images=[Image.fromarray(255 - PIXELS)]
    ),
}
HOSTILE = {
    "empty": b"",
    "text": b"hello",
    "png cut short": LOSSLESS["png"][:200],
    "jpeg header only": READABLE["jpeg"][:40],
    "png claiming 60 gigapixels": with_size(LOSSLESS["png"], 250_000, 250_000),
    "png claiming one pixel over the cap": with_size(LOSSLESS["png"], MAX_PIXELS + 1, 1),
    "png claiming no pixels": with_size(LOSSLESS["png"], 0, 24),
}


def test_lossless_images_are_read_exactly_at_their_own_size():
    pixels, readable = decode_images(tf.constant(list(LOSSLESS.values())), 24)
    assert readable.numpy().all()
    for image in pixels.numpy():
        np.testing.assert_array_equal(image, PIXELS)


def test_hostile_bytes_are_unreadable_rows_and_the_others_are_still_read():
    names = [*READABLE, *HOSTILE]
    batch = tf.constant([*READABLE.values(), *HOSTILE.values()])
    pixels, readable = decode_images(batch, 16)
    assert dict(zip(names, readable.numpy().tolist())) == {
        **{n: True for n in READABLE},
        **{n: False for n in HOSTILE},
    }
    assert not pixels.numpy()[len(READABLE) :].any()  # unreadable rows are black
    alone, _ = decode_images(tf.constant([READABLE["png"]]), 16)
    np.testing.assert_array_equal(pixels[0], alone[0])  # a row does not depend on its neighbours
    grayscale = pixels.numpy()[names.index("grayscale png")]
    assert (grayscale[..., 0] == grayscale[..., 2]).all()
    animated = pixels.numpy()[names.index("animated gif")]
    gif = pixels.numpy()[names.index("gif")]
    np.testing.assert_array_equal(animated, gif)  # the first frame


@pytest.mark.parametrize("rows", [0, 1])
def test_a_batch_of_nothing_or_one_unreadable_image(rows):
    pixels, readable = decode_images(tf.constant([b"x"] * rows, tf.string), 8)
    assert pixels.shape == (rows, 8, 8, 3) and readable.numpy().tolist() == [False] * rows


def test_files_missing_or_not_images_are_unreadable(tmp_path):
    (tmp_path / "a.png").write_bytes(LOSSLESS["png"])
    (tmp_path / "b.png").write_bytes(b"not an image")
    (tmp_path / "c.jpg").write_bytes(READABLE["jpeg"])
    (tmp_path / "d.png").write_bytes(encoded(PIXELS[:10], "PNG"))
    paths = [str(tmp_path / name) for name in ("a.png", "missing.png", "b.png", "c.jpg", "d.png")]
    pixels, readable, sizes = read_images(paths, 24)
    assert readable.tolist() == [True, False, False, True, True]
    # each image's own height and width
    assert sizes.tolist() == [
        [24, 24],
        [0, 0],
        [0, 0],
        [24, 24],
        [10, 24],
    ]
    np.testing.assert_array_equal(pixels[0], PIXELS)
