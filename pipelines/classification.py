"""Sentence and sentence-pair classification data: TSV files → packed BERT inputs.

    label<TAB>text            one sentence per example
    label<TAB>text_a<TAB>text_b   a pair (entailment, paraphrase, ...)

`BertPreprocessor.pack` builds BERT's input rows, `[CLS] A [SEP]` or
`[CLS] A [SEP] B [SEP]` with segment ids, trimming the longer segment first;
the tf.data pipeline and the exported model both use it, so text is cut the
same way in training and in serving.
"""

import dataclasses
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipelines import text
from pipelines.prefetch import prefetched


@dataclasses.dataclass
class LabelledTexts:
    """Labelled examples read from a TSV file.

    Each argument is also an attribute of the same name.

    Args:
        labels: list of str. The label of each example, as written.
        texts_a: list of str. The (first) sentence of each example.
        texts_b: list of str. The second sentences of a pair file; `None`
            for single texts. Defaults to None.
        skipped_empty: int. Blank lines and examples with an empty text,
            skipped. Defaults to 0.
        origin: str. The file. Defaults to `""`.
    """

    labels: list
    texts_a: list
    texts_b: list = None
    skipped_empty: int = 0
    origin: str = ""

    def __len__(self):
        return len(self.labels)


def read_labelled_tsv(path):
    r"""Reads `label<TAB>text` or `label<TAB>text_a<TAB>text_b` lines.

    Every non-blank line must have the columns of the first one.

    Args:
        path: str or os.PathLike. The TSV file, plain text or gzip.

    Returns:
        A `LabelledTexts`.

    Raises:
        text.DataError: as `text.read_lines`, or when a line has other
            columns (`path:line: expected N tab-separated columns
            (label<TAB>text...), found M`) or an empty label, or the file
            has no examples.

    Example:

        >>> _ = Path("train.tsv").write_text("0\thide new secretions from the parental units\n")
        >>> data = read_labelled_tsv("train.tsv")
        >>> data.labels[0], data.texts_a[0]
        ('0', 'hide new secretions from the parental units')
    """
    labels, texts_a, texts_b, skipped, columns = [], [], [], 0, None
    # Lines as read (not stripped): a tab before an empty text still counts.
    for number, line in enumerate(text.decoded_lines(Path(path)), start=1):
        if not line.strip():
            skipped += 1
            continue
        # (a byte-order mark also starts the lines where files written with one were joined)
        fields = [field.strip().removeprefix("\ufeff") for field in line.rstrip("\r\n").split("\t")]
        columns = columns or len(fields)
        if len(fields) != columns or columns not in (2, 3):
            wanted = columns if columns in (2, 3) else "2 or 3"
            raise text.DataError(
                f"{path}:{number}: expected {wanted} tab-separated columns "
                f"(label<TAB>text or label<TAB>text_a<TAB>text_b), found {len(fields)}"
            )
        if not fields[0]:
            raise text.DataError(f"{path}:{number}: an empty label (label<TAB>text...)")
        if not all(fields[1:]):
            skipped += 1
            continue
        labels.append(fields[0])
        texts_a.append(fields[1])
        if columns == 3:
            texts_b.append(fields[2])
    if not labels:
        raise text.DataError(f"{path}: no examples ({skipped} empty lines skipped)")
    return LabelledTexts(labels, texts_a, texts_b if columns == 3 else None, skipped, str(path))


def check_like_training(data, label_ids, training=None):
    """Refuses a `LabelledTexts` with labels not in `label_ids`, or
    (given the `training` data) other columns.

    Args:
        data: pipelines.classification.LabelledTexts. The examples to check.
        label_ids: dict. `{label: id}` of the training data.
        training: pipelines.classification.LabelledTexts. The training data,
            whose columns `data` must have; `None` to check the labels only.
            Defaults to None.

    Raises:
        text.DataError: when a label is not in `label_ids`
            (`path: labels not in the training data: ...`), or the columns
            differ from the training data's
            (`path: single texts (...), but <training> holds pairs (...)`).
    """
    unknown = sorted({label for label in data.labels if label not in label_ids})
    if unknown:
        raise text.DataError(
            f"{data.origin}: labels not in the training data: {', '.join(unknown[:5])}"
        )
    kinds = ["single texts (label<TAB>text)", "pairs (label<TAB>text_a<TAB>text_b)"]
    if training is not None and (data.texts_b is None) != (training.texts_b is None):
        raise text.DataError(
            f"{data.origin}: {kinds[data.texts_b is not None]}, but {training.origin} holds "
            f"{kinds[training.texts_b is not None]}"
        )


def classification_dataset(
    data, label_ids, preprocessor, batch_size, shuffle=True, seed=0, drop_remainder=False
):
    """Batches `({"token_ids", "segment_ids"}, label id)` of a `LabelledTexts`.

    Args:
        data: pipelines.classification.LabelledTexts. The examples.
        label_ids: dict. `{label: id}`.
        preprocessor: pipelines.preprocessors.BertPreprocessor. The
            classifier's, which packs the rows (its `max_length` is the
            longest row).
        batch_size: int. Examples per batch.
        shuffle: bool. Whether the examples are shuffled (the same order
            every run for a seed). Defaults to True.
        seed: int. The shuffle's seed. Defaults to 0.
        drop_remainder: bool. Whether a last, smaller batch is dropped.
            Defaults to False.

    Returns:
        A `tf.data.Dataset` of known length; rows padded to `max_length`.

    Raises:
        text.DataError: when a label of `data` is not in `label_ids`.
    """
    check_like_training(data, label_ids)
    labels = np.array([label_ids[label] for label in data.labels], np.int32)
    columns = (data.texts_a,) if data.texts_b is None else (data.texts_a, data.texts_b)
    dataset = tf.data.Dataset.from_tensor_slices((tuple(columns), labels))
    if shuffle:
        dataset = dataset.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)

    max_length = preprocessor.max_length

    def encode(texts, labels):
        token_ids, segment_ids, _ = preprocessor.pack(*texts)
        padding = [[0, 0], [0, max_length - tf.shape(token_ids)[1]]]
        features = {
            "token_ids": tf.ensure_shape(tf.pad(token_ids, padding), [None, max_length]),
            "segment_ids": tf.ensure_shape(tf.pad(segment_ids, padding), [None, max_length]),
        }
        return features, labels

    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return prefetched(dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE))
