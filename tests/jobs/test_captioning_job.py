"""`keras-attn train captioner`: the built-in scenes learned and exported, a user's folder with bad
files, `keras-attn caption` and `plot-attention` on the export."""

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from keras_attn import cli
from keras_attn.config import CaptionConfig
from keras_attn.jobs import captioning
from pipelines.scenes import scenes_corpus, word_regions

# The test configuration: one object per scene, the tiny preset, a few hundred steps.
LEARNING = dict(
    preset="tiny",
    builtin_scenes=3000,
    builtin_objects=1,
    epochs=4,
    batch_size=32,
    learning_rate=3e-3,
)
EVAL_SCENES = 200  # in each of the validation, test and held-out splits
EXACT_MATCH_BAR = 0.5  # 73.6% in a single run here; an untrained model has 0


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The job on the built-in scenes, run once: its result, log and export root."""
    root = tmp_path_factory.mktemp("captioner")
    lines = []
    config = CaptionConfig(
        **LEARNING,
        builtin_eval_size=EVAL_SCENES,
        run_dir=str(root / "run"),
        export_root=str(root / "exports"),
        verbose=0,
    )
    return captioning.run(config, log=lines.append), lines


@pytest.mark.slow
def test_soft_attention_learns_the_scenes_and_the_export_captions_as_the_job_did(
    trained, tmp_path, capsys
):
    result, lines = trained
    assert result.metrics["test"]["exact_match"] >= EXACT_MATCH_BAR, lines
    assert any(line.startswith("held_out: exact match") for line in lines)
    test = scenes_corpus(
        seed=0,
        train_size=LEARNING["builtin_scenes"],
        valid_size=EVAL_SCENES,
        test_size=EVAL_SCENES,
        held_out_size=EVAL_SCENES,
        max_objects=1,
    )["test"]
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"scene{i}.png"))
        Image.fromarray(test.images[i]).save(paths[-1])
    assert cli.main(["caption", result.export_path, *paths]) == 0
    assert capsys.readouterr().out.splitlines() == result.metrics["test"]["hypotheses"][:3]

    figure = tmp_path / "plots" / "attention.png"
    assert cli.main(["plot-attention", result.export_path, paths[0], "--out", str(figure)]) == 0
    assert Image.open(figure).size[0] > 100


@pytest.mark.slow
def test_caption_names_an_unreadable_file_and_still_captions_the_others(trained, tmp_path, capfd):
    """Standard error at the descriptor: libjpeg's own line on a damaged JPEG is not there."""
    result, _ = trained
    (tmp_path / "notes.png").write_text("not an image")
    good = tmp_path / "good.png"
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(good)
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(tmp_path / "whole.jpg")
    damaged = tmp_path / "damaged.jpg"
    damaged.write_bytes((tmp_path / "whole.jpg").read_bytes()[:300])
    files = [tmp_path / "notes.png", tmp_path / "missing.png", damaged, good]
    assert cli.main(["caption", result.export_path, *map(str, files)]) == 2
    printed = capfd.readouterr()
    out = printed.out.splitlines()
    assert out[:3] == ["", "", ""] and out[3]
    assert printed.err.splitlines() == [
        f"keras-attn: error: {files[0]}: not a readable PNG, JPEG, GIF or BMP image (an empty "
        "line printed)",
        f"keras-attn: error: {files[1]}: No such file or directory (an empty line printed)",
        f"keras-attn: error: {damaged}: not a readable PNG, JPEG, GIF or BMP image (an empty "
        "line printed)",
    ]


@pytest.mark.slow
def test_a_users_folder_trains_skipping_bad_images_and_empty_captions_supervised_by_regions(
    tmp_path,
):
    """Half the images are stored at twice the size, their regions in
    their own pixels; every third caption names no regions."""
    scenes = scenes_corpus(seed=2, train_size=40, valid_size=1, test_size=1, held_out_size=1)[
        "train"
    ]
    images = tmp_path / "images"
    images.mkdir()
    lines = []
    for i, (image, caption, boxes) in enumerate(zip(scenes.images, scenes.captions, scenes.boxes)):
        stream, scale = io.BytesIO(), 1 + i % 2
        Image.fromarray(image).resize((64 * scale, 64 * scale)).save(
            stream, "JPEG" if i % 2 else "PNG"
        )
        (images / f"{i}.img").write_bytes(stream.getvalue())
        regions = [
            [
                first,
                end,
                *(int(v) * scale for v in box[:2]),
                *(int(v) * scale + scale - 1 for v in box[2:]),
            ]
            for first, end, box in word_regions(caption, boxes)
        ]
        lines.append(f"{i}.img\t{caption}" + (f"\t{json.dumps(regions)}" if i % 3 else ""))
    (images / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n cut")
    lines += ["broken.png\ta small red circle", "missing.png\ta large blue square", "0.img\t  "]
    (tmp_path / "captions.tsv").write_text("\n".join(lines) + "\n")
    log = []
    config = CaptionConfig(
        data=str(images),
        captions=str(tmp_path / "captions.tsv"),
        preset="tiny",
        epochs=1,
        batch_size=8,
        run_dir=str(tmp_path / "run"),
        export=False,
        verbose=0,
        attention_supervision=1.0,
    )
    splits = captioning.load_splits(
        config, captioning.read_caption_files(config), log=lambda line: None
    )
    every = {
        name: regions
        for split in ("train", "valid")
        for name, regions in zip(
            [splits[split].names[row] for row in splits[split].image_rows], splits[split].regions
        )
    }
    # back in the 64-pixel square
    for i, (caption, boxes) in enumerate(zip(scenes.captions, scenes.boxes)):
        assert every[str(images / f"{i}.img")] == (
            tuple(word_regions(caption, boxes)) if i % 3 else ()
        ), i
    result = captioning.run(config, log=log.append)
    skipped = next(line for line in log if "skipped" in line)
    assert skipped == (
        f"{tmp_path / 'captions.tsv'}: skipped 2 of 42 images that are missing or no readable PNG, "
        f"JPEG, GIF or BMP file: {images / 'broken.png'}, {images / 'missing.png'}"
    )
    assert any(
        line.startswith(
            "data: 38 training captions of 38 images, 2 validation captions of 2 images"
        )
        for line in log
    ), log
    assert result.metrics["test"]["images"] == 2 and result.steps == 5
    assert os.path.isfile(os.path.join(config.run_dir, "vocab.txt"))


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "captions.tsv: no captions (0 empty ones skipped)"),
        ("a.png\tone\n", "captions.tsv: none of its 1 images can be read (the first: "),
    ],
)
def test_a_captions_file_with_nothing_to_train_on_is_one_line(tmp_path, capsys, content, message):
    (tmp_path / "captions.tsv").write_text(content)
    assert (
        cli.main(
            [
                "train",
                "captioner",
                "--data",
                str(tmp_path),
                "--captions",
                str(tmp_path / "captions.tsv"),
                "--run-dir",
                str(tmp_path / "run"),
                "--no-export",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_jobs_built_in_splits_are_the_corpus_own_so_the_benchmark_scores_held_out_scenes(
    tmp_path,
):
    """Without --builtin-eval-size the job draws the corpus's split sizes, as
    benchmarks/captioning.py does.
    """
    splits = captioning.load_splits(CaptionConfig(builtin_scenes=20, run_dir=str(tmp_path)), {})
    corpus = scenes_corpus(seed=0, train_size=20)
    for split in ("train", "valid", "test", "held_out"):
        assert splits[split].captions == corpus[split].captions, split
    np.testing.assert_array_equal(splits["held_out"].images, corpus["held_out"].images)
