"""Show, Attend and Tell on the generated scenes: exact match, BLEU-4 and grounding, by attention.

    python -m benchmarks.captioning --attention soft --epochs 10
    python -m benchmarks.captioning --attention none --epochs 10
    python -m benchmarks.captioning --attention hard --hard-estimator reinforce --train-size 3000 \
        --probe 0 100 300

Trains a `Captioner` (preset `--preset`) on the built-in scenes corpus
(`pipelines.scenes`, seed 0) with `fit`, then captions the test split and
the held-out-combinations split with greedy search (hard attention's model
also reading the expectation instead of the argmax cell, on the test split)
and reports, per split and per object count: exact match, corpus BLEU-4 (sacrebleu, on the
captions as written: lowercase words) and, with attention, grounding: for
each word of each object the caption names right (its place in the
left-to-right order, its size, colour and shape), whether the attention's
peak cell when the word's first token is written has its centre inside the object's box
(chance: the share of cell centres inside the box), and attention
correctness as Liu et al. measure it: per object, the attention's mass
inside its box, the largest over its words (chance: the box's share of the
cells).

`--probe STEPS...` measures hard attention's REINFORCE estimator instead, after
each number of training steps: on one fixed batch and 8 draws of the
attention samples, the mean and the spread of the cross-entropy's gradient
and of the decoder's own loss's (the REINFORCE term and the entropy bonus;
their signal-to-noise ratio: the norm of the mean over the root mean square
deviation), the reward log p(y|s) per image
(its spread over images and over draws, its correlation with the caption's
length) and the moving-average baseline.
"""

import argparse
import json
import time

import numpy as np

from keras_attn.config import CAPTION_POOLINGS, HARD_ESTIMATORS
from keras_attn.models.captioner import ATTENTIONS
from pipelines.captions import word_starts
from pipelines.scenes import SPLIT_SIZES


def grounding(weights, captions, truths, boxes, grid, image_size, tokenizer):
    """Where the attention looks while writing the objects a caption names right: by object size
    (`SIZES`) and `"all"`, `(peak hits, words, chance's sum, mass, objects, area's sum)`.

    For each word of each such object (its size, colour and shape words, as the
    truth's), whether the attention's peak cell has its centre inside the object's
    box, against the share of cell centres inside (chance); and for each such object,
    as Liu et al. measure attention correctness, the attention's mass inside the box,
    the largest over the object's words, against the box's share of the cells.

    Args:
        weights: `(N, T, L)` attention while writing each caption's tokens.
        captions: `N` generated captions; `truths` the true ones.
        boxes: `N` arrays `(objects, 4)` of `(x0, y0, x1, y1)` in caption order.
        grid: `(rows, columns)` of the attention's cells.
        tokenizer: the captions' tokenizer: `weights` has a row per token, and a word may be several
            tokens (with the scenes' 100-piece vocabulary "red" is r ##e ##d), so a word's row is
            the one writing its first piece (`pipelines.captions.word_starts`).
    """
    from keras_attn.layers.image_encoder import cell_centres
    from pipelines.scenes import SIZES, word_regions

    rows, columns = grid
    cell_y, cell_x = cell_centres(grid, image_size)
    counts = {size: np.zeros(6) for size in ["all", *SIZES]}
    for weight, caption, truth, box in zip(weights, captions, truths, boxes):
        written, true = caption.split(), truth.split()
        (rows_of,) = word_starts([caption], tokenizer)
        # the objects the caption names right: its size, colour and shape words, as the truth's
        for (first, end, (x0, y0, x1, y1)), (true_first, true_end, _) in zip(
            word_regions(caption, box), word_regions(truth, box)
        ):
            if written[first:end] != true[true_first:true_end]:
                continue
            inside = np.outer(
                (cell_y >= y0) & (cell_y <= y1), (cell_x >= x0) & (cell_x <= x1)
            ).ravel()
            one = np.zeros(6)
            # the step writing each word
            steps = [rows_of[position] for position in range(first, end)]
            for step in steps:
                one += [inside[int(np.argmax(weight[step]))], 1, inside.mean(), 0, 0, 0]
            one[3:] = [max(float(weight[step] @ inside) for step in steps), 1, inside.mean()]
            counts["all"] += one
            counts[true[true_first]] += one
    return {size: tuple(count) for size, count in counts.items()}


def evaluate(task, scenes, batch_size=250):
    """Greedy captions of `scenes` and their measures."""
    import sacrebleu
    import tensorflow as tf

    from keras_attn import decoding

    search = tf.function(
        lambda images: decoding.greedy_search(
            task.stepper,
            images,
            tf.fill([tf.shape(images)[0]], task.longest_output),
            return_attention=True,
        )
    )
    captions, weights = [], []
    for start in range(0, len(scenes.captions), batch_size):
        images = task.preprocessor.images(scenes.images[start : start + batch_size])
        out = search(images)
        captions += [text.decode() for text in task.preprocessor.detokenize(out["tokens"]).numpy()]
        # (B, T, layers, heads, L): the one map
        weights += list(out["attention"][:, :, 0, 0].numpy())
    result = {}
    counts = np.asarray(scenes.counts)
    for objects in ["all", 1, 2, 3, 4]:
        rows = np.arange(len(captions)) if objects == "all" else np.flatnonzero(counts == objects)
        if not len(rows):
            continue
        chosen = [captions[i] for i in rows]
        truths = [scenes.captions[i] for i in rows]
        row = {
            "captions": len(rows),
            "exact_match": round(100 * float(np.mean([a == b for a, b in zip(chosen, truths)])), 1),
            "bleu4": round(sacrebleu.corpus_bleu(chosen, [truths], tokenize="none").score, 2),
        }
        if task.backbone.get_config()["attention"] != "none":
            by_size = grounding(
                [weights[i] for i in rows],
                chosen,
                truths,
                [scenes.boxes[i] for i in rows],
                task.backbone.encoder.grid_shape,
                task.backbone.get_config()["image_size"],
                task.preprocessor.tokenizer,
            )
            for size, (hits, named, chance, mass, named_objects, area) in by_size.items():
                key = "" if size == "all" else f"_{size}"
                row.update(
                    {
                        f"grounding{key}": round(100 * hits / max(named, 1), 1),
                        f"grounding_chance{key}": round(100 * chance / max(named, 1), 1),
                        f"object_words{key}": int(named),
                        f"correctness{key}": round(100 * mass / max(named_objects, 1), 1),
                        f"correctness_chance{key}": round(100 * area / max(named_objects, 1), 1),
                    }
                )
        result[str(objects)] = row
    return result, captions, weights


def estimator_probe(task, inputs, targets, draws=8):
    """Hard attention's gradient estimator on one batch, over `draws` draws of the attention samples
    (the baseline is left as it was)."""
    import tensorflow as tf

    from keras_attn.layers.caption_decoder import caption_log_likelihood
    from pipelines.special_tokens import PAD_ID

    backbone = task.backbone
    baseline = backbone.decoder.baseline
    kept = float(baseline.numpy())
    weights = backbone.trainable_weights
    gradients = {"cross_entropy": [], "reinforce": []}
    rewards = []
    for _ in range(draws):
        with tf.GradientTape(persistent=True) as tape:
            logits = backbone(inputs, training=True)
            terms = {
                "cross_entropy": task.loss(targets, logits),
                # the decoder's own loss: the REINFORCE term and the entropy bonus
                "reinforce": tf.add_n([tf.cast(loss, tf.float32) for loss in backbone.losses]),
            }
        for name, term in terms.items():
            gradients[name].append(
                np.concatenate(
                    [
                        np.zeros(int(np.prod(w.shape)))
                        if g is None
                        else tf.reshape(tf.cast(g, tf.float32), [-1]).numpy()
                        for g, w in zip(tape.gradient(term, weights), weights)
                    ]
                )
            )
        # log p(y|s) per image
        rewards.append(np.asarray(caption_log_likelihood(logits, inputs["target_in"])))
        baseline.assign(kept)
    result = {}
    for name, draws_of in gradients.items():
        draws_of = np.array(draws_of)
        mean = draws_of.mean(0)
        spread = np.sqrt(((draws_of - mean) ** 2).sum(1).mean())
        result[name] = {
            "mean_norm": round(float(np.linalg.norm(mean)), 3),
            "spread": round(float(spread), 3),
            "signal_to_noise": round(float(np.linalg.norm(mean) / max(spread, 1e-12)), 2),
        }
    rewards, lengths = (
        np.array(rewards),
        np.count_nonzero(np.asarray(inputs["target_in"]) != PAD_ID, axis=1),
    )
    result["reward"] = {
        "mean": round(float(rewards.mean()), 2),
        "spread_over_images": round(float(rewards.mean(0).std()), 2),
        "spread_over_draws": round(float(rewards.std(0).mean()), 3),
        "correlation_with_length": round(float(np.corrcoef(rewards.mean(0), lengths)[0, 1]), 3),
        "baseline": round(kept, 2),
    }
    return result


def expectation_twin(task):
    """A soft-attention `Captioner` with `task`'s weights: hard
    attention's model read with the expectation.
    """
    from keras_attn.models import Captioner, CaptionerBackbone

    twin = Captioner(
        CaptionerBackbone.from_config({**task.backbone.get_config(), "attention": "soft"}),
        task.preprocessor,
    )
    weights = {weight.path: weight for weight in task.backbone.weights}
    # all but REINFORCE's baseline, which soft attention has not
    for weight in twin.backbone.weights:
        weight.assign(weights[weight.path])
    return twin


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attention", default="soft", choices=ATTENTIONS)
    parser.add_argument(
        "--hard-estimator", choices=HARD_ESTIMATORS, help="hard attention's (default: the model's)"
    )
    parser.add_argument(
        "--pooling", choices=CAPTION_POOLINGS, help="the starting state's (default: the model's)"
    )
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument("--train-size", type=int, default=SPLIT_SIZES["train"])
    parser.add_argument(
        "--regularization",
        type=float,
        help="lambda of the doubly stochastic term (default: the model's)",
    )
    parser.add_argument(
        "--stage-depth", type=int, help="3x3 convolutions per encoder stage (default: the preset's)"
    )
    parser.add_argument(
        "--filters", type=int, nargs="+", help="the encoder's stage widths (default: the preset's)"
    )
    parser.add_argument(
        "--supervision",
        type=float,
        metavar="LAMBDA",
        help="supervise the attention with the objects' boxes at this weight (Liu et al. 2017)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--probe",
        type=int,
        nargs="+",
        metavar="STEPS",
        help="with --hard-estimator reinforce: measure the estimator after each number of steps",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--save", help="save the trained task here (a .keras file)")
    parser.add_argument("--figure", help="draw a test image's attention per word here (PNG)")
    args = parser.parse_args()

    import keras

    from keras_attn.models import Captioner
    from pipelines import scenes
    from pipelines.captions import caption_dataset
    from pipelines.preprocessors import CaptionPreprocessor
    from pipelines.tokenizers import learn_wordpiece_vocabulary

    keras.utils.set_random_seed(args.seed)
    corpus = scenes.scenes_corpus(seed=args.seed, train_size=args.train_size)
    preprocessor = CaptionPreprocessor(
        learn_wordpiece_vocabulary(corpus["train"].captions, 100),
        image_size=scenes.IMAGE_SIZE,
        max_length=32,
    )
    chosen = dict(
        attention_regularization=args.regularization,
        stage_depth=args.stage_depth,
        filters=args.filters,
        hard_estimator=args.hard_estimator,
        pooling=args.pooling,
    )
    if args.supervision is not None:
        chosen["attention_supervision"] = args.supervision
    task = Captioner.from_preset(
        args.preset,
        preprocessor,
        attention=args.attention,
        **{key: value for key, value in chosen.items() if value is not None},
    )
    task.compile(learning_rate=args.learning_rate, warmup_steps=args.warmup_steps)
    boxes = None
    if args.supervision is not None:
        from pipelines.captions import word_boxes

        train_split = corpus["train"]
        boxes = word_boxes(
            train_split.captions,
            [scenes.word_regions(c, b) for c, b in zip(train_split.captions, train_split.boxes)],
            preprocessor,
        )
    train = caption_dataset(
        corpus["train"].images,
        corpus["train"].captions,
        preprocessor,
        args.batch_size,
        seed=args.seed,
        boxes=boxes,
    )
    if args.probe:
        if args.attention != "hard" or args.hard_estimator != "reinforce":
            parser.error(
                "--probe measures hard attention's REINFORCE estimator: add --attention hard "
                "--hard-estimator reinforce"
            )
        inputs, targets = next(iter(train))
        done = 0
        for steps in args.probe:
            if steps > done:
                task.fit(train.repeat(), steps_per_epoch=steps - done, epochs=1, verbose=0)
                done = steps
            print(json.dumps({"steps": done, **estimator_probe(task, inputs, targets)}), flush=True)
        return
    valid = caption_dataset(
        corpus["valid"].images, corpus["valid"].captions, preprocessor, 250, shuffle=False
    )
    started = time.perf_counter()
    history = task.fit(train, validation_data=valid, epochs=args.epochs, verbose=2)
    seconds = time.perf_counter() - started
    results = {
        "settings": vars(args),
        "train_seconds": round(seconds),
        "parameters": task.count_params(),
        "val_loss": [round(v, 4) for v in history.history["val_loss"]],
    }
    if args.save:
        task.save(args.save)
    for split in ("valid", "test", "held_out"):  # choose settings by the validation split's figures
        results[split], captions, weights = evaluate(task, corpus[split])
        print(split, json.dumps(results[split]), captions[:3], flush=True)
        if split == "test" and args.figure:
            from keras_attn.plots import caption_attention_figure, save_figure

            shown = next(i for i, count in enumerate(corpus[split].counts) if count >= 3)
            words = captions[shown].split()
            rows_of = word_starts([captions[shown]], task.preprocessor.tokenizer)[0][: len(words)]
            save_figure(
                caption_attention_figure(
                    corpus[split].images[shown],
                    words,
                    weights[shown][rows_of],
                    task.backbone.encoder.grid_shape,
                    title=captions[shown],
                ),
                args.figure,
            )
    # the same weights reading the expectation (the soft context), not the argmax cell
    if args.attention == "hard":
        results["test_expectation"] = evaluate(expectation_twin(task), corpus["test"])[0]
        print("test_expectation", json.dumps(results["test_expectation"]), flush=True)
    print(json.dumps(results))
    if args.out:
        with open(args.out, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
