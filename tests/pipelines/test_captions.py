"""Captions files (TSV and COCO JSON) and the per-epoch batches of captioning."""

import json

import numpy as np
import pytest

from pipelines.captions import caption_dataset, caption_epochs, read_captions, word_boxes
from pipelines.preprocessors import CaptionPreprocessor
from pipelines.text import DataError
from pipelines.tokenizers import learn_wordpiece_vocabulary


def test_tab_separated_captions_share_their_image_and_empty_ones_are_counted(tmp_path):
    (tmp_path / "captions.tsv").write_text(
        "a.png\ta red circle\nb.png\ta blue square\na.png\tA red ball \nc.png\t\n\n"
    )
    captions = read_captions(tmp_path / "captions.tsv")
    assert captions.paths == [str(tmp_path / "a.png"), str(tmp_path / "b.png")]
    assert captions.captions == ["a red circle", "a blue square", "A red ball"]
    assert captions.images == [0, 1, 0]
    assert captions.skipped_empty == 2


def test_coco_captions_json_gives_the_same_pairs(tmp_path):
    document = {
        "images": [{"id": 7, "file_name": "a.png"}, {"id": 9, "file_name": "b.png"}],
        "annotations": [
            {"image_id": 9, "caption": "a blue square"},
            {"image_id": 7, "caption": "a red one"},
            {"image_id": 9, "caption": " "},
        ],
    }
    (tmp_path / "captions.json").write_text(json.dumps(document))
    captions = read_captions(tmp_path / "captions.json", image_folder="images")
    assert captions.paths == ["images/b.png", "images/a.png"]
    assert captions.captions == ["a blue square", "a red one"] and captions.images == [0, 1]
    assert captions.skipped_empty == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "captions.json: not valid JSON"),
        ('{"annotations": []}', "captions.json: not COCO's captions layout"),
        (
            '{"images": [{"id": 1, "file_name": "a.png"}], "annotations": [{"image_id": 2, '
            '"caption": "x"}]}',
            "captions.json: annotation 0: no image with id 2",
        ),
    ],
)
def test_a_wrong_json_file_is_one_line_naming_it(tmp_path, content, message):
    (tmp_path / "captions.json").write_text(content)
    with pytest.raises(DataError) as error:
        read_captions(tmp_path / "captions.json")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_third_column_names_the_regions_of_a_captions_words_and_lines_without_it_read_as_before(
    tmp_path,
):
    lines = [
        "a.png\ta small red circle left of a blue square",
        "b.png\ta blue square",
        "a.png\ta red circle",
    ]
    (tmp_path / "plain.tsv").write_text("\n".join(lines) + "\n")
    lines[0] += "\t[[1, 4, 2, 3, 10, 12], [7, 9, 30.5, 0, 40, 9]]"
    lines[2] += "\t[]"
    (tmp_path / "regions.tsv").write_text("\n".join(lines) + "\n")
    plain, regions = read_captions(tmp_path / "plain.tsv"), read_captions(tmp_path / "regions.tsv")
    assert plain.regions == []
    assert regions.regions == [
        ((1, 4, (2.0, 3.0, 10.0, 12.0)), (7, 9, (30.5, 0.0, 40.0, 9.0))),
        (),
        (),
    ]
    assert (regions.paths, regions.captions, regions.images, regions.skipped_empty) == (
        plain.paths,
        plain.captions,
        plain.images,
        plain.skipped_empty,
    )
    assert regions.subset([2, 0], "two").regions == [(), regions.regions[0]]
    document = {
        "images": [{"id": 1, "file_name": "a.png"}],
        "annotations": [
            {"image_id": 1, "caption": "a red circle", "regions": [[1, 3, 0, 0, 5, 5]]},
            {"image_id": 1, "caption": "a circle"},
        ],
    }
    (tmp_path / "captions.json").write_text(json.dumps(document))
    assert read_captions(tmp_path / "captions.json").regions == [
        ((1, 3, (0.0, 0.0, 5.0, 5.0)),),
        (),
    ]


@pytest.mark.parametrize(
    "field, message",
    [
        ("[[1, 3, 0, 0", "captions.tsv:2: the regions are not valid JSON"),
        (
            "[[1, 3, 0, 0, 5]]",
            "captions.tsv:2: the regions must be [[first_word, end_word, x0, y0, x1, y1], ...], "
            "got [1, 3, 0, 0, 5]",
        ),
        ('[["a", 3, 0, 0, 5, 5]]', "captions.tsv:2: the regions must be"),
        (
            "[[1, 4, 0, 0, 5, 5]]",
            "captions.tsv:2: region [1, 4, 0, 0, 5, 5]: words 1 to 4 are not a span of the "
            "caption's 3 words (end_word is exclusive)",
        ),
        ("[[2, 2, 0, 0, 5, 5]]", "words 2 to 2 are not a span"),
        (
            "[[1, 3, 6, 0, 5, 5]]",
            "captions.tsv:2: region [1, 3, 6, 0, 5, 5]: the box must have 0 <= x0 <= x1",
        ),
    ],
)
def test_a_wrong_regions_field_is_one_line_naming_its_line(tmp_path, field, message):
    (tmp_path / "captions.tsv").write_text(f"a.png\ta circle\nb.png\ta red square\t{field}\n")
    with pytest.raises(DataError) as error:
        read_captions(tmp_path / "captions.tsv")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_word_boxes_follow_the_tokens_and_ride_with_their_pairs_in_every_epoch():
    """Each token of the named words gets its region's box (a word of
    two WordPieces: both); the others and the padding get none; the
    batches carry them with their own captions whatever the order."""
    captions = ["a red circle", "a reddish square", "a circle"]
    preprocessor = CaptionPreprocessor(
        learn_wordpiece_vocabulary(["a red circle", "a blue square", "a reddish circle"], 40),
        image_size=8,
        max_length=12,
    )
    regions = [[(1, 3, (0, 0, 3, 3))], [(1, 2, (4, 4, 7, 7))], []]
    boxes = word_boxes(captions, regions, preprocessor)
    pieces = [preprocessor.tokenizer.tokenize(word).shape[0] for word in ("a", "reddish")]
    assert pieces[0] == 1 and pieces[1] > 1  # "reddish" is split into WordPieces
    named = (boxes >= 0).all(-1)
    assert named[0].tolist() == [False, True, True] + [False] * 9
    assert named[1].tolist() == [False] + [True] * pieces[1] + [False] * (11 - pieces[1])
    assert not named[2].any() and (boxes[~named] == -1).all()
    np.testing.assert_array_equal(boxes[1, 1], [4, 4, 7, 7])
    images = np.zeros((3, 8, 8, 3), np.uint8)
    for epoch in (0, 1):
        for _, y in caption_epochs(
            images, captions, preprocessor, batch_size=2, seed=epoch, boxes=boxes
        )(epoch):
            for row, target_out in enumerate(y["target_out"].numpy()):
                caption = captions.index(
                    preprocessor.detokenize(target_out[None]).numpy()[0].decode()
                )
                np.testing.assert_array_equal(y["boxes"][row], boxes[caption, : len(target_out)])
    plain = next(iter(caption_dataset(images, captions, preprocessor, 3, shuffle=False)))
    assert not isinstance(plain[1], dict)  # without boxes, the targets are target_out as before


def test_a_line_without_a_tab_is_named(tmp_path):
    (tmp_path / "captions.tsv").write_text("a.png\ta circle\nb.png a square\n")
    with pytest.raises(
        DataError, match=r"captions.tsv:2: expected at least 2 tab-separated columns"
    ):
        read_captions(tmp_path / "captions.tsv")


def test_each_epoch_sees_every_pair_once_in_an_order_of_its_own():
    captions = [f"caption {i}" for i in range(10)]
    images = np.arange(5, dtype=np.uint8)[:, None, None, None] * np.ones((5, 4, 4, 3), np.uint8)
    preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(captions, 40), image_size=4)
    epochs = caption_epochs(
        images, captions, preprocessor, batch_size=4, seed=3, image_rows=np.arange(10) // 2
    )

    def seen(epoch):  # (the image's pixel value, the caption's number) of each pair
        return [
            (
                int(inputs["image"][row, 0, 0, 0] * 255 + 0.5),
                int(preprocessor.detokenize(target_out[row : row + 1]).numpy()[0].split()[1]),
            )
            for inputs, target_out in epochs(epoch)
            for row in range(len(target_out))
        ]

    first = seen(0)
    assert sorted(first) == [(i // 2, i) for i in range(10)]  # every pair once, with its own image
    assert seen(0) == first and seen(1) != first
