"""Run one captured partition: generated kernels on a GPU, the Kernel-IR interpreter on the CPU.

:class:`PartitionRunner` replaces a ``fused_<k>`` submodule of a partitioned graph. It holds
the partition's Torch IR program (:func:`~llmopt.frontend.graph.capture_graph`) lowered once:

* inputs on a CUDA device: through the whole pipeline (``lower-to-cuda`` for that GPU's
  architecture), compiled by NVRTC and called through
  :class:`~llmopt.codegen.executor.CompiledProgram` — the path of :func:`llmopt.compile`, with
  the weights bound once by name (and, with ``cuda_graph``, replayed from a CUDA graph);
* inputs on the CPU: up to Kernel IR (the passes before ``plan-buffers``/``kernel-to-cuda``)
  and interpreted by :func:`llmopt.interp.run` — the GPU's kernels, with their thread
  assignment and reduction order, run in numpy; slow, but it needs no GPU.

Results come back as torch tensors of the dtypes and on the device of the graph's values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from llmopt.frontend.capture import CapturedProgram

if TYPE_CHECKING:
    from llmopt.codegen.executor import CompiledProgram


def kernel_pipeline(pipeline: str) -> str:
    """The part of ``pipeline`` that takes Torch IR to Kernel IR (what the interpreter runs)."""
    from llmopt.registry import split_at_level as split_pipeline

    return ",".join(split_pipeline(pipeline, "kernel")[0])


class PartitionRunner(torch.nn.Module):
    """A compiled partition, called like the submodule it replaces (its placeholders, in
    order); ``device`` is where its results go, and ``interpret`` runs the Kernel-IR
    interpreter even for CUDA tensors."""

    def __init__(self, program: CapturedProgram, submodule: torch.fx.GraphModule,
                 device: torch.device, pipeline: str, cuda_graph: bool, *,
                 interpret: bool = False) -> None:
        super().__init__()
        import llmopt
        from llmopt import registry

        self.program = program
        order = [n.name for n in submodule.graph.find_nodes(op="placeholder")]
        position = {name: k for k, name in enumerate(order)}
        self.weight_slots = [position[n] for n in program.param_names]
        self.input_slots = [position[n] for n in program.input_names]
        self.device = device
        self.results, self.single = result_dtypes(submodule)
        self.compiled: CompiledProgram | None = None
        self._bound: list[torch.Tensor] = []
        if not interpret:
            from llmopt.codegen.executor import CompiledProgram
            from llmopt.target import current_target

            target = current_target(device.index)
            llmopt.lower(program.module, registry.with_arch(pipeline, target.arch))
            self.compiled = CompiledProgram(program.module, device=device.index,
                                            arch=target.arch, cuda_graph=cuda_graph)
        else:
            llmopt.lower(program.module, kernel_pipeline(pipeline))

    @property
    def ir(self) -> str:
        """The lowered program's text (CUDA IR on a GPU, Kernel IR on the CPU)."""
        return str(self.program.module)

    def forward(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        weights = [args[k] for k in self.weight_slots]
        inputs = [args[k] for k in self.input_slots]
        if self.compiled is not None:
            if len(self._bound) != len(weights) or any(
                    a is not b for a, b in zip(weights, self._bound, strict=True)):
                self.compiled.bind_params(
                    dict(zip(self.program.param_names, (w.detach() for w in weights),
                             strict=True)))
                self._bound = list(weights)
            outputs = self.compiled(*(a.contiguous() for a in inputs))
        else:
            outputs = self._interpret([*weights, *inputs])
        results = tuple(out.to(dtype) for out, dtype in zip(outputs, self.results, strict=True))
        return results[0] if self.single else results

    def _interpret(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        import llmopt.interp

        arrays: list[Any] = [a.detach().cpu().numpy() for a in args]
        if self.program.symbols:  # the symbols' values, read from the inputs' shapes
            from llmopt.dialects._symbols import bind_arguments

            arrays, _ = bind_arguments(self.program.func, arrays)
        outputs = llmopt.interp.run(self.program.module, arrays, check_races=False)
        return [torch.from_numpy(out).to(self.device) for out in outputs]


def result_dtypes(gm: torch.fx.GraphModule) -> tuple[list[torch.dtype], bool]:
    """The dtypes of a partition's results (from the example values of its output node), and
    whether it returns one value rather than a tuple."""
    (output,) = gm.graph.find_nodes(op="output")
    values: Any = output.args[0]
    single = not isinstance(values, list | tuple)
    nodes = [values] if single else list(values)
    return [n.meta["val"].dtype for n in nodes], single


__all__ = ["PartitionRunner", "kernel_pipeline", "result_dtypes"]
