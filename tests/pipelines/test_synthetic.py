import collections

import pytest

from pipelines.synthetic import MAX_WORDS, translation_corpus


@pytest.fixture(scope="module")
def corpus():
    return translation_corpus(seed=0, train_size=5000, valid_size=300, test_size=300)


def words(sentence):
    return sentence[:-1].lower().split()


def test_same_seed_same_corpus_other_seed_other_corpus(corpus):
    again = translation_corpus(seed=0, train_size=5000, valid_size=300, test_size=300)
    for split in ("train", "valid", "test"):
        assert again[split].sources == corpus[split].sources
        assert again[split].targets == corpus[split].targets
    other = translation_corpus(seed=1, train_size=100, valid_size=10, test_size=10)
    assert other["train"].sources != corpus["train"].sources[:100]


def test_splits_have_their_sizes_and_share_no_source(corpus):
    sizes = {name: len(split) for name, split in corpus.items()}
    assert sizes == {"train": 5000, "valid": 300, "test": 300}
    all_sources = [s for split in corpus.values() for s in split.sources]
    assert len(set(all_sources)) == len(all_sources)


def test_test_split_does_not_depend_on_the_train_size(corpus):
    small = translation_corpus(seed=0, train_size=10, valid_size=300, test_size=300)
    assert small["test"].sources == corpus["test"].sources


def test_each_source_sentence_has_one_translation(corpus):
    # Short sentences drawn under two seeds overlap (3 with these seeds and
    # sizes); their translations must agree.
    other = translation_corpus(seed=7, train_size=5000, valid_size=0, test_size=0)
    mine = dict(zip(corpus["train"].sources, corpus["train"].targets))
    shared = [s for s in other["train"].sources if s in mine]
    assert len(shared) >= 3
    theirs = dict(zip(other["train"].sources, other["train"].targets))
    assert all(mine[s] == theirs[s] for s in shared)


def test_sentence_shape_and_lengths(corpus):
    train = corpus["train"]
    lengths = []
    for source, target in zip(train.sources, train.targets):
        for sentence in (source, target):
            assert sentence.endswith(".") and sentence[0].isupper()
            assert sentence[1:-1] == sentence[1:-1].lower()
            assert all(word.isalpha() for word in words(sentence))
        assert len(words(source)) == len(words(target))
        lengths.append(len(words(source)))
    assert min(lengths) == 3 and max(lengths) <= MAX_WORDS == 30
    assert max(lengths) >= 25
    typical = sum(5 <= n <= 15 for n in lengths) / len(lengths)
    assert typical > 0.6


def test_vocabularies_have_hundreds_of_words(corpus):
    sources = {w for s in corpus["train"].sources for w in words(s)}
    targets = {w for t in corpus["train"].targets for w in words(t)}
    assert 300 <= len(sources) < 1000
    assert 500 <= len(targets) < 1000


def test_translation_needs_reordering(corpus):
    # Align the words that translate one-to-one (Dice coefficient of
    # co-occurrence, as in word alignment): nouns, prepositions,
    # conjunctions. In many sentences their order differs between sides.
    train = corpus["train"]
    pairs = [(words(s), words(t)) for s, t in zip(train.sources[:3000], train.targets)]
    source_counts, target_counts, joint = (collections.Counter() for _ in range(3))
    for source, target in pairs:
        source_counts.update(set(source))
        target_counts.update(set(target))
        joint.update((a, b) for a in set(source) for b in set(target))
    best = {}
    for (a, b), n in joint.items():
        dice = 2 * n / (source_counts[a] + target_counts[b])
        if dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    lexicon = {a: b for a, (dice, b) in best.items() if dice >= 0.9 and source_counts[a] >= 10}
    assert len(lexicon) >= 100
    not_monotone = 0
    for source, target in pairs:
        positions = [
            target.index(lexicon[w])
            for w in source
            if w in lexicon and source.count(w) == 1 and target.count(lexicon[w]) == 1
        ]
        not_monotone += positions != sorted(positions)
    assert not_monotone / len(pairs) > 0.3


def test_translation_needs_agreement(corpus):
    # Minimal pairs: two sources that differ in one word. Without agreement
    # one target word would change; here often several do (the noun's
    # gender and number reach its article, adjectives and verb).
    groups = collections.defaultdict(list)
    for source, target in zip(corpus["train"].sources, corpus["train"].targets):
        source, target = words(source), words(target)
        for i in range(len(source)):
            groups[i, tuple(source[:i] + source[i + 1 :])].append(target)
    changed = []
    for targets in groups.values():
        for other in targets[1:]:
            changed.append(sum(a != b for a, b in zip(targets[0], other)))
    assert len(changed) > 100
    assert sum(n >= 2 for n in changed) / len(changed) > 0.2
