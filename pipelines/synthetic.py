"""The built-in generated translation corpus: toy English → a made-up language.

`translation_corpus(seed)` samples sentences of a small English-like source
language and translates each with a fixed, deterministic grammar into a
made-up target language. Every source sentence has exactly one correct
translation, the translation is a permutation of word-by-word translations
(same number of words on both sides), and getting it right needs both
reordering and agreement, so the attention maps of a trained model are far
from diagonal.

Source grammar (`?` optional, `*` repeated; about 420 distinct words):

    sentence → clause (conjunction clause)? "."
    clause   → np verb_intransitive pp?  |  np verb_transitive np pp?
    np       → determiner adjective{0,2} noun ("that" verb_transitive np')?
    np'      → np without a relative clause (also used inside pp)
    pp       → preposition np'

    determiner: "the"; "a"/"an" (singular, "an" before a vowel) or "some"
    (plural); "this" (singular) or "these" (plural). Nouns are singular or
    plural ("dog"/"dogs", "man"/"men"). Verbs: present "sees" after a
    singular subject and "see" after a plural one, past "saw" after either.
    The subject of the verb of a relative clause is the noun it follows.

Target grammar (about 830 distinct words):

    clause   → np [np_object] [pp] verb              (SVO → SOV; the PP goes
                                                      before the final verb)
    np       → article noun adjective* ("ke" np' verb)?
    pp       → np' postposition                       (preposition → after)

    * Adjectives follow the noun, in reverse order: "the big red dog" →
      "lo roris pobuso fedoto" (article noun red big).
    * Each noun has a lexical gender, masculine or feminine, that the
      source does not show. Articles, adjectives and verbs agree with it and
      with the noun's number through the endings o (m. sg), a (f. sg),
      i (m. pl), e (f. pl): articles l- (the), un- (a/an/some), est-
      (this/these): "lo", "una", "esti"; adjectives stem + ending.
    * Nouns: stem (singular), stem + "n" after a vowel or + "en" after a
      consonant (plural).
    * Verbs: stem + tense vowel ("e" present, "i" past) + subject agreement
      ("s" m. sg, "sa" f. sg, "n" m. pl, "na" f. pl): a verb agrees with
      the gender and number of its subject, the verb of a relative clause
      with the noun the clause follows.
    * Relative clauses are verb-final too: "the dog that sees a cat" →
      "lo roris ke uno zedos zales"; "The dog sleeps in the garden." →
      "Lo roris la dumem gu vales." ("gu" = "in").
    * Conjunctions join the two clauses in the same order; each clause is
      reordered on its own. Every word translates one-to-one through a fixed
      lexicon ("a" and "an" both give un-).

Both sides start with a capital letter and end with a period attached to
the last word. Sentences have 3 to 30 words, most of them 5 to 15.

The lexicon is fixed (derived from a hash of each source word, not from the
seed); the seed only chooses which sentences are sampled.
"""

import hashlib

import numpy as np

from pipelines.text import ParallelCorpus

MAX_WORDS = 30

# (singular, plural)
_NOUNS = [
    ("man", "men"),
    ("woman", "women"),
    ("child", "children"),
    ("boy", "boys"),
    ("girl", "girls"),
    ("dog", "dogs"),
    ("cat", "cats"),
    ("horse", "horses"),
    ("bird", "birds"),
    ("cow", "cows"),
    ("farmer", "farmers"),
    ("teacher", "teachers"),
    ("doctor", "doctors"),
    ("student", "students"),
    ("baby", "babies"),
    ("king", "kings"),
    ("queen", "queens"),
    ("soldier", "soldiers"),
    ("sailor", "sailors"),
    ("singer", "singers"),
    ("painter", "painters"),
    ("driver", "drivers"),
    ("cook", "cooks"),
    ("nurse", "nurses"),
    ("baker", "bakers"),
    ("friend", "friends"),
    ("neighbor", "neighbors"),
    ("stranger", "strangers"),
    ("wolf", "wolves"),
    ("fox", "foxes"),
    ("bear", "bears"),
    ("lion", "lions"),
    ("tiger", "tigers"),
    ("monkey", "monkeys"),
    ("rabbit", "rabbits"),
    ("mouse", "mice"),
    ("duck", "ducks"),
    ("goat", "goats"),
    ("pig", "pigs"),
    ("frog", "frogs"),
    ("house", "houses"),
    ("car", "cars"),
    ("tree", "trees"),
    ("book", "books"),
    ("table", "tables"),
    ("chair", "chairs"),
    ("door", "doors"),
    ("window", "windows"),
    ("garden", "gardens"),
    ("river", "rivers"),
    ("mountain", "mountains"),
    ("city", "cities"),
    ("village", "villages"),
    ("road", "roads"),
    ("bridge", "bridges"),
    ("ship", "ships"),
    ("boat", "boats"),
    ("train", "trains"),
    ("letter", "letters"),
    ("song", "songs"),
    ("picture", "pictures"),
    ("apple", "apples"),
    ("bottle", "bottles"),
    ("cup", "cups"),
    ("box", "boxes"),
    ("bag", "bags"),
    ("hat", "hats"),
    ("coat", "coats"),
    ("shoe", "shoes"),
    ("key", "keys"),
    ("ball", "balls"),
    ("flower", "flowers"),
    ("stone", "stones"),
    ("lamp", "lamps"),
    ("clock", "clocks"),
    ("bed", "beds"),
    ("bell", "bells"),
    ("basket", "baskets"),
    ("knife", "knives"),
    ("plate", "plates"),
    ("shirt", "shirts"),
    ("candle", "candles"),
    ("ring", "rings"),
    ("map", "maps"),
    ("bicycle", "bicycles"),
    ("computer", "computers"),
    ("phone", "phones"),
    ("camera", "cameras"),
    ("guitar", "guitars"),
    ("drum", "drums"),
    ("kite", "kites"),
    ("tent", "tents"),
    ("wall", "walls"),
    ("field", "fields"),
    ("forest", "forests"),
    ("lake", "lakes"),
    ("island", "islands"),
    ("castle", "castles"),
    ("tower", "towers"),
    ("market", "markets"),
]
_ADJECTIVES = [
    "big",
    "small",
    "old",
    "young",
    "red",
    "blue",
    "green",
    "yellow",
    "black",
    "white",
    "happy",
    "sad",
    "tall",
    "short",
    "fast",
    "slow",
    "quiet",
    "loud",
    "beautiful",
    "ugly",
    "clever",
    "lazy",
    "brave",
    "tired",
    "hungry",
    "angry",
    "rich",
    "poor",
    "strong",
    "weak",
    "warm",
    "cold",
    "new",
    "dark",
    "bright",
    "heavy",
    "light",
    "clean",
    "dirty",
    "soft",
    "hard",
    "sweet",
    "strange",
    "famous",
    "friendly",
    "wild",
    "gentle",
    "busy",
    "empty",
    "tiny",
]
# (singular present, plural present, past)
_TRANSITIVE_VERBS = [
    ("sees", "see", "saw"),
    ("likes", "like", "liked"),
    ("finds", "find", "found"),
    ("holds", "hold", "held"),
    ("carries", "carry", "carried"),
    ("watches", "watch", "watched"),
    ("paints", "paint", "painted"),
    ("follows", "follow", "followed"),
    ("helps", "help", "helped"),
    ("visits", "visit", "visited"),
    ("buys", "buy", "bought"),
    ("sells", "sell", "sold"),
    ("opens", "open", "opened"),
    ("calls", "call", "called"),
    ("hears", "hear", "heard"),
    ("loves", "love", "loved"),
    ("hates", "hate", "hated"),
    ("wants", "want", "wanted"),
    ("brings", "bring", "brought"),
    ("takes", "take", "took"),
    ("builds", "build", "built"),
    ("breaks", "break", "broke"),
    ("throws", "throw", "threw"),
    ("catches", "catch", "caught"),
    ("draws", "draw", "drew"),
    ("pushes", "push", "pushed"),
    ("pulls", "pull", "pulled"),
    ("washes", "wash", "washed"),
    ("feeds", "feed", "fed"),
    ("chases", "chase", "chased"),
]
_INTRANSITIVE_VERBS = [
    ("sleeps", "sleep", "slept"),
    ("runs", "run", "ran"),
    ("walks", "walk", "walked"),
    ("sings", "sing", "sang"),
    ("dances", "dance", "danced"),
    ("laughs", "laugh", "laughed"),
    ("cries", "cry", "cried"),
    ("smiles", "smile", "smiled"),
    ("waits", "wait", "waited"),
    ("swims", "swim", "swam"),
    ("jumps", "jump", "jumped"),
    ("falls", "fall", "fell"),
    ("sits", "sit", "sat"),
    ("stands", "stand", "stood"),
    ("works", "work", "worked"),
    ("plays", "play", "played"),
    ("rests", "rest", "rested"),
    ("shouts", "shout", "shouted"),
    ("arrives", "arrive", "arrived"),
    ("travels", "travel", "traveled"),
]
_PREPOSITIONS = [
    "in",
    "on",
    "near",
    "under",
    "behind",
    "beside",
    "with",
    "without",
    "from",
    "above",
]
_CONJUNCTIONS = ["and", "but", "while", "because", "although"]

_ENDINGS = {("m", "sg"): "o", ("f", "sg"): "a", ("m", "pl"): "i", ("f", "pl"): "e"}
_ARTICLE_STEMS = {"the": "l", "a": "un", "this": "est"}
_VERB_TENSE = {"present": "e", "past": "i"}
_VERB_AGREEMENT = {
    ("m", "sg"): "s",
    ("f", "sg"): "sa",
    ("m", "pl"): "n",
    ("f", "pl"): "na",
}
_RELATIVE = ("that", "ke")

_P_PLURAL = 0.35
_P_PAST = 0.4
_P_TRANSITIVE = 0.65
_P_RELATIVE = 0.12
_P_PREPOSITIONAL = 0.35
_P_COMPOUND = 0.3
_ADJECTIVE_COUNT_PROBABILITIES = (0.55, 0.33, 0.12)
_DETERMINERS, _DETERMINER_PROBABILITIES = ("the", "a", "this"), (0.5, 0.3, 0.2)


def translation_corpus(seed=0, train_size=20000, valid_size=500, test_size=500):
    """Samples the built-in toy-English → made-up-language corpus.

    The grammar is described in this module's docstring. Splits are
    disjoint (no source sentence occurs twice anywhere) and drawn test first,
    then valid, then train, so for a given seed the test split does not
    change with `train_size`.

    Args:
        seed: int. The seed of the `numpy.random.default_rng` that picks
            sentences. Defaults to 0.
        train_size: int. The number of training pairs. Defaults to 20000.
        valid_size: int. The number of validation pairs. Defaults to 500.
        test_size: int. The number of test pairs. Defaults to 500.

    Returns:
        `{"train": ParallelCorpus, "valid": ParallelCorpus, "test":
        ParallelCorpus}`.

    Example:

        >>> splits = translation_corpus(seed=0, train_size=100)
        >>> splits["train"].sources[2], splits["train"].targets[2]
        ('The boat laughs.', 'Lo nopu nodes.')
    """
    rng = np.random.default_rng(seed)
    sizes = {"test": test_size, "valid": valid_size, "train": train_size}
    seen = set()
    splits = {}
    for name, size in sizes.items():
        sources, targets = [], []
        while len(sources) < size:
            source, target = _sentence_pair(rng)
            if source not in seen:
                seen.add(source)
                sources.append(source)
                targets.append(target)
        origin = f"synthetic translation corpus (seed={seed}, {name})"
        splits[name] = ParallelCorpus(sources, targets, 0, origin + " source", origin + " target")
    return {name: splits[name] for name in ("train", "valid", "test")}


def _sentence_pair(rng):
    """One `(source, target)` sentence pair of at most MAX_WORDS words."""
    while True:
        source, target = _clause(rng)
        if rng.random() < _P_COMPOUND:
            conjunction = _CONJUNCTIONS[rng.integers(len(_CONJUNCTIONS))]
            second_source, second_target = _clause(rng)
            source += [conjunction] + second_source
            target += [_LEXICON.conjunctions[conjunction]] + second_target
        if len(source) <= MAX_WORDS:
            return _as_sentence(source), _as_sentence(target)


def _as_sentence(words):
    text = " ".join(words) + "."
    return text[0].upper() + text[1:]


def _clause(rng):
    subject = _noun_phrase(rng, allow_relative=True)
    transitive = rng.random() < _P_TRANSITIVE
    verbs = _TRANSITIVE_VERBS if transitive else _INTRANSITIVE_VERBS
    verb = verbs[rng.integers(len(verbs))]
    tense = "past" if rng.random() < _P_PAST else "present"
    source = subject.source + [_source_verb(verb, tense, subject.number)]
    target = list(subject.target)
    if transitive:
        obj = _noun_phrase(rng, allow_relative=True)
        source += obj.source
        target += obj.target
    if rng.random() < _P_PREPOSITIONAL:
        preposition = _PREPOSITIONS[rng.integers(len(_PREPOSITIONS))]
        place = _noun_phrase(rng, allow_relative=False)
        source += [preposition] + place.source
        target += place.target + [_LEXICON.postpositions[preposition]]
    target.append(_target_verb(verb, tense, subject.gender, subject.number))
    return source, target


class _NounPhrase:
    def __init__(self, source, target, gender, number):
        self.source, self.target = source, target
        self.gender, self.number = gender, number


def _noun_phrase(rng, allow_relative):
    singular, plural = _NOUNS[rng.integers(len(_NOUNS))]
    number = "pl" if rng.random() < _P_PLURAL else "sg"
    determiner = _DETERMINERS[_pick(rng, _DETERMINER_PROBABILITIES)]
    adjectives = []
    for _ in range(_pick(rng, _ADJECTIVE_COUNT_PROBABILITIES)):
        adjective = _ADJECTIVES[rng.integers(len(_ADJECTIVES))]
        if adjective not in adjectives:
            adjectives.append(adjective)
    gender = _LEXICON.genders[singular]
    agreement = _ENDINGS[gender, number]
    noun_source = singular if number == "sg" else plural
    noun_target = _LEXICON.nouns[singular][number == "pl"]

    next_word = (adjectives + [noun_source])[0]
    source = [_source_determiner(determiner, number, next_word)]
    source += adjectives + [noun_source]
    target = [_ARTICLE_STEMS[determiner] + agreement, noun_target]
    target += [_LEXICON.adjectives[a] + agreement for a in reversed(adjectives)]

    if allow_relative and rng.random() < _P_RELATIVE:
        verb = _TRANSITIVE_VERBS[rng.integers(len(_TRANSITIVE_VERBS))]
        tense = "past" if rng.random() < _P_PAST else "present"
        obj = _noun_phrase(rng, allow_relative=False)
        source += [_RELATIVE[0], _source_verb(verb, tense, number)] + obj.source
        target += [_RELATIVE[1]] + obj.target
        target.append(_target_verb(verb, tense, gender, number))
    return _NounPhrase(source, target, gender, number)


def _pick(rng, probabilities):
    """Index drawn with the given probabilities (faster than `rng.choice`)."""
    index = np.searchsorted(np.cumsum(probabilities), rng.random(), "right")
    return min(int(index), len(probabilities) - 1)


def _source_determiner(determiner, number, next_word):
    if determiner == "a":
        if number == "pl":
            return "some"
        return "an" if next_word[0] in "aeiou" else "a"
    if determiner == "this":
        return "this" if number == "sg" else "these"
    return determiner


def _source_verb(verb, tense, number):
    singular_present, plural_present, past = verb
    if tense == "past":
        return past
    return singular_present if number == "sg" else plural_present


def _target_verb(verb, tense, gender, number):
    stem = _LEXICON.verbs[verb[1]]
    return stem + _VERB_TENSE[tense] + _VERB_AGREEMENT[gender, number]


class _Lexicon:
    """The fixed source → target lexicon, made up from hashes of the words.

    Stems are syllables picked by the SHA-256 of the source word, so the
    language never changes with the corpus seed or the numpy version. A
    stem whose inflected forms would collide with another target word is
    drawn again with a salted hash.
    """

    _CONSONANTS = "bdfgklmnprstvz"
    _VOWELS = "aeiou"

    def __init__(self):
        self._taken = {"ke"}
        for stem in _ARTICLE_STEMS.values():
            self._taken.update(stem + ending for ending in _ENDINGS.values())
        self.genders, self.nouns = {}, {}
        for singular, _ in _NOUNS:
            stem = self._unique("noun:" + singular, self._noun_stem, _noun_forms)
            self.nouns[singular] = tuple(_noun_forms(stem))
            self.genders[singular] = "mf"[_digest("gender:" + singular)[0] % 2]
        self.adjectives = {
            adjective: self._unique("adjective:" + adjective, self._closed_stem, _adjective_forms)
            for adjective in _ADJECTIVES
        }
        self.verbs = {
            verb[1]: self._unique("verb:" + verb[1], self._verb_stem, _verb_forms)
            for verb in _TRANSITIVE_VERBS + _INTRANSITIVE_VERBS
        }
        self.postpositions = {
            preposition: self._unique(
                "postposition:" + preposition, self._short_word, lambda w: [w]
            )
            for preposition in _PREPOSITIONS
        }
        self.conjunctions = {
            conjunction: self._unique("conjunction:" + conjunction, self._open_word, lambda w: [w])
            for conjunction in _CONJUNCTIONS
        }

    def _unique(self, key, make_stem, forms):
        for salt in range(1000):
            stem = make_stem(_digest(f"{key}#{salt}"))
            words = forms(stem)
            if not self._taken.intersection(words):
                self._taken.update(words)
                return stem
        raise RuntimeError(f"no free target word for {key}")

    def _syllable(self, byte):
        return self._CONSONANTS[byte % 14] + self._VOWELS[byte // 14 % 5]

    def _noun_stem(self, digest):
        stem = self._syllable(digest[0]) + self._syllable(digest[1])
        if digest[2] % 3 == 0:
            stem += "lmnrs"[digest[3] % 5]
        return stem

    def _closed_stem(self, digest):
        return self._syllable(digest[0]) + self._syllable(digest[1]) + "lmnrst"[digest[2] % 6]

    def _verb_stem(self, digest):
        return self._syllable(digest[0]) + self._CONSONANTS[digest[1] % 14]

    def _short_word(self, digest):
        return self._syllable(digest[0])

    def _open_word(self, digest):
        return self._syllable(digest[0]) + self._syllable(digest[1])


def _noun_forms(stem):
    return [stem, stem + ("n" if stem[-1] in "aeiou" else "en")]


def _adjective_forms(stem):
    return [stem + ending for ending in _ENDINGS.values()]


def _verb_forms(stem):
    return [
        stem + tense + agreement
        for tense in _VERB_TENSE.values()
        for agreement in _VERB_AGREEMENT.values()
    ]


def _digest(key):
    return hashlib.sha256(key.encode("utf-8")).digest()


_LEXICON = _Lexicon()


def reversal_task(count, vocabulary_size, longest, seed, first_symbol=4):
    """A token-level toy task: reverse 3..`longest` random symbols.

    Sources are the symbols then [EOS]; targets are [BOS], the symbols
    reversed, [EOS]; both padded with 0. Symbols are ids `first_symbol` to
    `vocabulary_size - 1` (below them: the special tokens). Attention
    makes it easy; a fixed-length context makes long inputs hard.

    Args:
        count: int. The number of pairs.
        vocabulary_size: int. One more than the largest symbol id.
        longest: int. The most symbols of a pair, at least 3.
        seed: int. The seed of the `numpy.random.default_rng` that draws the
            symbols.
        first_symbol: int. The smallest symbol id. Defaults to 4.

    Returns:
        `(source (count, longest + 1), target (count, longest + 2))` int32.
    """
    from pipelines.tokenizers import BOS_ID, EOS_ID

    rng = np.random.default_rng(seed)
    source = np.zeros((count, longest + 1), "int32")
    target = np.zeros((count, longest + 2), "int32")
    for row in range(count):
        length = rng.integers(3, longest + 1)
        symbols = rng.integers(first_symbol, vocabulary_size, size=length)
        source[row, :length], source[row, length] = symbols, EOS_ID
        target[row, 0], target[row, 1 : length + 1], target[row, length + 1] = (
            BOS_ID,
            symbols[::-1],
            EOS_ID,
        )
    return source, target
