"""CPU interpreters for every llmopt level, in numpy.

``run(module, inputs)`` interprets the module's host function — Torch or Tensor IR tensor ops,
or at Loop, Tile and Kernel IR buffer allocations, kernels and launches — and returns its
results. Each level is vectorised rather than interpreted point by point:

* Torch IR (:mod:`.torch`) and Tensor IR (:mod:`.prim`): whole-array numpy per op;
* Loop IR (:mod:`.loop`): loop nests as broadcast index grids, one axis per loop;
* Tile IR (:mod:`.tile`) and Kernel IR (:mod:`.kernel`): SIMT, with the blocks and threads of
  the launch as array axes, executing the GPU's assignment of work to threads, its reduction
  order, its bounds checks and its barriers (a data race raises :class:`RaceError`).

Programs in ``f32`` compute and round in ``float32``; ``f64`` in ``float64``.

New ops are interpreted by registering a function: :func:`host_impl` for ops in a host
function body, :func:`simt_impl` for ops inside loop nests and kernels, :func:`scalar_impl` for
scalar ops usable everywhere.
"""

from llmopt.interp import kernel, loop, mbarrier, mma, prim, tile, tma, torch, wgmma  # noqa: F401  (register)
from llmopt.interp._core import (
    DivergenceError,
    InterpretError,
    OutOfBoundsError,
    RaceError,
    UnsupportedOpError,
)
from llmopt.interp.host import HostInterpreter, host_impl, random_inputs, run
from llmopt.interp.scalar import scalar_impl
from llmopt.interp.simt import SimtEvaluator, simt_impl

__all__ = [
    "run", "random_inputs", "InterpretError", "OutOfBoundsError", "RaceError",
    "DivergenceError", "UnsupportedOpError", "HostInterpreter", "SimtEvaluator", "host_impl",
    "simt_impl", "scalar_impl",
]
