"""The tf.data pipeline of captioning: (image, caption) pairs → batches a captioner trains on.

    (uint8 image, caption) ─shuffle─► batch ─► pixels to [0, 1], caption to
    ids, [BOS]/[EOS], padding (the preprocessor, in the graph) ─►
    ({"image", "target_in"}, target_out) ─► prefetch

An image with several captions is several pairs.
"""

import tensorflow as tf


def caption_dataset(images, captions, preprocessor, batch_size, shuffle=True, seed=0, drop_remainder=False):
    """Batches for teacher-forced training of a captioner.

    Args:
        images: `(N, H, W, 3)` uint8 pixels.
        captions: `N` strings, one per image row.
        preprocessor: a `pipelines.preprocessors.CaptionPreprocessor`.
        batch_size: pairs per batch.
        shuffle: shuffle all pairs, again every epoch (seeded by `seed`).
        seed: the shuffle's seed.
        drop_remainder: drop a last, smaller batch.

    Returns:
        A `tf.data.Dataset` of `({"image": (B, size, size, 3) float32,
        "target_in": (B, T) int32}, target_out (B, T) int32)`.

    Example:

    >>> from pipelines.preprocessors import CaptionPreprocessor
    >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
    >>> preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(["a red circle"], 30), image_size=16)
    >>> inputs, target_out = next(iter(caption_dataset(
    ...     np.zeros((3, 16, 16, 3), "uint8"), ["a red circle"] * 3, preprocessor, batch_size=2)))
    >>> inputs["image"].shape, inputs["target_in"].shape, target_out.shape
    (TensorShape([2, 16, 16, 3]), TensorShape([2, 4]), TensorShape([2, 4]))
    """
    if len(images) != len(captions):
        raise ValueError(f"{len(images)} images but {len(captions)} captions: one caption per image row")
    dataset = tf.data.Dataset.from_tensor_slices((images, tf.constant(list(captions), tf.string)))
    if shuffle:
        dataset = dataset.shuffle(len(captions), seed=seed, reshuffle_each_iteration=True)

    def pack(image, caption):
        packed = preprocessor(image, caption)
        return {"image": packed["image"], "target_in": packed["target_in"]}, packed["target_out"]

    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
