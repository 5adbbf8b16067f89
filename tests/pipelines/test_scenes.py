"""The generated scenes: one caption per image that says what the
boxes show, and held-out pairs kept apart.
"""

import numpy as np

from pipelines import scenes


def _objects(caption):
    words = caption.split()
    return [tuple(words[i - 2 : i + 1]) for i, word in enumerate(words) if word in scenes.SHAPES]


def test_captions_name_the_objects_left_to_right_with_their_relations():
    corpus = scenes.scenes_corpus(
        seed=1, train_size=300, valid_size=10, test_size=10, held_out_size=50
    )
    train = corpus["train"]
    assert set(train.counts) == {1, 2, 3, 4}
    for image, caption, boxes in zip(train.images, train.captions, train.boxes):
        named = _objects(caption)
        assert len(named) == len(boxes)
        centres = [((x0 + x1) / 2, (y0 + y1) / 2) for x0, y0, x1, y1 in boxes]
        assert [x for x, _ in centres] == sorted(x for x, _ in centres)
        expected = []
        for k, (size, colour, shape) in enumerate(named):
            if k:
                (ax, ay), (bx, by) = centres[k - 1], centres[k]
                expected.append(
                    "left of" if bx - ax >= 1.5 * abs(by - ay) else "above" if by > ay else "below"
                )
            expected.append(f"a {size} {colour} {shape}")
        assert caption == " ".join(expected)
        for (size, colour, _), (x0, y0, x1, y1) in zip(named, boxes):
            colour_of_centre = image[(y0 + y1) // 2, (x0 + x1) // 2] / 255
            # the named colour is there
            assert np.abs(colour_of_centre - scenes.COLOURS[colour]).max() < 0.3
            assert (x1 - x0) // 2 in range(*np.add(scenes.SIZES[size], (0, 1)))


def test_held_out_pairs_appear_only_in_their_split_and_the_seed_fixes_the_corpus():
    corpus = scenes.scenes_corpus(
        seed=2, train_size=400, valid_size=50, test_size=50, held_out_size=60
    )
    for split, data in corpus.items():
        has_pair = [
            any((c, s) in scenes.HELD_OUT for _, c, s in _objects(caption))
            for caption in data.captions
        ]
        assert all(has_pair) if split == "held_out" else not any(has_pair)
    again = scenes.scenes_corpus(
        seed=2, train_size=400, valid_size=50, test_size=50, held_out_size=60
    )
    assert again["test"].captions == corpus["test"].captions
    np.testing.assert_array_equal(again["test"].images, corpus["test"].images)
