"""Strings in, strings out through a CTranslate2 model folder: our
tokenizers around CTranslate2's search.

`keras-attn export-ct2 RUN_OR_EXPORT OUT` writes the folder (with the
preprocessor's Keras config); `load_ctranslate2(OUT)` or
`keras-attn translate OUT` translate with it. Sources are tokenized and cut
as the SavedModel does (by its preprocessor, control characters and all), and
each sentence gets the SavedModel's step budget
(`decoding.max_decode_length`), whatever it is batched with, so greedy
search writes the translations of a SavedModel that computes in float32.
CTranslate2 computes in float32 on CPU (it has no bfloat16 there); the
export of a run trained in mixed_bfloat16 computes in bfloat16, whose
rounding turns some near-ties between the two likeliest tokens the other
way: compare it with a float32 export of the same weights instead. Beam
search ranks as CTranslate2 does (see `keras_attn.serving.ctranslate2_export`):
its length penalty is `length^α`, with our α.

`keras-attn serve` serves such a folder beside SavedModels, as a version of a
model (`<root>/<name>/<version>/model.bin`), through `CTranslate2Servable`:
the SavedModel's `translate` signature over this engine.
"""

import json
import os

import ctranslate2
import keras
import numpy as np
import tensorflow as tf

from keras_attn import decoding, graph
from keras_attn.decoding import MAX_BEAM_WIDTH
from keras_attn.errors import UserError
from keras_attn.serving.ctranslate2_export import PREPROCESSOR, SEARCH_OPTIONS
from keras_attn.serving.translator import nothing_to_translate
from pipelines import preprocessors  # noqa: F401  (registers the preprocessor `load_ctranslate2` deserializes)
from pipelines.special_tokens import PAD_ID


def threads_per_call(calls=1):
    """CTranslate2's threads for each of `calls` translations that run at once.

    The process's cores shared between them, at least one (CTranslate2's own default, 4 a
    translation, puts more threads than cores to work on a small machine).

    Args:
        calls: int. The translations that run at once. Defaults to 1.

    Returns:
        An int: the threads for each, at least 1.
    """
    return max(1, len(os.sched_getaffinity(0)) // calls)


def load_ctranslate2(folder, compute_type="default", threads=None):
    """The `CTranslate2Translator` of a folder `keras-attn export-ct2` wrote.

    Args:
        folder: str. The CTranslate2 model folder (`export-ct2`'s OUT).
        compute_type: str. CTranslate2's compute type, e.g. `"int8"` or `"float32"`;
            `"default"` is the type the weights were saved in. Defaults to `"default"`.
        threads: int or `None`. CTranslate2's threads per translation. Defaults to `None`:
            `threads_per_call()`, the process's cores.

    Returns:
        A `CTranslate2Translator`.

    Raises:
        UserError: when the folder has no readable preprocessor file (`PREPROCESSOR`), or no
            readable CTranslate2 model.
    """
    path = os.path.join(folder, PREPROCESSOR)
    try:
        with open(path, encoding="utf-8") as file:
            preprocessor = keras.saving.deserialize_keras_object(json.load(file))
    except FileNotFoundError:
        raise UserError(
            f"{folder}: no {PREPROCESSOR} (not a CTranslate2 folder of keras-attn export-ct2, or "
            "one from before 2026-12-05: convert again)"
        ) from None
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise UserError(f"{path}: not a readable keras-attn preprocessor ({error})") from None
    return CTranslate2Translator(folder, preprocessor, compute_type=compute_type, threads=threads)


class CTranslate2Translator:
    """A CTranslate2 translation model with the tokenizers of the model it was converted from.

    Args:
        folder: str. The CTranslate2 model folder.
        preprocessor: `TranslationPreprocessor`. The model's preprocessor (its
            tokenizers and `max_length`).
        compute_type: str. CTranslate2's compute type, e.g. `"int8"` or
            `"float32"`; `"default"` is the type the weights were saved in. Defaults to
            `"default"`.
        threads: int or `None`. CTranslate2's threads per translation. Defaults to `None`:
            `threads_per_call()`, the process's cores.
        max_beam_width: int. The widest beam a call gets, as the SavedModel's. Defaults to 32
            (`decoding.MAX_BEAM_WIDTH`).

    Raises:
        UserError: when `folder` holds no readable CTranslate2 model.
    """

    def __init__(
        self,
        folder,
        preprocessor,
        compute_type="default",
        threads=None,
        max_beam_width=MAX_BEAM_WIDTH,
    ):
        self.threads = threads or threads_per_call()
        try:
            self.translator = ctranslate2.Translator(
                folder, device="cpu", compute_type=compute_type, intra_threads=self.threads
            )
        except RuntimeError as error:  # a truncated or damaged model.bin
            raise UserError(f"{folder}: not a readable CTranslate2 model ({error})") from None
        self.preprocessor = preprocessor
        self.max_beam_width = max_beam_width
        self._source_tokens = np.array(preprocessor.source_tokenizer.vocabulary, dtype=object)
        self._target_ids = {
            token: i for i, token in enumerate(preprocessor.target_tokenizer.vocabulary)
        }
        self._encode = graph.function(
            self._encode_graph, input_signature=[tf.TensorSpec([None], tf.string)]
        )
        self._decode = graph.function(
            preprocessor.detokenize, input_signature=[tf.TensorSpec([None, None], tf.int32)]
        )

    def _encode_graph(self, text):
        source, truncated = self.preprocessor.tokenize_source(text)
        budgets = decoding.max_decode_length(source, cap=self.preprocessor.max_length)
        return source, truncated, budgets, nothing_to_translate(text, source)

    def search_inputs(self, texts):
        """What CTranslate2's search takes for `texts`, as `translate` gives it.

        Args:
            texts: list of str or bytes. The texts to translate (bytes in UTF-8).

        Returns:
            `(tokens, budgets, truncated, empty)`: each text's source tokens
            (a list of `str`), its decode-step budget, whether it was cut, and
            whether it has nothing to translate (NumPy arrays but `tokens`).
        """
        source, truncated, budgets, empty = (
            t.numpy() for t in self._encode(tf.constant(texts, tf.string))
        )
        tokens = [list(self._source_tokens[row[row != PAD_ID]]) for row in source]
        return tokens, budgets, truncated, empty

    def translate(self, texts, beam_width=4):
        """Translates `texts` (str or UTF-8 bytes).

        Args:
            texts: list of str or bytes. The texts to translate.
            beam_width: int. The beam width, clipped to [1, `max_beam_width`]; 1 is greedy
                search. Defaults to 4.

        Returns:
            `(translations, truncated)`: a string per text, and whether each
            was longer than the model accepts and was cut. A text that is
            blank or has no tokens translates to `""`.
        """
        translations, _, truncated = self.search(texts, beam_width)
        return translations, truncated

    def search(self, texts, beam_width=4):
        """`translate`'s results, with each translation's score.

        Args:
            texts: list of str or bytes. The texts to translate.
            beam_width: int. The beam width, clipped to [1, `max_beam_width`]; 1 is greedy
                search. Defaults to 4.

        Returns:
            `(translations, scores, truncated)`, lists with an item per text: `translate`'s,
            with each translation's score as CTranslate2 gives it (its log-probability
            over `length^α`; 0.0 for a text with nothing to translate).
        """
        if not len(texts):
            return [], [], []
        tokens, budgets, truncated, empty = self.search_inputs(texts)
        rows = np.flatnonzero(~empty)
        ids = np.full((len(texts), max(1, int(budgets.max()))), PAD_ID, np.int32)
        scores = np.zeros(len(texts), np.float32)
        if len(rows):
            results = self.translator.translate_batch(
                [tokens[i] for i in rows],
                beam_size=min(max(beam_width, 1), self.max_beam_width),
                max_decoding_length=int(budgets[rows].max()),
                length_penalty=decoding.LENGTH_PENALTY,
                return_scores=True,
                **SEARCH_OPTIONS,
            )
            for i, result in zip(rows, results):
                output = [self._target_ids[token] for token in result.hypotheses[0][: budgets[i]]]
                ids[i, : len(output)] = output
                scores[i] = result.scores[0]
        translations = [
            t.decode("utf-8", "replace") for t in self._decode(tf.constant(ids)).numpy()
        ]
        return translations, scores.tolist(), [bool(t) for t in truncated]


class CTranslate2Servable:
    """A CTranslate2 folder as `keras-attn serve` serves a version:
    the SavedModel's `translate` signature.

    `signatures["translate"]` (and `"serving_default"`) take `text: string[B]`
    and `beam_width: int32[]` and answer `translation` string[B], `score`
    float32[B] (CTranslate2's) and `truncated` bool[B], as the SavedModel's
    do, so the REST API, dynamic batching and metadata treat both engines
    alike. There is no `attention` signature: CTranslate2 gives none.

    Args:
        translator: `CTranslate2Translator`. The folder's translator.
    """

    def __init__(self, translator):
        self.translator = translator
        translate = _Signature(translator)
        self.signatures = {"serving_default": translate, "translate": translate}


class _Signature:
    """What the server reads of a SavedModel's signature (its input and output specs,
    a call by input names), answered by CTranslate2 in Python. Not a `tf.function`:
    run inside a TensorFlow op, the search's own TensorFlow calls (tokenizing) would
    wait for the op's thread pool, which concurrent requests fill."""

    structured_input_signature = (
        (),
        {
            "text": tf.TensorSpec([None], tf.string, name="text"),
            "beam_width": tf.TensorSpec([], tf.int32, name="beam_width"),
        },
    )
    structured_outputs = {
        "translation": tf.TensorSpec([None], tf.string, name="translation"),
        "score": tf.TensorSpec([None], tf.float32, name="score"),
        "truncated": tf.TensorSpec([None], tf.bool, name="truncated"),
    }

    def __init__(self, translator):
        self._translator = translator

    def __call__(self, text, beam_width):
        texts = list(np.asarray(text).reshape(-1))
        translations, scores, truncated = self._translator.search(texts, int(beam_width))
        return {
            "translation": tf.constant(translations, tf.string, [len(texts)]),
            "score": tf.constant(scores, tf.float32, [len(texts)]),
            "truncated": tf.constant(truncated, tf.bool, [len(texts)]),
        }
