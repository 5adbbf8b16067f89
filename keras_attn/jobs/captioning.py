"""The captioning job: images and captions → tokenizer → fit → caption the test images → export.

`run(CaptionConfig(...))` is what `keras-attn train captioner` runs. Without
`--data`/`--captions` it trains on the built-in generated scenes
(`pipelines.scenes`) and also scores their held-out-combinations split. A
user's images are decoded once (`pipelines.images.read_images`); those that
cannot be read are skipped, counted and named. What every job shares (the
strategy, the setup report, the run folder, the runner) is
`keras_attn.jobs.common`'s and `keras_attn.training.runner`'s.
"""

import dataclasses
import hashlib
import os
import time

import numpy as np

from keras_attn import evaluation, run_folder, serving
from keras_attn.jobs import common
from keras_attn.jobs.translation import TranslationResult, compile_task
from keras_attn.models import Captioner
from keras_attn.training.runner import train
from pipelines import captions as caption_files
from pipelines import scenes, text, tokenizers
from pipelines.captions import caption_dataset, caption_epochs, resized_regions, word_boxes
from pipelines.images import read_images
from pipelines.preprocessors import CaptionPreprocessor

SHOWN_SKIPPED = 3  # unreadable images named in the log; the rest are counted


@dataclasses.dataclass
class CaptionSplit:
    """Images and their captions: `captions[i]` describes
    `images[image_rows[i]]`, named `names[image_rows[i]]`; `regions[i]` are the
    regions its words name, in pixels of the images as resized (empty: none)."""

    images: np.ndarray
    captions: list
    image_rows: np.ndarray
    names: list
    regions: list = dataclasses.field(default_factory=list)

    def boxes(self, preprocessor):
        """Each caption's tokens' boxes (`pipelines.captions.word_boxes`)."""
        return word_boxes(self.captions, self.regions or [()] * len(self.captions), preprocessor)

    def references(self):
        """Per image, its captions."""
        per_image = [[] for _ in self.names]
        for row, caption in zip(self.image_rows, self.captions):
            per_image[row].append(caption)
        return per_image


@dataclasses.dataclass
class CaptionResult(TranslationResult):
    """What a run gives back: `jobs.translation.TranslationResult`'s fields, with

    Attributes:
        metrics: `{split: evaluation.caption_scores}` of the test split (and
            the built-in held-out one), each with its `hypotheses`, plus
            `parameters` and `train_seconds`.
        samples: `(image name, caption)` of the first test images.
    """


def read_caption_files(config):
    """The captions files of `config` (`CaptionedImages` by split: `train`,
    and `valid`, `test` when given), or `{}` for the built-in scenes. Read
    before TensorFlow starts, so a mistake in them stops the job at once."""
    files = {"train": config.captions, "valid": config.valid_captions, "test": config.test_captions}
    return {
        split: caption_files.read_captions(path, config.data)
        for split, path in files.items()
        if path
    }


def load_splits(config, listed, log=print):
    """`{"train", "valid", "test"}` (and the built-in `"held_out"`) → `CaptionSplit`.

    Args:
        listed: `read_caption_files(config)`.
    """
    if not listed:
        chosen = {}  # what is not given is the corpus's own
        if config.builtin_eval_size:
            chosen = dict.fromkeys(
                ("valid_size", "test_size", "held_out_size"), config.builtin_eval_size
            )
        if config.builtin_objects:
            chosen["max_objects"] = config.builtin_objects
        corpus = scenes.scenes_corpus(seed=config.seed, train_size=config.builtin_scenes, **chosen)
        return {
            split: CaptionSplit(
                data.images,
                data.captions,
                np.arange(len(data.captions)),
                [f"built-in {split} scene {i}" for i in range(len(data.captions))],
                _object_regions(data, config.image_size),
            )
            for split, data in corpus.items()
        }
    splits = {split: _decoded(files, config, log) for split, files in listed.items()}
    if "valid" not in splits:
        splits["train"], splits["valid"] = _hold_out(splits["train"], config)
    splits.setdefault("test", splits["valid"])
    return splits


def _object_regions(scenes_split, image_size):
    """Each built-in caption's objects' words and boxes, in pixels of `image_size` squares."""
    regions = [
        scenes.word_regions(caption, boxes)
        for caption, boxes in zip(scenes_split.captions, scenes_split.boxes)
    ]
    return resized_regions(regions, [scenes_split.images.shape[1:3]] * len(regions), image_size)


def _decoded(listed, config, log):
    """The `CaptionSplit` of a captions file's readable images; a file without any is refused."""
    if not len(listed):
        raise text.DataError(
            f"{listed.origin}: no captions ({listed.skipped_empty} empty ones skipped)"
        )
    pixels, readable, sizes = read_images(listed.paths, config.image_size)
    bad = [path for path, ok in zip(listed.paths, readable) if not ok]
    if bad:
        shown = ", ".join(bad[:SHOWN_SKIPPED]) + (
            f" and {len(bad) - SHOWN_SKIPPED} more" if len(bad) > SHOWN_SKIPPED else ""
        )
        log(
            f"{listed.origin}: skipped {len(bad)} of {len(listed.paths)} images that are missing "
            f"or no readable PNG, JPEG, GIF or BMP file: {shown}"
        )
    if not readable.any():
        raise text.DataError(
            f"{listed.origin}: none of its {len(listed.paths)} images can be read "
            f"(the first: {listed.paths[0]})"
        )
    new_row = np.cumsum(readable) - 1
    kept = [i for i, image in enumerate(listed.images) if readable[image]]
    regions = (
        resized_regions(
            [listed.regions[i] for i in kept],
            [sizes[listed.images[i]] for i in kept],
            config.image_size,
        )
        if listed.regions
        else []
    )
    return CaptionSplit(
        pixels[readable],
        [listed.captions[i] for i in kept],
        new_row[np.asarray(listed.images)[kept]],
        [p for p, ok in zip(listed.paths, readable) if ok],
        regions,
    )


def _hold_out(split, config):
    """Holds out a fraction of the images (with all their captions) for validation."""
    if len(split.names) < 2:
        raise text.DataError(
            f"{config.captions}: one readable image; give --valid-captions or more images"
        )
    _, held = text.hold_out(len(split.names), config.valid_fraction, config.seed)
    held = np.isin(np.arange(len(split.names)), held)

    def subset(images):
        new_row = np.cumsum(images) - 1
        rows = [i for i, row in enumerate(split.image_rows) if images[row]]
        return CaptionSplit(
            split.images[images],
            [split.captions[i] for i in rows],
            new_row[split.image_rows[rows]],
            [n for n, keep in zip(split.names, images) if keep],
            [split.regions[i] for i in rows] if split.regions else [],
        )

    return subset(~held), subset(held)


def build_tokenizer(config, train, chief=True):
    """Learns the captions' WordPiece vocabulary, or reuses the run folder's (`vocab.txt`)."""
    path = run_folder.path(config.run_dir, run_folder.VOCABULARY)
    if common.wait_for_chief([path], chief):
        return tokenizers.WordPieceTokenizer.load(path, lowercase=config.lowercase)
    vocabulary = tokenizers.learn_wordpiece_vocabulary(
        train.captions, vocabulary_size=config.vocabulary_size, lowercase=config.lowercase
    )
    tokenizer = tokenizers.WordPieceTokenizer(vocabulary, lowercase=config.lowercase)
    tokenizer.save(path)
    return tokenizer


def run(config, log=print):
    """Trains, captions the test images, exports; returns a
    `CaptionResult` (as `jobs.translation.run`).
    """
    started = time.time()
    listed = read_caption_files(config)
    chief = common.start(config, log)
    splits = load_splits(config, listed, log)
    train_split, valid_split = splits["train"], splits["valid"]
    if config.attention_supervision and not any(train_split.regions):
        raise text.DataError(
            f"{config.captions}: --attention-supervision, but no caption names the regions its "
            f"words look at (a third column {caption_files.REGIONS_FIELD}; see the captioning "
            "guide)"
        )
    log(
        f"data: {common.counted(len(train_split.captions), 'training caption')} of "
        f"{common.counted(len(train_split.names), 'image')}, "
        f"{common.counted(len(valid_split.captions), 'validation caption')} of "
        f"{common.counted(len(valid_split.names), 'image')}"
    )
    os.makedirs(config.run_dir, exist_ok=True)
    common.bind_run_folder(config, _fingerprint_lines(train_split), chief)
    tokenizer = build_tokenizer(config, train_split, chief)
    log(f"vocabulary: {tokenizer.vocabulary_size} WordPieces")
    preprocessor = CaptionPreprocessor(
        tokenizer, config.image_size, config.max_sequence_length, lowercase=config.lowercase
    )

    supervised = bool(config.attention_supervision)

    def make_datasets(global_batch_size):
        return (
            caption_epochs(
                train_split.images,
                train_split.captions,
                preprocessor,
                global_batch_size,
                seed=config.seed,
                image_rows=train_split.image_rows,
                boxes=train_split.boxes(preprocessor) if supervised else None,
            ),
            caption_dataset(
                valid_split.images,
                valid_split.captions,
                preprocessor,
                global_batch_size,
                shuffle=False,
                image_rows=valid_split.image_rows,
                boxes=valid_split.boxes(preprocessor) if supervised else None,
            ),
        )

    def build_model():
        task = {"attention_supervision": config.attention_supervision} if supervised else {}
        return Captioner.from_preset(
            config.preset, preprocessor, **config.backbone_arguments(), **task
        )

    train_started = time.time()
    result = train(
        config,
        build_model=build_model,
        make_datasets=make_datasets,
        compile_model=lambda model, total_steps: compile_task(model, config, total_steps),
        callbacks=config.callbacks(),
    )
    model, train_seconds = result.model, time.time() - train_started
    log(common.describe_training(config, result, time.time() - started))
    if not result.is_chief:
        return CaptionResult(
            None,
            {},
            [],
            result.history,
            model,
            result.steps,
            already_finished=result.already_finished,
        )

    metrics = {"parameters": model.count_params(), "train_seconds": round(train_seconds)}
    for split in ("test", "held_out"):
        if split in splits:
            metrics[split] = evaluate(model, splits[split], config.beam_width)
            log(f"{split}: {format_scores(metrics[split])}")
    path, new_export = None, False
    if config.export:
        path, new_export = serving.export_if_changed(
            serving.CaptionServer(model), config.export_root, config.name, force=config.force_export
        )
    test = splits["test"]
    samples = list(
        zip(test.names[: config.samples], metrics["test"]["hypotheses"][: config.samples])
    )
    return CaptionResult(
        export_path=path,
        metrics=metrics,
        samples=samples,
        history=result.history,
        model=model,
        steps=result.steps,
        new_export=new_export,
        already_finished=result.already_finished,
    )


def _fingerprint_lines(split):
    """What binds a run folder to its training data: each caption
    with its image's pixels' digest.
    """
    digests = [hashlib.sha256(image.tobytes()).hexdigest() for image in split.images]
    return (f"{digests[row]}\t{caption}" for row, caption in zip(split.image_rows, split.captions))


def evaluate(task, split, beam_width, batch_size=64):
    """`evaluation.caption_scores` of `task`'s captions of each image
    of `split`, with the `hypotheses`.
    """
    hypotheses = []
    for start in range(0, len(split.images), batch_size):
        hypotheses += task.generate(split.images[start : start + batch_size], beam_width=beam_width)
    return {**evaluation.caption_scores(hypotheses, split.references()), "hypotheses": hypotheses}


def format_scores(scores):
    """The one-line summary of `evaluate`'s scores."""
    return (
        f"exact match {scores['exact_match']:.1%}, BLEU-4 {scores['bleu']:.2f} on "
        f"{scores['images']} images ({scores['signature']})"
    )
