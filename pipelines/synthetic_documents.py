"""The built-in generated document corpus of BERT pretraining.

`document_corpus(num_documents, seed)` writes short English-like documents,
each about one topic and one person, so that both pretraining objectives
have something to learn:

- Next-sentence prediction: the sentences of a document share its topic
  (a kitchen, a harbour, a forest, ...) and its person, named in most
  sentences. A sentence from another document is, 7 times in 8, about
  another topic and, almost always, about someone else.
- Masked language model: every noun has one fixed adjective ("the sharp
  knife", never "the blue knife"), every verb one fixed object class within
  its topic, the person's pronoun follows their name, and numbers in
  counting sentences go up by one ("... two boats. ... three boats.").
  A masked adjective, noun, pronoun or number is predictable from the rest
  of the sentence or document.

About 380 distinct words; the corpus is deterministic given `seed`.
"""

import numpy as np

TOPICS = {
    "kitchen": (
        [
            "knife",
            "pan",
            "onion",
            "kettle",
            "spoon",
            "bowl",
            "oven",
            "apple",
            "plate",
            "bread",
            "lemon",
            "cup",
        ],
        [
            "sharp",
            "heavy",
            "sweet",
            "loud",
            "silver",
            "deep",
            "hot",
            "green",
            "white",
            "fresh",
            "sour",
            "tiny",
        ],
        ["washes", "cuts", "holds", "fills", "cleans", "moves"],
    ),
    "harbour": (
        [
            "boat",
            "rope",
            "anchor",
            "sail",
            "crane",
            "wave",
            "net",
            "gull",
            "dock",
            "barrel",
            "lantern",
            "mast",
        ],
        [
            "slow",
            "wet",
            "rusty",
            "torn",
            "tall",
            "cold",
            "old",
            "grey",
            "long",
            "oaken",
            "bright",
            "narrow",
        ],
        ["ties", "pulls", "paints", "repairs", "watches", "loads"],
    ),
    "forest": (
        [
            "oak",
            "fox",
            "path",
            "stream",
            "mushroom",
            "owl",
            "fern",
            "stone",
            "pine",
            "deer",
            "moss",
            "log",
        ],
        [
            "ancient",
            "quick",
            "muddy",
            "clear",
            "brown",
            "wise",
            "soft",
            "mossy",
            "dark",
            "shy",
            "damp",
            "fallen",
        ],
        ["follows", "crosses", "finds", "counts", "photographs", "passes"],
    ),
    "school": (
        [
            "book",
            "pencil",
            "desk",
            "map",
            "chalk",
            "bell",
            "ruler",
            "globe",
            "lesson",
            "poem",
            "board",
            "clock",
        ],
        [
            "thick",
            "yellow",
            "wooden",
            "folded",
            "dusty",
            "ringing",
            "straight",
            "round",
            "short",
            "famous",
            "black",
            "broken",
        ],
        ["reads", "opens", "draws", "studies", "carries", "writes"],
    ),
    "garden": (
        [
            "rose",
            "shovel",
            "tomato",
            "hedge",
            "bee",
            "fence",
            "tulip",
            "hose",
            "seed",
            "pond",
            "carrot",
            "bench",
        ],
        [
            "red",
            "dirty",
            "ripe",
            "trimmed",
            "busy",
            "painted",
            "purple",
            "coiled",
            "small",
            "still",
            "orange",
            "shaded",
        ],
        ["waters", "plants", "picks", "trims", "digs", "guards"],
    ),
    "workshop": (
        [
            "hammer",
            "saw",
            "nail",
            "plank",
            "drill",
            "glue",
            "clamp",
            "screw",
            "chisel",
            "vice",
            "bolt",
            "brush",
        ],
        [
            "steel",
            "jagged",
            "bent",
            "smooth",
            "electric",
            "sticky",
            "tight",
            "loose",
            "blunt",
            "iron",
            "hex",
            "stiff",
        ],
        ["sharpens", "grips", "sands", "fixes", "measures", "sorts"],
    ),
    "market": (
        [
            "fish",
            "coin",
            "basket",
            "cheese",
            "scale",
            "melon",
            "stall",
            "egg",
            "honey",
            "price",
            "cart",
            "flower",
        ],
        [
            "salty",
            "golden",
            "woven",
            "strong",
            "fair",
            "juicy",
            "crowded",
            "brown",
            "sticky",
            "low",
            "squeaky",
            "cut",
        ],
        ["sells", "weighs", "buys", "counts", "wraps", "checks"],
    ),
    "station": (
        [
            "train",
            "ticket",
            "platform",
            "lamp",
            "bag",
            "kiosk",
            "signal",
            "track",
            "whistle",
            "timetable",
            "coat",
            "door",
        ],
        [
            "late",
            "printed",
            "empty",
            "noisy",
            "leather",
            "metal",
            "red",
            "curved",
            "shrill",
            "paper",
            "warm",
            "sliding",
        ],
        ["boards", "waits", "checks", "hears", "misses", "finds"],
    ),
}

NAMES = [
    ("anna", "she"),
    ("ben", "he"),
    ("clara", "she"),
    ("david", "he"),
    ("emma", "she"),
    ("felix", "he"),
    ("greta", "she"),
    ("hugo", "he"),
    ("ida", "she"),
    ("jonas", "he"),
    ("karla", "she"),
    ("leo", "he"),
    ("mia", "she"),
    ("noah", "he"),
    ("olga", "she"),
    ("paul", "he"),
    ("rosa", "she"),
    ("samuel", "he"),
    ("tina", "she"),
    ("viktor", "he"),
    ("wanda", "she"),
    ("xaver", "he"),
    ("yara", "she"),
    ("zeno", "he"),
    ("alma", "she"),
    ("bruno", "he"),
    ("cora", "she"),
    ("dario", "he"),
    ("elsa", "she"),
    ("fritz", "he"),
    ("hanna", "she"),
    ("igor", "he"),
    ("julia", "she"),
    ("kurt", "he"),
    ("lena", "she"),
    ("max", "he"),
]

PLACE_PROBABILITY = 0.7  # sentences that end "... in the kitchen."
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def document_corpus(num_documents=2000, seed=0, min_sentences=3, max_sentences=10):
    """Generated topical documents (see the module docstring).

    Args:
        num_documents: int. How many documents. Defaults to 2000.
        seed: int. Chooses topics, people and sentences. Defaults to 0.
        min_sentences: int. The fewest sentences in a document. Defaults to
            3.
        max_sentences: int. The most sentences in a document. Defaults to
            10.

    Returns:
        A list of documents, each a list of sentence strings.

    Example:

        >>> document_corpus(1, seed=0)[0][:2]
        ['Yara weighs the woven basket in the market.', 'Yara wraps the low price in the market.']
    """
    return [
        document
        for _, document in labelled_documents(num_documents, seed, min_sentences, max_sentences)
    ]


def labelled_documents(num_documents=2000, seed=0, min_sentences=3, max_sentences=10):
    """`document_corpus`'s documents with their topics: an 8-label classification task.

    Takes the arguments of `document_corpus` and gives the same documents.

    Args:
        num_documents: int. How many documents. Defaults to 2000.
        seed: int. Chooses topics, people and sentences. Defaults to 0.
        min_sentences: int. The fewest sentences in a document. Defaults to
            3.
        max_sentences: int. The most sentences in a document. Defaults to
            10.

    Returns:
        A list of `(topic, document)` pairs, the topic a key of `TOPICS`.

    Example:

        >>> [topic for topic, _ in labelled_documents(3, seed=0)]
        ['market', 'school', 'market']
    """
    rng = np.random.default_rng(seed)
    topics = list(TOPICS)
    labelled = []
    for _ in range(num_documents):
        topic = topics[rng.integers(len(topics))]
        name, pronoun = NAMES[rng.integers(len(NAMES))]
        length = int(rng.integers(min_sentences, max_sentences + 1))
        labelled.append((topic, _document(rng, topic, name.capitalize(), pronoun, length)))
    return labelled


def _document(rng, place, name, pronoun, length):
    nouns, adjectives, verbs = TOPICS[place]
    count = int(rng.integers(1, 6))  # counting sentences go up from here

    def thing():
        index = int(rng.integers(len(nouns)))
        return f"the {adjectives[index]} {nouns[index]}"

    def verb_phrase():
        verb = int(rng.integers(len(verbs)))
        # Each verb takes the nouns of its own pair of columns.
        index = 2 * verb + int(rng.integers(2))
        return f"{verbs[verb]} the {adjectives[index]} {nouns[index]}"

    sentences = []
    for position in range(length):
        kind = int(rng.integers(5)) if position else 0
        if kind == 0:
            sentence = f"{name} {verb_phrase()}."
        elif kind == 1:
            sentence = f"{pronoun.capitalize()} {verb_phrase()} and then {pronoun} {verb_phrase()}."
        elif kind == 2:
            first = thing()
            sentence = f"{first[0].upper()}{first[1:]} is next to {thing()}."
        elif kind == 3 and count < len(NUMBERS):
            noun = nouns[int(rng.integers(len(nouns)))]
            sentence = f"{name} sees {NUMBERS[count]} {noun}s."
            count += 1
        else:
            sentence = f"Later {name} {verb_phrase()} with {thing()}."
        if rng.random() < PLACE_PROBABILITY:
            sentence = f"{sentence[:-1]} in the {place}."
        sentences.append(sentence)
    return sentences
