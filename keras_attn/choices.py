"""The choices of the RNN Seq2Seq job's options, in one place without imports.

The CLI builds its parser from these before TensorFlow is imported; the job
checks its config against them; the benchmarks offer the same flags.
"""

ATTENTIONS = ("bahdanau", "luong", "none")
CELLS = ("lstm", "gru")
SCORES = ("dot", "general", "scaled_general", "concat")
LOCALS = ("monotonic", "predictive")
DECAYS = ("linear", "exponential", "inverse_sigmoid")
