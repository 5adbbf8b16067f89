"""The built-in generated scenes corpus: images of 1-4 shapes and the captions that name them.

Each image shows 1 to 4 objects on a dark, noisy background of a random
colour; an object is a shape (circle, square, triangle, diamond) of a
colour (red, green, blue, yellow, purple, white) and a size (small or
large). Its caption names the objects from left to right, each with its
size, colour and shape, and says where each stands from the one before it:

    a small red circle left of a large blue square above a small white diamond

"left of" when the next object lies mostly to the right, "above" or
"below" when it lies mostly lower or higher (image rows grow downwards, so
"A above B" means A is higher). Scenes are drawn until these are
unambiguous (centres apart by at least `MIN_GAP` pixels in x, and one
direction at least 1.5 times the other), so every image has exactly one
caption. Each object's bounding box is kept, in caption order, to measure
whether the attention looks at the object a word names.

The held-out combinations split: `HELD_OUT` colour-shape pairs never appear
in the train, valid and test splits; every scene of the `held_out` split
has at least one of them, so a model must compose a colour and a shape it
has only seen apart.

Example:

    >>> corpus = scenes_corpus(seed=0, train_size=4, valid_size=2, test_size=2, held_out_size=2)
    >>> corpus["train"].images.shape, corpus["train"].images.dtype
    ((4, 64, 64, 3), dtype('uint8'))
    >>> [len(boxes) for boxes in corpus["train"].boxes] == corpus["train"].counts.tolist()
    True
"""

import dataclasses

import numpy as np

IMAGE_SIZE = 64
SHAPES = ("circle", "square", "triangle", "diamond")
COLOURS = {
    "red": (0.9, 0.12, 0.1),
    "green": (0.15, 0.8, 0.15),
    "blue": (0.2, 0.35, 1.0),
    "yellow": (0.95, 0.88, 0.1),
    "purple": (0.7, 0.2, 0.9),
    "white": (0.95, 0.95, 0.95),
}
SIZES = {"small": (4, 5), "large": (8, 10)}  # half-widths in pixels, from-to
HELD_OUT = (("red", "circle"), ("green", "square"), ("blue", "triangle"), ("yellow", "diamond"))
MAX_OBJECTS = 4
SPLIT_SIZES = {"train": 12000, "valid": 500, "test": 1000, "held_out": 1000}  # scenes a split
MIN_GAP = 4  # pixels between two objects' centres in x, and between their boxes


@dataclasses.dataclass
class Scenes:
    """Images and their captions.

    Each argument is also an attribute of the same name.

    Args:
        images: uint8 array of shape `(N, IMAGE_SIZE, IMAGE_SIZE, 3)`. RGB
            pixels.
        captions: list of str. `N` captions.
        boxes: list of int32 arrays of shape `(objects, 4)`. `N` arrays of
            `(x0, y0, x1, y1)` pixel boxes (inclusive), in the order the
            caption names the objects.
        counts: int32 array of shape `(N,)`. The object counts.
    """

    images: np.ndarray
    captions: list
    boxes: list
    counts: np.ndarray


def word_regions(caption, boxes):
    """The words of `caption` that name each object, with its box:
    `[(first_word, end_word, box)]`, one per object in caption order, spanning
    its size, colour and shape words (what `captions.word_boxes` reads).

    Args:
        caption: str. A caption of this corpus.
        boxes: array or list of shape `(objects, 4)`. The objects'
            `(x0, y0, x1, y1)` boxes, in caption order.

    Returns:
        A list of `(first_word, end_word, box)` tuples, `box` a tuple of int.

    Example:

        >>> caption = "a small red circle left of a large blue square"
        >>> word_regions(caption, [(1, 2, 9, 10), (30, 2, 50, 22)])
        [(1, 4, (1, 2, 9, 10)), (7, 10, (30, 2, 50, 22))]
    """
    shapes = [i for i, word in enumerate(caption.split()) if word in SHAPES]
    return [(i - 2, i + 1, tuple(int(v) for v in box)) for i, box in zip(shapes, boxes)]


def scenes_corpus(
    seed=0,
    train_size=SPLIT_SIZES["train"],
    valid_size=SPLIT_SIZES["valid"],
    test_size=SPLIT_SIZES["test"],
    held_out_size=SPLIT_SIZES["held_out"],
    max_objects=MAX_OBJECTS,
):
    """The splits `train`, `valid`, `test` and `held_out`, each a `Scenes` of 1 to `max_objects`
    objects each, drawn from `seed`.

    Args:
        seed: int. The seed of the `numpy.random.default_rng` that draws the
            scenes. Defaults to 0.
        train_size: int. Scenes of the `train` split. Defaults to 12000.
        valid_size: int. Scenes of the `valid` split. Defaults to 500.
        test_size: int. Scenes of the `test` split. Defaults to 1000.
        held_out_size: int. Scenes of the `held_out` split. Defaults to
            1000.
        max_objects: int. The most objects of a scene. Defaults to
            `MAX_OBJECTS` (4).

    Returns:
        A dict of the split names to `Scenes`.
    """
    rng = np.random.default_rng(seed)
    sizes = {"train": train_size, "valid": valid_size, "test": test_size, "held_out": held_out_size}
    return {
        split: draw_scenes(rng, count, split == "held_out", max_objects)
        for split, count in sizes.items()
    }


def draw_scenes(rng, count, held_out=False, max_objects=MAX_OBJECTS):
    """`count` scenes of 1 to `max_objects` objects: with `held_out`,
    each has a `HELD_OUT` pair; else none has one.

    Args:
        rng: numpy.random.Generator. Draws the scenes.
        count: int. The number of scenes.
        held_out: bool. Whether each scene has a `HELD_OUT` pair (else none
            has one). Defaults to False.
        max_objects: int. The most objects of a scene. Defaults to
            `MAX_OBJECTS` (4).

    Returns:
        A `Scenes`.
    """
    images = np.empty((count, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    captions, boxes, counts = [], [], np.empty(count, np.int32)
    for i in range(count):
        objects = _objects(rng, held_out, max_objects)
        images[i] = _render(rng, objects)
        captions.append(_caption(objects))
        boxes.append(np.array([obj["box"] for obj in objects], np.int32))
        counts[i] = len(objects)
    return Scenes(images, captions, boxes, counts)


def _objects(rng, held_out, max_objects):
    """1 to `max_objects` objects (dicts), sorted left to right,
    placed until the caption is unambiguous.
    """
    count = int(rng.integers(1, max_objects + 1))
    while True:
        objects = [_attributes(rng) for _ in range(count)]
        pairs = [(obj["colour"], obj["shape"]) in HELD_OUT for obj in objects]
        if any(pairs) != held_out:
            continue
        if _place(rng, objects):
            return sorted(objects, key=lambda obj: obj["x"])


def _attributes(rng):
    size = str(rng.choice(list(SIZES)))
    low, high = SIZES[size]
    return {
        "size": size,
        "colour": str(rng.choice(list(COLOURS))),
        "shape": str(rng.choice(SHAPES)),
        "radius": int(rng.integers(low, high + 1)),
    }


def _place(rng, objects, tries=50):
    """Gives each object a centre and a box apart from the others'; False if it found none."""
    for obj in objects:
        r = obj["radius"]
        for _ in range(tries):
            x, y = (int(v) for v in rng.integers(r + 1, IMAGE_SIZE - r - 1, size=2))
            box = (x - r, y - r, x + r, y + r)
            if all(_apart(box, (x, y), other) for other in objects if "box" in other):
                obj.update(x=x, y=y, box=box)
                break
        else:
            return False
    ordered = sorted(objects, key=lambda obj: obj["x"])
    return all(_relation(a, b) is not None for a, b in zip(ordered, ordered[1:]))


def _apart(box, centre, other):
    x0, y0, x1, y1 = other["box"]
    separate = (
        box[2] + MIN_GAP <= x0
        or x1 + MIN_GAP <= box[0]
        or box[3] + MIN_GAP <= y0
        or y1 + MIN_GAP <= box[1]
    )
    return separate and abs(centre[0] - other["x"]) >= MIN_GAP


def _relation(a, b):
    """Where `b` (to the right of `a`) stands from `a`: "left of",
    "above", "below", or None if unclear.
    """
    dx, dy = b["x"] - a["x"], b["y"] - a["y"]
    if dx >= 1.5 * abs(dy):
        return "left of"
    if abs(dy) >= 1.5 * dx:
        return "above" if dy > 0 else "below"
    return None


def _caption(objects):
    words = []
    for i, obj in enumerate(objects):
        if i:
            words.append(_relation(objects[i - 1], obj))
        words += ["a", obj["size"], obj["colour"], obj["shape"]]
    return " ".join(words)


def _render(rng, objects):
    background = rng.uniform(0.0, 0.35, size=3)
    image = np.broadcast_to(background, (IMAGE_SIZE, IMAGE_SIZE, 3)).copy()
    rows, columns = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE]
    for obj in objects:
        dx, dy, r = columns - obj["x"], rows - obj["y"], obj["radius"]
        inside = {
            "circle": dx * dx + dy * dy <= r * r,
            "square": (np.abs(dx) <= r) & (np.abs(dy) <= r),
            "triangle": (dy <= r) & (dy >= -r) & (2 * np.abs(dx) <= dy + r),  # apex up
            "diamond": np.abs(dx) + np.abs(dy) <= r,
        }[obj["shape"]]
        colour = np.clip(np.array(COLOURS[obj["colour"]]) + rng.uniform(-0.08, 0.08, size=3), 0, 1)
        image[inside] = colour
    image += rng.normal(0.0, 0.04, size=image.shape)
    return np.round(255 * np.clip(image, 0, 1)).astype(np.uint8)
