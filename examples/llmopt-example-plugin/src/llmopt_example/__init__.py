"""An llmopt plugin, installed as its own package (entry point group ``llmopt.plugins``).

Importing it registers:

* ``ex-strength-reduce`` — a Loop-IR pass rewriting ``x * 2.0`` into ``x + x``
  (:mod:`llmopt_example.strength_reduce`);
* the ``ex`` dialect with ``ex.gelu_tanh`` (:mod:`llmopt_example.gelu`) and ``ex-to-prim``,
  its lowering into Tensor IR (:mod:`llmopt_example.ex_to_prim`).

:mod:`llmopt_example.interp` teaches llmopt's CPU interpreter ``ex.gelu_tanh`` (it imports
numpy, so it is loaded on demand: ``llm-opt --load-plugin llmopt_example.interp``).
"""

from llmopt_example import ex_to_prim, gelu, strength_reduce

__all__ = ["ex_to_prim", "gelu", "strength_reduce"]
