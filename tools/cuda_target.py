"""The ``cuda`` output target of ``llm-opt`` (``-t cuda``).

It prints a module of the ``cuda`` dialect (level 6) as CUDA C++ source. All the printing
logic lives in :func:`llmopt.codegen.cuda_printer.print_cuda`; this class only plugs it into
xDSL's target mechanism. The printer is imported when the target is used, not before, so
that ``llm-opt`` starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target


@dataclass(frozen=True)
class CudaTarget(Target):
    """Emit the CUDA source text of a ``cuda``-dialect module."""

    name: ClassVar[str] = "cuda"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        """Print ``module`` as CUDA C++ to ``output``."""
        from llmopt.codegen.cuda_printer import print_cuda

        print_cuda(module, output)
