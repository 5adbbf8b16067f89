"""How close an imported model's outputs must be to the reference
library's: within 1e-5 of the output's scale.

Both compute in float32, summing in other orders; an output whose values
reach 6 (the masked LM's logits of the wide test checkpoints) differs by
up to 1.1e-5 where a value near 0 comes from cancelling terms.
"""

import numpy as np

SCALE_TOLERANCE = 1e-5


def assert_close(ours, theirs, what):
    """`ours` equals `theirs` within `SCALE_TOLERANCE` × their largest magnitude (at least 1);
    `what` names the output (a layer) when they differ."""
    theirs = np.asarray(theirs)
    bound = SCALE_TOLERANCE * max(1.0, float(np.abs(theirs).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(ours), theirs, atol=bound, rtol=0, err_msg=what)
