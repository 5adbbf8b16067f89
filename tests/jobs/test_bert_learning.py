"""BERT pretraining learns both tasks on the built-in corpus (a learning curve with bars).

Its own file, so that pytest-xdist runs it beside the other BERT tests.
"""

import pytest


def test_pretraining_learns_masked_tokens_and_next_sentences(tmp_path):
    from keras_attn.jobs import bert

    config = bert.PretrainConfig(
        run_dir=str(tmp_path / "run"), preset="tiny", epochs=7, batch_size=32, learning_rate=2e-3,
        warmup_steps=50, dropout=0.0, export=False, verbose=0, backup_every=0,
        max_predictions=20,  # the settings' table was made with 20 slots (the default is now 10 at 64 tokens)
    )
    result = bert.pretrain(config, log=lambda line: None)
    history, metrics = result.history, result.metrics
    # NSP stays at chance while the MLM learns word frequencies (0.19 of the masked tokens are
    # the most frequent one), then both use the context: a masked word's noun or name, and the
    # other segment's topic and person. The run is seeded, but the learned vocabulary is not
    # (HuggingFace `tokenizers` breaks ties in hash-map order): the two vocabularies seen end
    # at MLM 0.41 / NSP 0.77 and MLM 0.34 / NSP 0.91.
    assert history["val_nsp_accuracy"][0] < 0.6 and history["val_mlm_accuracy"][0] < 0.25
    assert metrics["mlm_accuracy"] >= 0.30, history
    assert metrics["nsp_accuracy"] >= 0.70, history
    assert metrics["mlm_loss"] < history["val_mlm_loss"][0] - 1.0, history
    assert metrics["mlm_perplexity"] == pytest.approx(2.718281828 ** metrics["mlm_loss"], rel=1e-4)
