import json
import os

import pytest

from pipelines import prepared
from pipelines.streaming import ShardedCorpus
from pipelines.tokenizers import SPECIAL_TOKENS, WordPieceTokenizer
from pipelines.translation import streamed_translation_epochs
from tests.pipelines.test_streaming import data_error, sentences, write

TOKENIZER = WordPieceTokenizer(
    [*SPECIAL_TOKENS, "de", "en", "x", *map(str, range(10)), "-", *(f"##{d}" for d in range(10))]
)
SHARDS = 3


@pytest.fixture
def corpus(tmp_path):
    """Three TSV shards of unequal length, with empty pairs and a long one among them."""
    for shard in range(SHARDS):
        lines = [
            f"{s}\t{t}"
            for s, t in zip(sentences(300 + 50 * shard, "de", shard), sentences(300, "en", shard))
        ]
        lines[7:9] = ["\t", "nur links\t", " x" * 40 + "\ten 1"]
        write(tmp_path / f"train-{shard}.tsv", lines + [f"en {i}\tde" for i in range(50 * shard)])
    return ShardedCorpus.tsv(tmp_path / "train-*.tsv")


def batches(corpus, epoch, **options):
    epochs = streamed_translation_epochs(
        corpus,
        900,
        TOKENIZER,
        TOKENIZER,
        batch_size=32,
        max_length=12,
        seed=3,
        shuffle_buffer=400,
        **options,
    )
    return [
        (inputs["source"].tolist(), inputs["target_in"].tolist(), target.tolist())
        for inputs, target in epochs(epoch).as_numpy_iterator()
    ]


@pytest.mark.parametrize("options", [{}, {"batch_tokens": 200}, {"worker": 1, "workers": 2}])
@pytest.mark.slow
def test_prepared_shards_give_the_batches_the_text_gives(corpus, tmp_path, options):
    ready = prepared.prepare(
        corpus, TOKENIZER, TOKENIZER, tmp_path / "prepared", log=lambda line: None
    )
    assert ready.shard_pairs == (299, 349, 399)  # the pair with an empty side skipped
    assert batches(ready, 1, **options) == batches(corpus, 1, **options)


def test_a_preparation_killed_midway_resumes_where_it_stopped(corpus, tmp_path, monkeypatch):
    whole = prepared.prepare(
        corpus, TOKENIZER, TOKENIZER, tmp_path / "whole", log=lambda line: None
    )
    written = []
    original = prepared.tf_example

    def killed_in_the_second_shard(source, target):
        written.append(1)
        if len(written) == 450:
            raise KeyboardInterrupt  # as SIGINT would, between two records
        return original(source, target)

    monkeypatch.setattr(prepared, "tf_example", killed_in_the_second_shard)
    with pytest.raises(KeyboardInterrupt):
        prepared.prepare(corpus, TOKENIZER, TOKENIZER, tmp_path / "killed", log=lambda line: None)
    assert sorted(os.listdir(tmp_path / "killed")) == [
        prepared.BINDING_FILE,
        "shard-00000-of-00003.tfrecord",
        "shard-00001-of-00003.tfrecord.tmp",
    ]
    monkeypatch.setattr(prepared, "tf_example", original)
    lines = []
    resumed = prepared.prepare(corpus, TOKENIZER, TOKENIZER, tmp_path / "killed", log=lines.append)
    assert "(2 shards written now)" in lines[0]
    assert resumed.shard_pairs == whole.shard_pairs
    for mine, theirs in zip(resumed.files, whole.files):
        assert open(mine, "rb").read() == open(theirs, "rb").read()


def test_a_prepared_folder_is_refused_for_other_data_or_another_vocabulary(corpus, tmp_path):
    folder = tmp_path / "prepared"
    prepared.prepare(corpus, TOKENIZER, TOKENIZER, folder, log=lambda line: None)
    other = WordPieceTokenizer([*TOKENIZER.vocabulary, "y"])
    message = data_error(
        lambda: prepared.prepare(corpus, other, TOKENIZER, folder, log=lambda line: None)
    )
    assert message == (
        f"{folder}: prepared from other data or another vocabulary; give a new folder, "
        "or delete this one"
    )
    stripping = WordPieceTokenizer(TOKENIZER.vocabulary, strip_accents=True)  # other ids for "é"
    assert "prepared from other data" in data_error(
        lambda: prepared.prepare(corpus, stripping, TOKENIZER, folder, log=lambda line: None)
    )
    with open(tmp_path / "train-0.tsv", "a") as shard:
        shard.write("de 1\ten 1\n")
    assert "prepared from other data" in data_error(
        lambda: prepared.prepare(
            ShardedCorpus.tsv(tmp_path / "train-*.tsv"), TOKENIZER, TOKENIZER, folder
        )
    )


def test_a_damaged_prepared_shard_is_one_line(corpus, tmp_path):
    ready = prepared.prepare(
        corpus, TOKENIZER, TOKENIZER, tmp_path / "prepared", log=lambda line: None
    )
    data = open(ready.files[1], "rb").read()
    open(ready.files[1], "wb").write(data[: len(data) // 2])

    def drain():
        with ready.reported():
            batches(ready, 0)

    message = data_error(drain)
    assert message.startswith(f"{tmp_path / 'prepared'}: a prepared shard is damaged (")
    assert message.endswith("); delete the folder to prepare it again") and "\n" not in message


def test_an_incomplete_folder_is_not_loaded(corpus, tmp_path):
    prepared.prepare(corpus, TOKENIZER, TOKENIZER, tmp_path / "prepared", log=lambda line: None)
    os.remove(tmp_path / "prepared" / prepared.PAIRS_FILE)
    assert data_error(lambda: prepared.PreparedCorpus.load(tmp_path / "prepared")) == (
        f"{tmp_path / 'prepared'}: not completely prepared ({prepared.PAIRS_FILE} missing)"
    )
    assert (
        json.loads((tmp_path / "prepared" / prepared.BINDING_FILE).read_text())["shards"] == SHARDS
    )
