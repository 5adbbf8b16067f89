"""Translation quality: BLEU, computed two ways."""

import sacrebleu


def bleu(hypotheses, references):
    """Corpus BLEU of detokenized hypotheses against one reference each.

    Returns a dict with
    - `"bleu"`: SacreBLEU on cased, detokenized text (its standard 13a
      tokenization), the number to quote between systems;
    - `"bleu_tok_lc"`: the same after lowercasing both sides, i.e. BLEU on
      tokenized, lowercased text, the way the published Multi30k numbers
      were computed (see ../shared/data/REFERENCES.md: their tokenizers,
      spaCy or Moses, split apostrophes that 13a keeps, so expect small
      differences);
    - `"signature"`: SacreBLEU's signature of the first score.

    Args:
        hypotheses: list of strings.
        references: list of strings, aligned with `hypotheses`.
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"BLEU needs one reference per hypothesis, got {len(hypotheses)} "
            f"hypotheses and {len(references)} references."
        )
    cased = sacrebleu.metrics.BLEU()
    score = cased.corpus_score(list(hypotheses), [list(references)])
    lowercased = sacrebleu.metrics.BLEU(lowercase=True).corpus_score(
        list(hypotheses), [list(references)]
    )
    return {
        "bleu": score.score,
        "bleu_tok_lc": lowercased.score,
        "signature": str(cased.get_signature()),
    }

