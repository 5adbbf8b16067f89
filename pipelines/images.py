"""Encoded images (PNG, JPEG, GIF, BMP) to the square uint8 pixels a captioner reads, in the graph.

Any bytes are safe to give: `decode_images` answers a batch with the
pixels of the images it could read and `readable=False` (black pixels) for
the others (not an image of those formats, cut short, corrupt, or larger
than `MAX_PIXELS`), never an error for the whole batch. Grayscale images
are read as RGB, an alpha channel is dropped, an animated GIF gives its
first frame; every image is resized to `image_size`×`image_size` (its
aspect ratio is not kept).

    >>> encoded = tf.io.encode_png(np.full((20, 30, 3), 200, "uint8"))
    >>> pixels, readable = decode_images(tf.stack([encoded, b"not an image"]), 8)
    >>> pixels.shape, readable.numpy().tolist()
    (TensorShape([2, 8, 8, 3]), [True, False])
    >>> int(pixels[0, 0, 0, 0]), int(pixels[1].numpy().max())
    (200, 0)
"""

import numpy as np
import tensorflow as tf

MAX_PIXELS = 50_000_000  # larger images are refused unread: decoded, one would take over 150 MB
_HEADER = 32  # bytes of a file read for its format and size


def header_pixels(encoded):
    """Height × width of one encoded image, from its header alone (int64 scalar).

    PNG, GIF and BMP keep the size at fixed places in their headers; a
    JPEG's is read from its frame header (`tf.image.extract_jpeg_shape`,
    which raises `InvalidArgumentError` when it finds none). Bytes of no
    such format give -1.

    Args:
        encoded: scalar string tensor. The bytes of an image file.

    Returns:
        An int64 scalar tensor.

    Raises:
        tf.errors.InvalidArgumentError: when a JPEG has no frame header.
    """
    head = tf.strings.substr(tf.strings.substr(encoded, 0, _HEADER) + b"\0" * _HEADER, 0, _HEADER)
    b = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)

    def number(start, size, big_endian):  # an unsigned integer of `size` bytes at `start`
        digits = b[start : start + size][::-1] if big_endian else b[start : start + size]
        return tf.reduce_sum(digits * 256 ** tf.range(size, dtype=tf.int64))

    def starts_with(magic):
        return tf.reduce_all(tf.equal(b[: len(magic)], list(magic)))

    def signed32(value):
        # BMP: negative height = top-down rows
        return tf.abs(tf.where(value >= 2**31, value - 2**32, value))

    def jpeg():
        shape = tf.image.extract_jpeg_shape(encoded, output_type=tf.int64)
        return shape[0] * shape[1]

    return tf.case(
        [
            (starts_with(b"\x89PNG\r\n\x1a\n"), lambda: number(16, 4, True) * number(20, 4, True)),
            (starts_with(b"GIF8"), lambda: number(6, 2, False) * number(8, 2, False)),
            (
                starts_with(b"BM"),
                lambda: signed32(number(18, 4, False)) * signed32(number(22, 4, False)),
            ),
            (starts_with(b"\xff\xd8\xff"), jpeg),
        ],
        default=lambda: tf.constant(-1, tf.int64),
        exclusive=True,
    )


def decode_image(encoded, image_size):
    """One encoded image → `(image_size, image_size, 3)` uint8; raises
    `InvalidArgumentError` if unreadable.

    Args:
        encoded: scalar string tensor. The bytes of an image file.
        image_size: int. The side of the square it is resized to.

    Returns:
        A uint8 tensor of shape `(image_size, image_size, 3)`.

    Raises:
        tf.errors.InvalidArgumentError: when the image cannot be read (as
            `decoded`).
    """
    return resized(decoded(encoded), image_size)


def decoded(encoded):
    """One encoded image → `(height, width, 3)` uint8 at its own size;
    raises `InvalidArgumentError` if unreadable.

    Args:
        encoded: scalar string tensor. The bytes of an image file.

    Returns:
        A uint8 tensor of shape `(height, width, 3)`.

    Raises:
        tf.errors.InvalidArgumentError: when the bytes are not a PNG, JPEG,
            GIF or BMP image of at most `MAX_PIXELS` pixels, or cannot be
            decoded.
    """
    pixels = header_pixels(encoded)
    known = tf.logical_and(pixels > 0, pixels <= MAX_PIXELS)
    with tf.control_dependencies(
        [
            tf.debugging.Assert(
                known, ["not a PNG, JPEG, GIF or BMP image of at most", MAX_PIXELS, "pixels"]
            )
        ]
    ):
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def resized(image, image_size):
    """`(height, width, 3)` pixels → `(image_size, image_size, 3)` uint8.

    Args:
        image: tensor of shape `(height, width, 3)`. Pixels, 0-255.
        image_size: int. The side of the square.

    Returns:
        A uint8 tensor of shape `(image_size, image_size, 3)`.
    """
    square = tf.image.resize(image, [image_size, image_size], antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(square), 0, 255), tf.uint8)


def decode_images(encoded, image_size):
    """A batch of encoded images → `(pixels (B, size, size, 3) uint8, readable (B,) bool)`.

    Each image is decoded in a `tf.data` pipeline that drops the ones whose
    decoding fails; those rows get black pixels and `readable=False`.

    Args:
        encoded: string tensor of shape `(B,)`. The bytes of image files.
        image_size: int. The side of the squares they are resized to.

    Returns:
        A tuple `(pixels, readable)`: a uint8 tensor of shape
        `(B, image_size, image_size, 3)` and a bool tensor of shape `(B,)`.
    """
    rows = tf.shape(encoded)[0]
    decoded = (
        tf.data.Dataset.from_tensor_slices((tf.range(rows), encoded))
        .map(lambda row, one: (row, decode_image(one, image_size)))
        .ignore_errors()
    )
    sentinel = tf.data.Dataset.from_tensors(
        (tf.constant(-1), tf.zeros([image_size, image_size, 3], tf.uint8))
    )
    # the sentinel: never empty
    read, images = decoded.concatenate(sentinel).batch(2**31 - 1).get_single_element()
    read, images = read[:-1, None], images[:-1]
    pixels = tf.scatter_nd(read, images, [rows, image_size, image_size, 3])
    return pixels, tf.scatter_nd(read, tf.ones(tf.shape(read)[:1], tf.bool), [rows])


def read_images(paths, image_size):
    """The image files at `paths`, decoded and resized by `tf.data` in parallel.

    Args:
        paths: list of str. The image files.
        image_size: int. The side of the squares they are resized to.

    Returns:
        `(pixels, readable, sizes)`: NumPy `(N, image_size, image_size, 3)`
        uint8 (black where unreadable), `(N,)` bool, False for a file that
        is missing, cannot be read or holds no readable image
        (`decode_image`), and `(N, 2)` int, each image's own height and
        width (0 where unreadable).
    """
    paths = list(paths)
    pixels = np.zeros((len(paths), image_size, image_size, 3), np.uint8)
    readable = np.zeros(len(paths), bool)
    sizes = np.zeros((len(paths), 2), np.int64)

    def read(row, path):
        image = decoded(tf.io.read_file(path))
        return row, resized(image, image_size), tf.shape(image, tf.int64)[:2]

    files = tf.data.Dataset.from_tensor_slices(
        (tf.range(len(paths)), tf.constant(paths, tf.string))
    )
    # A missing file fails in read_file: dropped too.
    for rows, images, shapes in (
        files.map(read, num_parallel_calls=tf.data.AUTOTUNE)
        .ignore_errors()
        .batch(256)
        .as_numpy_iterator()
    ):
        pixels[rows], readable[rows], sizes[rows] = images, True, shapes
    return pixels, readable, sizes
