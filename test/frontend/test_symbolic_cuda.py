"""Symbolic programs at CUDA IR: one CUDA source for every length up to the maximum.

The tiny Llama and Qwen2 decoder layers and whole models, captured with a symbolic length (as
in ``test_capture_symbolic``), are lowered by the whole ``lower-to-cuda`` pipeline and the
printed source is compiled by NVRTC for sm_90 (NVRTC needs no GPU). Every kernel that takes
the length takes it as an ``int``, and every launch that passes it has a grid computed from
it. Running the CUBINs needs a GPU (test/gpu/test_symbolic_gpu.py).
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("cuda")

from test_capture_symbolic import symbolic_layer, symbolic_model  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

import llmopt  # noqa: E402
from llmopt.codegen.cuda_printer import cuda_source  # noqa: E402
from llmopt.codegen.nvrtc import compile_cuda  # noqa: E402
from llmopt.dialects import cuda, kernel  # noqa: E402
from llmopt.frontend.capture import CapturedProgram  # noqa: E402

ELF_MAGIC = b"\x7fELF"


def at_cuda_ir(program: CapturedProgram) -> ModuleOp:
    module = program.module.clone()
    llmopt.lower(module, "lower-to-cuda")
    assert not [op for op in module.walk()
                if op.name.startswith(("torch.", "prim.", "loop.", "tile.", "kernel.func"))]
    return module


def programs() -> list[tuple[str, str]]:
    return [(what, kind) for what in ("layer", "model") for kind in ("llama", "qwen2")]


@pytest.mark.parametrize(("what", "kind"), programs())
def test_symbolic_cuda_compiles(what: str, kind: str) -> None:
    program = (symbolic_layer if what == "layer" else symbolic_model)(kind)
    module = at_cuda_ir(program)
    kernels = [op for op in module.walk() if isinstance(op, cuda.KernelOp)]
    source = cuda_source(module)
    # the length is one int parameter of every kernel that has buffers with ? extents
    takes_length = [k for k in kernels if "i32" in [str(t) for t in k.param_types.data]]
    assert takes_length, "no kernel takes the length"
    assert re.search(r"\n    int seq[,)]", source)  # a parameter of its own line
    assert "\n  const long long seq_index = (long long)seq;" in source  # widened once
    assert "* seq_index" in source  # a runtime stride
    launches = [op for op in module.walk() if isinstance(op, kernel.LaunchOp)]
    assert any(launch.grid_size is not None for launch in launches)
    assert compile_cuda(source, arch="sm_90")[:4] == ELF_MAGIC
