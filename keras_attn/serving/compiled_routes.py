"""One-text translations compiled by XLA behind `keras-attn serve`,
without a request ever waiting for the compiler.

A Transformer's translation export has `translate_compiled`: the search
compiled by XLA, whose steps cost about their matrix products, one program
per shape, each compiled (seconds) the first time a process meets it. The
server compiles, in the background after a version loads, the programs of
one text at each of its `widths` (every source bucket, through the export's
`warm_up`); from then on a `translate` or `serving_default` call of one
text at such a width runs `translate_compiled`, with the same outputs.
Everything else runs `translate` in TensorFlow's graph: larger batches
(which merged requests are, under load, and where the graph's matrix
products are the faster), other widths, and every request until its width
is compiled.

Example:

    >>> routes = CompiledRoutes(widths=(1, 4))
    >>> routes.start(store.refresh())  # doctest: +SKIP
    >>> one_text = {"text": [b"Hallo"], "beam_width": 4}
    >>> routes.signature(store.find("transformer"), "translate", one_text)  # doctest: +SKIP
    'translate_compiled'
"""

import threading
import time

# the export's signatures (`serving.Translator`)
COMPILED, WARM_UP = (
    "translate_compiled",
    "warm_up",
)
ROUTED = ("translate", "serving_default")  # the signatures whose one-text calls run `COMPILED`
# The requests `translate_compiled` takes: up to this many texts, at beam widths up to this (1 is
# greedy search). XLA's matrix products lose to TensorFlow's from about 8 rows on (on CPU).
COMPILED_ROWS, COMPILED_WIDTH = 4, 8


class CompiledRoutes:
    """Which calls run compiled: per version, the beam widths whose programs are compiled.

    Args:
        widths: tuple of int. The beam widths to compile one text's programs at, in
            this order; empty, every call runs as asked.
        log: callable or `None`. Told a line, per version, when its widths are compiled (or
            why not). Defaults to `None` (nothing told).
    """

    def __init__(self, widths, log=None):
        self.widths = tuple(widths)
        self.log = log or (lambda line: None)
        self._ready = {}  # (name, number) -> the widths compiled so far

    def start(self, versions):
        """Compiles, in a background thread each, the programs of the
        loaded `versions` that have `warm_up`.

        Args:
            versions: list of `keras_attn.serving.store.Version`. The versions a
                `ModelStore.refresh` found; those without `warm_up` and `translate_compiled`
                are left out.
        """
        for version in versions:
            signatures = getattr(version.loaded, "signatures", {})
            if self.widths and WARM_UP in signatures and COMPILED in signatures:
                self._ready[version.name, version.number] = set()
                threading.Thread(
                    target=self._warm_up,
                    args=(version,),
                    daemon=True,
                    name=f"warm-up {version.name}/{version.number}",
                ).start()

    def ready(self, version):
        """The beam widths at which `version` runs one text compiled, so far.

        Args:
            version: `keras_attn.serving.store.Version`. A loaded version.

        Returns:
            A frozenset of int: the widths compiled so far (empty for a version not compiled).
        """
        return frozenset(self._ready.get((version.name, version.number), ()))

    def signature(self, version, name, inputs):
        """The signature to run for a call of signature `name` with `inputs`.

        Args:
            version: `keras_attn.serving.store.Version`. The version called.
            name: str. The signature the request names.
            inputs: dict. `{input name: np.ndarray}`, the call's inputs.

        Returns:
            A str: `"translate_compiled"` for one text of a routed signature (`translate`,
            `serving_default`) at a compiled width, else `name`.
        """
        if name not in ROUTED or len(inputs.get("text", ())) != 1:
            return name
        width = inputs.get("beam_width")
        return COMPILED if width is not None and int(width) in self.ready(version) else name

    def _warm_up(self, version):
        import tensorflow as tf

        warm_up, began = version.loaded.signatures[WARM_UP], time.perf_counter()
        for width in self.widths:
            try:
                warm_up(beam_width=tf.constant(width), rows=tf.constant(1))
            except Exception as error:  # noqa: BLE001  (that version then runs every call in the graph)
                message = (
                    getattr(error, "message", None) or str(error) or type(error).__name__
                ).strip()
                self.log(
                    f"{version.name}/{version.number}: not compiled at beam width {width}: "
                    f"{message.splitlines()[0]}"
                )
                return
            self._ready[version.name, version.number].add(width)
        widths = ", ".join(map(str, self.widths))
        self.log(
            f"{version.name}/{version.number}: one-text translations at beam widths {widths} "
            f"compiled by XLA in {time.perf_counter() - began:.1f} s"
        )
