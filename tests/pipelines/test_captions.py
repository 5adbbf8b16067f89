"""Captions files (TSV and COCO JSON) and the per-epoch batches of captioning."""

import json

import numpy as np
import pytest

from pipelines.captions import caption_epochs, read_captions
from pipelines.preprocessors import CaptionPreprocessor
from pipelines.text import DataError
from pipelines.tokenizers import learn_wordpiece_vocabulary


def test_tab_separated_captions_share_their_image_and_empty_ones_are_counted(tmp_path):
    (tmp_path / "captions.tsv").write_text("a.png\ta red circle\nb.png\ta blue square\na.png\tA red ball \n"
                                           "c.png\t\n\n")
    captions = read_captions(tmp_path / "captions.tsv")
    assert captions.paths == [str(tmp_path / "a.png"), str(tmp_path / "b.png")]
    assert captions.captions == ["a red circle", "a blue square", "A red ball"]
    assert captions.images == [0, 1, 0]
    assert captions.skipped_empty == 2


def test_coco_captions_json_gives_the_same_pairs(tmp_path):
    document = {"images": [{"id": 7, "file_name": "a.png"}, {"id": 9, "file_name": "b.png"}],
                "annotations": [{"image_id": 9, "caption": "a blue square"}, {"image_id": 7, "caption": "a red one"},
                                {"image_id": 9, "caption": " "}]}
    (tmp_path / "captions.json").write_text(json.dumps(document))
    captions = read_captions(tmp_path / "captions.json", image_folder="images")
    assert captions.paths == ["images/b.png", "images/a.png"]
    assert captions.captions == ["a blue square", "a red one"] and captions.images == [0, 1]
    assert captions.skipped_empty == 1


@pytest.mark.parametrize("content, message", [
    ("{not json", "captions.json: not valid JSON"),
    ('{"annotations": []}', "captions.json: not COCO's captions layout"),
    ('{"images": [{"id": 1, "file_name": "a.png"}], "annotations": [{"image_id": 2, "caption": "x"}]}',
     "captions.json: annotation 0: no image with id 2"),
])
def test_a_wrong_json_file_is_one_line_naming_it(tmp_path, content, message):
    (tmp_path / "captions.json").write_text(content)
    with pytest.raises(DataError) as error:
        read_captions(tmp_path / "captions.json")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_line_without_a_tab_is_named(tmp_path):
    (tmp_path / "captions.tsv").write_text("a.png\ta circle\nb.png a square\n")
    with pytest.raises(DataError, match=r"captions.tsv:2: expected at least 2 tab-separated columns"):
        read_captions(tmp_path / "captions.tsv")


def test_each_epoch_sees_every_pair_once_in_an_order_of_its_own():
    captions = [f"caption {i}" for i in range(10)]
    images = np.arange(5, dtype=np.uint8)[:, None, None, None] * np.ones((5, 4, 4, 3), np.uint8)
    preprocessor = CaptionPreprocessor(learn_wordpiece_vocabulary(captions, 40), image_size=4)
    epochs = caption_epochs(images, captions, preprocessor, batch_size=4, seed=3, image_rows=np.arange(10) // 2)

    def seen(epoch):  # (the image's pixel value, the caption's number) of each pair
        return [(int(inputs["image"][row, 0, 0, 0] * 255 + 0.5), int(preprocessor.detokenize(
            target_out[row:row + 1]).numpy()[0].split()[1])) for inputs, target_out in epochs(epoch)
            for row in range(len(target_out))]

    first = seen(0)
    assert sorted(first) == [(i // 2, i) for i in range(10)]  # every pair once, with its own image
    assert seen(0) == first and seen(1) != first
