"""Captioning's data: captions files, and the tf.data pipeline from
(image, caption) pairs to batches.

    (uint8 image, caption) ─order of the epoch─► batch ─► pixels to [0, 1],
    caption to ids, [BOS]/[EOS], padding (the preprocessor, in the graph)
    ─► ({"image", "target_in"}, target_out) ─► prefetch

An image with several captions is several pairs, each pointing at the one
copy of its pixels. A user's images are listed by a captions file
(`read_captions`: `image<TAB>caption` lines, or the COCO captions JSON) and
decoded once by `pipelines.images.read_images`. A caption may name the
regions its words describe (`REGIONS_FIELD`); `word_boxes` turns them into
each token's box, with which `caption_dataset` supervises the attention.
"""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipelines.prefetch import prefetched
from pipelines.text import DataError, decoded_lines, tsv_rows

NO_BOX = -1.0  # the box coordinates of a token that names no region
# A caption's regions, as its file writes them.
REGIONS_FIELD = "[[first_word, end_word, x0, y0, x1, y1], ...]"


@dataclasses.dataclass(frozen=True)
class CaptionedImages:
    """Captions of image files: `captions[i]` describes the image `paths[images[i]]`.

    Each argument is also an attribute of the same name.

    Args:
        paths: list of str. Each image file once.
        captions: list of str. The captions, stripped, never empty.
        images: list of int. For each caption, its image's index in `paths`.
        skipped_empty: int. Captions dropped because they were empty or
            blank. Defaults to 0.
        origin: str. The captions file. Defaults to `""`.
        regions: list of tuples. For each caption, the regions its words
            name, `[(first_word, end_word, (x0, y0, x1, y1))]` in its image's
            pixels (`()` where the file gives none; no entries at all when no
            caption has any). Defaults to `[]`.
    """

    paths: list
    captions: list
    images: list
    skipped_empty: int = 0
    origin: str = ""
    regions: list = dataclasses.field(default_factory=list)

    def __len__(self):
        return len(self.captions)

    def subset(self, rows, origin):
        """The captions `rows` with only the images they describe.

        Args:
            rows: list of int. The indices of the captions kept.
            origin: str. The `origin` of the subset.

        Returns:
            A `CaptionedImages`.
        """
        kept = sorted({self.images[row] for row in rows})
        index = {image: i for i, image in enumerate(kept)}
        return CaptionedImages(
            [self.paths[i] for i in kept],
            [self.captions[row] for row in rows],
            [index[self.images[row]] for row in rows],
            origin=origin,
            regions=[self.regions[row] for row in rows] if self.regions else [],
        )


def read_captions(path, image_folder=None):
    r"""Reads a captions file: `image<TAB>caption` lines, or COCO's captions JSON.

    A `.json` file (or one that starts with `{`) is read as COCO's layout:
    `{"images": [{"id", "file_name"}, ...], "annotations": [{"image_id",
    "caption"}, ...]}`. Otherwise each line is an image file name and a
    caption, tab-separated; an image may have several lines. Empty
    captions are skipped and counted; whether the images can be read is
    not checked here (`pipelines.images.read_images` does).

    A caption may also say where its words look: a third column (or an
    annotation's `"regions"`) holding the JSON list `REGIONS_FIELD`, the
    words `first_word` to `end_word - 1` (0-based, split at spaces) naming
    the box from `(x0, y0)` to `(x1, y1)` (inclusive) in the image file's
    pixels. Captions without it are read as before.

    Args:
        path: str or os.PathLike. The captions file (plain or gzip).
        image_folder: str. Where image names are looked up; absolute names
            are kept. `None` for the captions file's folder. Defaults to
            None.

    Returns:
        `CaptionedImages`.

    Raises:
        DataError: when the file cannot be read or a line, annotation or
            regions field is malformed; one line naming the file (and line,
            or annotation) that is wrong.

    Example:

        >>> _ = Path("captions.tsv").write_text("a.png\ta red circle\n"
        ...                                     "a.png\ta circle\t[[1, 2, 0, 0, 9, 9]]\n"
        ...                                     "b.png\t \n")
        >>> captions = read_captions("captions.tsv", image_folder="images")
        >>> captions.paths, captions.images, captions.skipped_empty, captions.regions
        (['images/a.png'], [0, 0], 1, [(), ((1, 2, (0.0, 0.0, 9.0, 9.0)),)])
    """
    path = Path(path)
    folder = image_folder if image_folder is not None else str(path.parent)
    if _is_json(path):
        rows = _coco_rows(path)
    else:
        rows = [
            (
                name,
                caption,
                json_list(field, f"{path}:{number}") if field else None,
                f"{path}:{number}",
            )
            for number, (name, caption, field) in enumerate(
                tsv_rows(path, 0, 1, optional_column=2), start=1
            )
        ]
    kept = [
        (name, caption.strip(), field, where)
        for name, caption, field, where in rows
        if name and caption.strip()
    ]
    index = {}
    for name, *_ in kept:
        index.setdefault(name, len(index))
    regions = [read_regions(field, caption, where) for _, caption, field, where in kept]
    return CaptionedImages(
        paths=[os.path.join(folder, name) for name in index],
        captions=[caption for _, caption, _, _ in kept],
        images=[index[name] for name, *_ in kept],
        skipped_empty=len(rows) - len(kept),
        origin=str(path),
        regions=regions if any(regions) else [],
    )


def json_list(field, where):
    """A captions file's regions field, parsed.

    Args:
        field: str. The field, JSON text.
        where: str. What the error message names, e.g. `path:line`.

    Returns:
        The parsed JSON value.

    Raises:
        DataError: when `field` is not valid JSON.
    """
    try:
        return json.loads(field)
    except ValueError as error:
        raise DataError(
            f"{where}: the regions are not valid JSON ({error}); expected {REGIONS_FIELD}"
        ) from None


def read_regions(field, caption, where):
    """A caption's regions field (parsed JSON, or None) →
    `((first_word, end_word, (x0, y0, x1, y1)), ...)`.

    Args:
        field: list. The parsed field, a list of regions (or one region);
            `None` for a caption without regions.
        caption: str. The caption the words are counted in.
        where: str. What an error message names, e.g. `path:line`.

    Returns:
        A tuple of `(first_word, end_word, (x0, y0, x1, y1))`, words as int
        and the box as float; `()` for `None`.

    Raises:
        DataError: when a region is not six numbers, its words are not a
            span of the caption's words, or its box does not have
            `0 <= x0 <= x1` and `0 <= y0 <= y1`.
    """
    if field is None:
        return ()
    words = len(caption.split())
    regions = []
    for region in field if isinstance(field, list) else [field]:
        ok = (
            isinstance(region, list)
            and len(region) == 6
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in region)
        )
        if not ok:
            raise DataError(
                f"{where}: the regions must be {REGIONS_FIELD}, got {json.dumps(region)}"
            )
        first, end, x0, y0, x1, y1 = region
        if not (first == int(first) and end == int(end) and 0 <= first < end <= words):
            raise DataError(
                f"{where}: region {json.dumps(region)}: words {first} to {end} are not a span of "
                f"the caption's {words} words (end_word is exclusive)"
            )
        if not (0 <= x0 <= x1 and 0 <= y0 <= y1):
            raise DataError(
                f"{where}: region {json.dumps(region)}: the box must have 0 <= x0 <= x1 and "
                "0 <= y0 <= y1 (pixels)"
            )
        regions.append((int(first), int(end), (float(x0), float(y0), float(x1), float(y1))))
    return tuple(regions)


def resized_regions(regions, sizes, image_size):
    """Regions in pixels of images of `sizes` (each caption's `(height, width)`) → in pixels of the
    `image_size` squares they are resized to.

    Args:
        regions: list of tuples. Each caption's regions, as
            `CaptionedImages.regions`.
        sizes: array or list of shape `(N, 2)`. Each caption's image's
            `(height, width)`.
        image_size: int. The side of the squares.

    Returns:
        A list of the regions, their boxes scaled.

    Example:

        >>> resized_regions([((0, 1, (0, 0, 9, 19)),), ()], [(20, 10), (5, 5)], 40)
        [((0, 1, (0.0, 0.0, 39.0, 39.0)),), ()]
    """

    def scaled(box, height, width):
        x0, y0, x1, y1 = box
        across, down = image_size / width, image_size / height
        # pixels cover [x, x + 1)
        return (
            x0 * across,
            y0 * down,
            (x1 + 1) * across - 1,
            (y1 + 1) * down - 1,
        )

    return [
        tuple((first, end, scaled(box, *size)) for first, end, box in named)
        for named, size in zip(regions, sizes)
    ]


def _is_json(path):
    if path.suffix == ".json":
        return True
    for line in decoded_lines(path):
        if line.strip():
            return line.lstrip().startswith("{")
    return False


def _coco_rows(path):
    """`(image file name, caption, regions or None, where)` of each
    annotation of a COCO captions JSON file.
    """
    try:
        document = json.loads("".join(decoded_lines(path)))
        files = {image["id"]: image["file_name"] for image in document["images"]}
        annotations = document["annotations"]
    except ValueError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    except (KeyError, TypeError) as error:
        raise DataError(
            f'{path}: not COCO\'s captions layout (an object with "images" of '
            f'{{"id", "file_name"}} and "annotations" of {{"image_id", "caption"}}; '
            f"missing {error})"
        ) from None
    rows = []
    for number, annotation in enumerate(annotations):
        try:
            rows.append(
                (
                    files[annotation["image_id"]],
                    str(annotation["caption"]),
                    annotation.get("regions"),
                    f"{path}: annotation {number}",
                )
            )
        except KeyError as error:
            raise DataError(
                f"{path}: annotation {number}: no image with id {error}"
                if annotation.get("image_id") is not None and "caption" in annotation
                else f"{path}: annotation {number}: missing {error}"
            ) from None
    return rows


def word_starts(captions, tokenizer):
    """Where each word of each caption (split at spaces) starts among its tokens: for each caption,
    its words' first token indices and then its token count (a word may be several tokens: "red" is
    r ##e ##d in a small vocabulary). The step that writes a word's first token is that index.

    Args:
        captions: list of str. The captions.
        tokenizer: pipelines.tokenizers.SubwordTokenizer. The tokenizer of
            the captions.

    Returns:
        A list of int arrays, one per caption, of its word count plus one
        entries.

    Example:

        >>> from pipelines.tokenizers import WordPieceTokenizer
        >>> specials = ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "[CLS]", "[SEP]", "[MASK]"]
        >>> tokenizer = WordPieceTokenizer([*specials, "a", "r", "##e", "##d", "circle"])
        >>> [starts.tolist() for starts in word_starts(["a red circle"], tokenizer)]
        [[0, 1, 4, 5]]
    """
    words = [caption.split() for caption in captions]
    every_word = [word for caption_words in words for word in caption_words]
    pieces = (
        tokenizer.tokenize(tf.constant(every_word, tf.string)).row_lengths().numpy()
        if every_word
        else np.zeros(0, np.int64)
    )
    # each caption's words in `pieces`
    ends = np.cumsum([len(caption_words) for caption_words in words])
    return [
        np.concatenate([[0], np.cumsum(pieces[end - len(caption_words) : end])]).astype(int)
        for caption_words, end in zip(words, ends)
    ]


def word_boxes(captions, regions, preprocessor):
    """The box each token of each caption names: `(N, max_length, 4)` float32
    `(x0, y0, x1, y1)` in pixels of the preprocessor's `image_size` square,
    `NO_BOX` for tokens that name none (what `caption_dataset` supervises the
    attention with; the model turns boxes into masks over its grid).

    Args:
        captions: list of str. `N` captions.
        regions: list. For each caption, `[(first_word, end_word, (x0, y0, x1, y1))]`: the
            words `first_word` to `end_word - 1` (split at spaces) name the box, in pixels of the
            preprocessor's `image_size` square (`resized_regions` brings a file's to it).
        preprocessor: pipelines.preprocessors.CaptionPreprocessor. The preprocessor whose
            tokens the rows follow.

    Returns:
        A float32 array of shape `(N, max_length, 4)`.

    Example:

        >>> from pipelines.preprocessors import CaptionPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a red circle"], 30)
        >>> preprocessor = CaptionPreprocessor(vocabulary, image_size=4)
        >>> boxes = word_boxes(["a red circle"], [[(1, 3, (0, 0, 1, 1))]], preprocessor)
        >>> boxes.shape, boxes[0, :4].tolist()
        ((1, 32, 4), [[-1.0, -1.0, -1.0, -1.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0],
                      [-1.0, -1.0, -1.0, -1.0]])
    """
    boxes = np.full((len(captions), preprocessor.max_length, 4), NO_BOX, np.float32)
    for n, (named, starts) in enumerate(
        zip(regions, word_starts(captions, preprocessor.tokenizer))
    ):
        for first, end, box in named or ():
            boxes[n, starts[first] : min(starts[end], preprocessor.max_length)] = box
    return boxes


def caption_dataset(
    images,
    captions,
    preprocessor,
    batch_size,
    shuffle=True,
    seed=0,
    drop_remainder=False,
    image_rows=None,
    order=None,
    boxes=None,
):
    """Batches for teacher-forced training of a captioner.

    Args:
        images: uint8 array or tensor of shape `(N, H, W, 3)`. The pixels.
        captions: list of str, or string tensor. The captions, one per pair.
        preprocessor: pipelines.preprocessors.CaptionPreprocessor. Packs the
            pairs.
        batch_size: int. Pairs per batch.
        shuffle: bool. Whether all pairs are shuffled, again every epoch
            (seeded by `seed`). Defaults to True.
        seed: int. The shuffle's seed. Defaults to 0.
        drop_remainder: bool. Whether a last, smaller batch is dropped.
            Defaults to False.
        image_rows: array or list of int. For each caption, its image's row
            in `images`; `None` for one caption per image row, in order.
            Defaults to None.
        order: array or list of int. The pairs' order, a permutation of
            their indices (then `shuffle` is not used): `caption_epochs`
            gives each epoch its own. `None` for their order. Defaults to
            None.
        boxes: float array of shape `(len(captions), max_length, 4)`. The
            `word_boxes` of the captions, to supervise the attention (the
            targets are then a dict); `None` for none. Defaults to None.

    Returns:
        A `tf.data.Dataset` of `({"image": (B, size, size, 3) float32,
        "target_in": (B, T) int32}, target_out (B, T) int32)`; with
        `boxes`, the targets are `{"target_out", "boxes": (B, T, 4)}`.

    Raises:
        ValueError: when `image_rows` and `captions` differ in length.

    Example:

        >>> from pipelines.preprocessors import CaptionPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a red circle"], 30)
        >>> preprocessor = CaptionPreprocessor(vocabulary, image_size=16)
        >>> images = np.zeros((3, 16, 16, 3), "uint8")
        >>> data = caption_dataset(images, ["a red circle"] * 3, preprocessor, batch_size=2)
        >>> inputs, target_out = next(iter(data))
        >>> inputs["image"].shape, inputs["target_in"].shape, target_out.shape
        (TensorShape([2, 16, 16, 3]), TensorShape([2, 4]), TensorShape([2, 4]))
    """
    image_rows = np.arange(len(images)) if image_rows is None else image_rows
    if len(image_rows) != len(captions):
        raise ValueError(
            f"{len(image_rows)} image rows but {len(captions)} captions: one image row per caption"
        )
    pairs = np.arange(len(image_rows)) if order is None else np.asarray(order)
    dataset = tf.data.Dataset.from_tensor_slices(pairs)
    if shuffle and order is None:
        dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
    pixels = tf.convert_to_tensor(images)  # a tensor already (`caption_epochs`) is not copied again
    rows = tf.convert_to_tensor(image_rows, tf.int32)
    texts = captions if tf.is_tensor(captions) else tf.constant(list(captions), tf.string)
    boxes = None if boxes is None else tf.convert_to_tensor(boxes, tf.float32)

    def pack(pair):
        packed = preprocessor(tf.gather(pixels, tf.gather(rows, pair)), tf.gather(texts, pair))
        inputs = {"image": packed["image"], "target_in": packed["target_in"]}
        if boxes is None:
            return inputs, packed["target_out"]
        length = tf.shape(packed["target_out"])[1]
        return inputs, {
            "target_out": packed["target_out"],
            "boxes": tf.gather(boxes, pair)[:, :length],
        }

    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return prefetched(dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE))


def caption_epochs(images, captions, preprocessor, batch_size, seed=0, image_rows=None, boxes=None):
    """`caption_dataset` one epoch at a time: `epochs(e)` is epoch
    `e`'s batches, in an order of its own.

    The order is a function of `seed` and `e` only (NumPy's), the same in
    every process and every time, so a run that resumes in the middle of an
    epoch sees the batches it had not seen.

    Args:
        images: uint8 array or tensor of shape `(N, H, W, 3)`. The pixels.
        captions: list of str. The captions, one per pair.
        preprocessor: pipelines.preprocessors.CaptionPreprocessor. Packs the
            pairs.
        batch_size: int. Pairs per batch.
        seed: int. The seed of the epochs' orders. Defaults to 0.
        image_rows: array or list of int. For each caption, its image's row
            in `images`; `None` for one caption per image row, in order.
            Defaults to None.
        boxes: float array of shape `(len(captions), max_length, 4)`. The
            `word_boxes` of the captions, as `caption_dataset` takes them;
            `None` for none. Defaults to None.

    Returns:
        A function `epoch -> tf.data.Dataset` of that epoch's batches.

    Raises:
        ValueError: as `caption_dataset`, when an epoch's batches are made.

    Example:

        >>> from pipelines.preprocessors import CaptionPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a", "b"], 30)
        >>> preprocessor = CaptionPreprocessor(vocabulary, image_size=4)
        >>> images = np.zeros((5, 4, 4, 3), "uint8")
        >>> epochs = caption_epochs(images, list("ababa"), preprocessor, batch_size=2)
        >>> len(epochs(0)), [len(t[1]) for t in epochs(1)]
        (3, [2, 2, 1])
    """

    count = len(captions)
    image_rows = np.arange(len(images)) if image_rows is None else image_rows
    # Made tensors once: every epoch's dataset reads the same pixels instead of copying them.
    images, captions = tf.convert_to_tensor(images), tf.constant(list(captions), tf.string)
    image_rows = tf.convert_to_tensor(image_rows, tf.int32)
    boxes = None if boxes is None else tf.convert_to_tensor(boxes, tf.float32)

    def epoch_batches(epoch):
        order = np.random.default_rng([seed, epoch]).permutation(count)
        return caption_dataset(
            images,
            captions,
            preprocessor,
            batch_size,
            image_rows=image_rows,
            order=order,
            boxes=boxes,
        )

    return epoch_batches
