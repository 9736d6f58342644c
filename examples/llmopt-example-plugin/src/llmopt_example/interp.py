"""``ex.gelu_tanh`` for llmopt's CPU interpreter, so ``--check-numerics`` and
:func:`llmopt.check_numerics` can run programs that still hold ``ex`` ops.

It imports numpy, so it is not part of the plugin's entry point (``llm-opt`` stays quick to
start): load it where numerics are checked, ``llm-opt --load-plugin llmopt_example.interp``
or ``import llmopt_example.interp``. The reference is computed in float64 and rounded once
to the tensor's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation

from llmopt.interp import HostInterpreter, host_impl


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU, in float64."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@host_impl("ex.gelu_tanh")
def _gelu_tanh(interp: HostInterpreter, op: Operation, args: list[np.ndarray]
               ) -> Sequence[np.ndarray]:
    """Interpret ``ex.gelu_tanh`` on a whole array."""
    (x,) = args
    return [gelu_tanh(x).astype(np.asarray(x).dtype)]
