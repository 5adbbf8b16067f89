"""Translation quality: exact match, BLEU (computed three ways) and
chrF; captioning's, against several references.
"""

import sacrebleu


def bleu(hypotheses, references):
    """Corpus BLEU of detokenized hypotheses against one reference each.

    Args:
        hypotheses: list of str. The detokenized hypotheses.
        references: list of str. One reference per hypothesis, in the same order.

    Returns:
        A dict of `"bleu"`: SacreBLEU on cased, detokenized text (its standard 13a
        tokenization), the number to quote between systems; `"bleu_tok_lc"`: the same after
        lowercasing both sides, i.e. BLEU on tokenized, lowercased text: close to how the
        published Multi30k numbers were scored, not the same (they used spaCy or Moses tokens,
        which split apostrophes that 13a keeps, and greedy decoding; see
        benchmarks/REFERENCES.md and benchmarks/published_scoring.py); `"signature"` and
        `"bleu_tok_lc_signature"`: SacreBLEU's signatures of the two (`case:mixed` and
        `case:lc`).

    Raises:
        ValueError: when `hypotheses` and `references` differ in length.
    """
    _check_aligned(hypotheses, references)
    cased = sacrebleu.metrics.BLEU()
    score = cased.corpus_score(list(hypotheses), [list(references)])
    uncased = sacrebleu.metrics.BLEU(lowercase=True)
    lowercased = uncased.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": score.score,
        "bleu_tok_lc": lowercased.score,
        "signature": str(cased.get_signature()),
        "bleu_tok_lc_signature": str(uncased.get_signature()),
    }


def tokenized_bleu(hypotheses, references):
    """Corpus BLEU-4 of text tokenized as its references are, words
    split at whitespace and nothing else done.

    What `multi-bleu.perl` (Moses) and fairseq's scorer compute, and how the
    published Multi30k figures on Moses-tokenized, lowercased text are
    scored: SacreBLEU with `tokenize="none"` and no smoothing (so a corpus
    with no matching 4-gram scores 0, as in `multi-bleu.perl`). Meaningful
    only when the output is tokenized as the references are (a model
    trained on such text writes it so).

    Args:
        hypotheses: list of str. The hypotheses, tokens separated by whitespace.
        references: list of str. One reference per hypothesis, in the same order, tokenized
            as the hypotheses are.

    Returns:
        A dict of `"bleu_tokenized"` and its `"bleu_tokenized_signature"`.

    Raises:
        ValueError: when `hypotheses` and `references` differ in length.

    Example:

        >>> scores = tokenized_bleu(
        ...     ["a dog runs on the grass ."], ["a dog runs on the green grass ."]
        ... )
        >>> round(scores["bleu_tokenized"], 1)
        61.3
    """
    _check_aligned(hypotheses, references)
    metric = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"bleu_tokenized": score.score, "bleu_tokenized_signature": str(metric.get_signature())}


def translation_scores(hypotheses, references):
    """Everything `keras-attn evaluate` and the training job report.

    Args:
        hypotheses: list of str. The detokenized hypotheses.
        references: list of str. One reference per hypothesis, in the same order.

    Returns:
        The dict of `bleu` plus `"chrf"`: SacreBLEU's corpus chrF (character 6-grams, β = 2),
        which credits a right word with a wrong ending where BLEU gives nothing;
        `"chrf_signature"`: its signature; `"exact_match"`: the fraction of hypotheses equal to
        their reference (surrounding whitespace ignored); `"sentences"`: how many were scored.

    Raises:
        ValueError: when there are no hypotheses, or `hypotheses` and `references` differ in
            length.

    Example:

        >>> scores = translation_scores(["A dog runs."], ["A dog runs."])
        >>> scores["exact_match"], round(scores["bleu"]), round(scores["chrf"])
        (1.0, 100, 100)
    """
    _check_aligned(hypotheses, references)
    if not hypotheses:
        raise ValueError("Scores need at least one sentence, got none.")
    chrf = sacrebleu.metrics.CHRF()
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references))
    return {
        **bleu(hypotheses, references),
        "chrf": chrf.corpus_score(list(hypotheses), [list(references)]).score,
        "chrf_signature": str(chrf.get_signature()),
        "exact_match": exact / len(hypotheses),
        "sentences": len(hypotheses),
    }


def format_scores(scores):
    """The one-line summary printed by the job and by `keras-attn evaluate`.

    Args:
        scores: dict. What `translation_scores` returns.

    Returns:
        A str: exact match, BLEU (cased and tokenized lowercased), chrF and the sentence count.
    """
    return (
        f"exact match {scores['exact_match']:.1%}, BLEU {scores['bleu']:.2f} "
        f"(tokenized lowercased {scores['bleu_tok_lc']:.2f}), chrF {scores['chrf']:.2f} "
        f"on {scores['sentences']} sentences"
    )


def caption_scores(hypotheses, references):
    """What `keras-attn train captioner` reports: each image's caption
    against all of that image's captions.

    Args:
        hypotheses: list of str. One caption per image.
        references: list of lists of str. Per image, a list of its captions (one or more).

    Returns:
        A dict of `"exact_match"`: the fraction of captions equal to one of their
        references (case and spacing ignored); `"bleu"`: SacreBLEU's corpus BLEU-4 with every
        reference, lowercased (its 13a tokenization), and its `"signature"`;
        `"images"`: how many were scored.

    Raises:
        ValueError: when there are no captions, or `hypotheses` and `references` differ in
            length.

    Example:

        >>> references = [["a blue square", "a red circle left of a square"]]
        >>> scores = caption_scores(["a red circle left of a square"], references)
        >>> scores["exact_match"], round(scores["bleu"])
        (1.0, 100)
    """
    _check_aligned(hypotheses, references)
    if not hypotheses:
        raise ValueError("Scores need at least one caption, got none.")
    most = max(len(r) for r in references)
    # A repeated reference changes no BLEU count, so every image gets `most` of them.
    streams = [[r[k] if k < len(r) else r[0] for r in references] for k in range(most)]
    metric = sacrebleu.metrics.BLEU(lowercase=True)
    normal = lambda text: " ".join(text.lower().split())  # noqa: E731
    exact = sum(normal(h) in {normal(r) for r in refs} for h, refs in zip(hypotheses, references))
    return {
        "exact_match": exact / len(hypotheses),
        "bleu": metric.corpus_score(list(hypotheses), streams).score,
        "signature": str(metric.get_signature()),
        "images": len(hypotheses),
    }


def _check_aligned(hypotheses, references):
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Scores need one reference per hypothesis, got {len(hypotheses)} "
            f"hypotheses and {len(references)} references."
        )
