"""Captioning's data: captions files, and the tf.data pipeline from (image, caption) pairs to batches.

    (uint8 image, caption) ─order of the epoch─► batch ─► pixels to [0, 1],
    caption to ids, [BOS]/[EOS], padding (the preprocessor, in the graph)
    ─► ({"image", "target_in"}, target_out) ─► prefetch

An image with several captions is several pairs, each pointing at the one
copy of its pixels. A user's images are listed by a captions file
(`read_captions`: `image<TAB>caption` lines, or the COCO captions JSON) and
decoded once by `pipelines.images.read_images`.
"""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipelines.prefetch import prefetched
from pipelines.text import DataError, _decoded_lines, read_tsv


@dataclasses.dataclass(frozen=True)
class CaptionedImages:
    """Captions of image files: `captions[i]` describes the image `paths[images[i]]`.

    Attributes:
        paths: each image file once.
        captions: stripped, never empty.
        images: for each caption, its image's index in `paths`.
        skipped_empty: captions dropped because they were empty or blank.
        origin: the captions file.
    """

    paths: list
    captions: list
    images: list
    skipped_empty: int = 0
    origin: str = ""

    def __len__(self):
        return len(self.captions)

    def subset(self, rows, origin):
        """The captions `rows` with only the images they describe."""
        kept = sorted({self.images[row] for row in rows})
        index = {image: i for i, image in enumerate(kept)}
        return CaptionedImages([self.paths[i] for i in kept], [self.captions[row] for row in rows],
                               [index[self.images[row]] for row in rows], origin=origin)


def read_captions(path, image_folder=None):
    r"""Reads a captions file: `image<TAB>caption` lines, or COCO's captions JSON.

    A `.json` file (or one that starts with `{`) is read as COCO's layout:
    `{"images": [{"id", "file_name"}, ...], "annotations": [{"image_id",
    "caption"}, ...]}`. Otherwise each line is an image file name and a
    caption, tab-separated; an image may have several lines. Empty
    captions are skipped and counted; whether the images can be read is
    not checked here (`pipelines.images.read_images` does).

    Args:
        path: the captions file (plain or gzip).
        image_folder: where image names are looked up (default: the
            captions file's folder); absolute names are kept.

    Returns:
        `CaptionedImages`.

    Raises:
        DataError: one line naming the file (and line, or annotation) that
            is wrong.

    Example:

        >>> _ = Path("captions.tsv").write_text("a.png\ta red circle\na.png\ta circle\nb.png\t \n")
        >>> captions = read_captions("captions.tsv", image_folder="images")
        >>> captions.paths, captions.images, captions.skipped_empty
        (['images/a.png'], [0, 0], 1)
    """
    path = Path(path)
    folder = image_folder if image_folder is not None else str(path.parent)
    if _is_json(path):
        names, captions = _coco_pairs(path)
        skipped = 0
    else:
        corpus = read_tsv(path)
        names, captions, skipped = corpus.sources, corpus.targets, corpus.skipped_empty
    kept = [(name, caption) for name, caption in zip(names, captions) if caption.strip()]
    index = {}
    for name, _ in kept:
        index.setdefault(name, len(index))
    return CaptionedImages(
        paths=[os.path.join(folder, name) for name in index], captions=[caption.strip() for _, caption in kept],
        images=[index[name] for name, _ in kept], skipped_empty=skipped + len(captions) - len(kept), origin=str(path),
    )


def _is_json(path):
    if path.suffix == ".json":
        return True
    for line in _decoded_lines(path):
        if line.strip():
            return line.lstrip().startswith("{")
    return False


def _coco_pairs(path):
    """`(image file names, captions)` of a COCO captions JSON file, one pair per annotation."""
    try:
        document = json.loads("".join(_decoded_lines(path)))
        files = {image["id"]: image["file_name"] for image in document["images"]}
        annotations = document["annotations"]
    except ValueError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    except (KeyError, TypeError) as error:
        raise DataError(f"{path}: not COCO's captions layout (an object with \"images\" of "
                        f"{{\"id\", \"file_name\"}} and \"annotations\" of {{\"image_id\", \"caption\"}}; "
                        f"missing {error})") from None
    names, captions = [], []
    for number, annotation in enumerate(annotations):
        try:
            names.append(files[annotation["image_id"]])
            captions.append(str(annotation["caption"]))
        except KeyError as error:
            raise DataError(f"{path}: annotation {number}: no image with id {error}"
                            if annotation.get("image_id") is not None and "caption" in annotation
                            else f"{path}: annotation {number}: missing {error}") from None
    return names, captions


def cell_centres(grid_shape, image_size):
    """The pixel rows and columns of the centres of a `(rows, columns)` grid's cells over an `image_size` square:
    where a cell is, to say whether it lies inside a box.

    Example:

        >>> cell_centres((2, 4), 8)
        (array([1.5, 5.5]), array([0.5, 2.5, 4.5, 6.5]))
    """
    rows, columns = grid_shape
    return (np.arange(rows) + 0.5) * image_size / rows - 0.5, (np.arange(columns) + 0.5) * image_size / columns - 0.5


def attention_targets(captions, regions, preprocessor, grid_shape):
    """What each caption's words should look at: `(N, max_length, L)` float32, row j of caption n the mask of the
    grid cells inside the region its j-th token names, normalised to sum 1, and zero for tokens that name none.

    A cell is inside a region when its centre (`cell_centres`) is, as the captioning benchmark's grounding
    counts; a region smaller than a cell takes the cell of its centre.

    Args:
        captions: `N` captions.
        regions: for each caption, a list of `(first_word, end_word, (x0, y0, x1, y1))`: the words
            `first_word` to `end_word - 1` (split at spaces) name the box, in pixels of the preprocessor's
            `image_size` square (inclusive).
        preprocessor: the `CaptionPreprocessor` whose tokens the rows follow.
        grid_shape: `(rows, columns)` of the attention's cells.

    Example:

        >>> from pipelines.preprocessors import CaptionPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(["a red circle"], 30), image_size=4)
        >>> targets = attention_targets(["a red circle"], [[(1, 3, (0, 0, 1, 1))]], preprocessor, (2, 2))
        >>> targets.shape, targets[0, :3].tolist()
        ((1, 32, 4), [[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    """
    rows, columns = grid_shape
    size = preprocessor.image_size
    centre_y, centre_x = cell_centres(grid_shape, size)
    targets = np.zeros((len(captions), preprocessor.max_length, rows * columns), np.float32)
    words = [caption.split() for caption in captions]
    every_word = [word for caption_words in words for word in caption_words]
    pieces = preprocessor.tokenizer.tokenize(tf.constant(every_word, tf.string)).row_lengths().numpy()
    ends = np.cumsum([len(caption_words) for caption_words in words])  # each caption's words in `pieces`
    for n, named in enumerate(regions):
        if not named:
            continue
        starts = np.concatenate([[0], np.cumsum(pieces[ends[n] - len(words[n]):ends[n]])])  # its tokens' offsets
        for first, end, (x0, y0, x1, y1) in named:
            inside = np.outer((centre_y >= y0) & (centre_y <= y1), (centre_x >= x0) & (centre_x <= x1))
            if not inside.any():
                inside[min(int((y0 + y1) / 2 * rows / size), rows - 1), min(int((x0 + x1) / 2 * columns / size),
                                                                             columns - 1)] = True
            mask = inside.ravel() / inside.sum()
            targets[n, starts[first]:min(starts[end], preprocessor.max_length)] = mask
    return targets


def caption_dataset(images, captions, preprocessor, batch_size, shuffle=True, seed=0, drop_remainder=False,
                    image_rows=None, order=None, attention=None):
    """Batches for teacher-forced training of a captioner.

    Args:
        images: `(N, H, W, 3)` uint8 pixels.
        captions: the captions, one per pair.
        preprocessor: a `pipelines.preprocessors.CaptionPreprocessor`.
        batch_size: pairs per batch.
        shuffle: shuffle all pairs, again every epoch (seeded by `seed`).
        seed: the shuffle's seed.
        drop_remainder: drop a last, smaller batch.
        image_rows: for each caption, its image's row in `images` (default:
            one caption per image row, in order).
        order: the pairs' order, a permutation of their indices (then
            `shuffle` is not used): `caption_epochs` gives each epoch its own.
        attention: `attention_targets` of the captions, to supervise the
            attention (the targets are then a dict).

    Returns:
        A `tf.data.Dataset` of `({"image": (B, size, size, 3) float32,
        "target_in": (B, T) int32}, target_out (B, T) int32)`; with
        `attention`, the targets are `{"target_out", "attention": (B, T, L)}`.

    Example:

        >>> from pipelines.preprocessors import CaptionPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(["a red circle"], 30), image_size=16)
        >>> inputs, target_out = next(iter(caption_dataset(
        ...     np.zeros((3, 16, 16, 3), "uint8"), ["a red circle"] * 3, preprocessor, batch_size=2)))
        >>> inputs["image"].shape, inputs["target_in"].shape, target_out.shape
        (TensorShape([2, 16, 16, 3]), TensorShape([2, 4]), TensorShape([2, 4]))
    """
    image_rows = np.arange(len(images)) if image_rows is None else image_rows
    if len(image_rows) != len(captions):
        raise ValueError(f"{len(image_rows)} image rows but {len(captions)} captions: one image row per caption")
    pairs = np.arange(len(image_rows)) if order is None else np.asarray(order)
    dataset = tf.data.Dataset.from_tensor_slices(pairs)
    if shuffle and order is None:
        dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
    pixels = tf.convert_to_tensor(images)  # a tensor already (`caption_epochs`) is not copied again
    rows = tf.convert_to_tensor(image_rows, tf.int32)
    texts = captions if tf.is_tensor(captions) else tf.constant(list(captions), tf.string)

    supervision = None if attention is None else tf.convert_to_tensor(attention, tf.float32)

    def pack(pair):
        packed = preprocessor(tf.gather(pixels, tf.gather(rows, pair)), tf.gather(texts, pair))
        inputs = {"image": packed["image"], "target_in": packed["target_in"]}
        if supervision is None:
            return inputs, packed["target_out"]
        length = tf.shape(packed["target_out"])[1]
        return inputs, {"target_out": packed["target_out"], "attention": tf.gather(supervision, pair)[:, :length]}

    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return prefetched(dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE))


def caption_epochs(images, captions, preprocessor, batch_size, seed=0, image_rows=None):
    """`caption_dataset` one epoch at a time: `epochs(e)` is epoch `e`'s batches, in an order of its own.

    The order is a function of `seed` and `e` only (NumPy's), the same in
    every process and every time, so a run that resumes in the middle of an
    epoch sees the batches it had not seen.

    Example:

        >>> from pipelines.preprocessors import CaptionPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(["a", "b"], 30), image_size=4)
        >>> epochs = caption_epochs(np.zeros((5, 4, 4, 3), "uint8"), list("ababa"), preprocessor, batch_size=2)
        >>> len(epochs(0)), [len(t[1]) for t in epochs(1)]
        (3, [2, 2, 1])
    """

    count = len(captions)
    image_rows = np.arange(len(images)) if image_rows is None else image_rows
    # Made tensors once: every epoch's dataset reads the same pixels instead of copying them.
    images, captions = tf.convert_to_tensor(images), tf.constant(list(captions), tf.string)
    image_rows = tf.convert_to_tensor(image_rows, tf.int32)

    def epoch_batches(epoch):
        order = np.random.default_rng([seed, epoch]).permutation(count)
        return caption_dataset(images, captions, preprocessor, batch_size, image_rows=image_rows, order=order)

    return epoch_batches
