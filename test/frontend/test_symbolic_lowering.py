"""Symbolic programs below Tensor IR: one lowering for every length up to the maximum.

The tiny Llama and Qwen2 decoder layers and a whole tiny Llama, captured with a symbolic
length (as in ``test_capture_symbolic``), are lowered once to each of Loop, Tile and Kernel
IR through the passes of ``lower-to-cuda`` that lead there (at Tile IR: ``loop-to-tile`` and
every schedule pass; at Kernel IR: ``tile-to-kernel``, the cleanups, ``plan-buffers``), and
run by that level's interpreter at lengths 1, 7, 37 and the maximum against PyTorch in
float64, within :func:`llmopt.numerics.tolerance` (whole model:
argmax identical at every position). Bad lengths are errors that name the argument and the
bound.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_capture_symbolic import MAX, arrays, symbolic_layer, symbolic_model  # noqa: E402
from test_models import tiny_model  # noqa: E402
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, i64  # noqa: E402

import llmopt  # noqa: E402
from llmopt.dialects import loop, tile  # noqa: E402
from llmopt.frontend.capture import CapturedProgram  # noqa: E402
from llmopt.frontend.models import decoder_layers, position_embeddings  # noqa: E402
from llmopt.interp import InterpretError, run  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402
from llmopt.tools.llmopt_cli import split_pipeline  # noqa: E402

LENGTHS = (1, 7, 37, MAX)
LEVELS = ("loop", "tile", "kernel")

_LOWERED: dict[tuple[int, str], ModuleOp] = {}


def at_level(program: CapturedProgram, level: str) -> ModuleOp:
    """``program`` lowered to ``level`` by the passes of ``lower-to-cuda`` that lead there
    (once per program and level)."""
    key = (id(program), level)
    if key not in _LOWERED:
        module = program.module.clone()
        llmopt.lower(module, ",".join(split_pipeline("lower-to-cuda", level)[0]))
        earlier = {"loop": ("torch.", "prim."), "tile": ("torch.", "prim.", "loop.kernel"),
                   "kernel": ("torch.", "prim.", "loop.", "tile.")}[level]
        assert not [op for op in module.walk() if op.name.startswith(earlier)]
        _LOWERED[key] = module
    return _LOWERED[key]


def at_loop_ir(program: CapturedProgram) -> ModuleOp:
    return at_level(program, "loop")


def check(program: CapturedProgram, inputs: tuple[Any, ...], want: np.ndarray,
          level: str) -> np.ndarray:
    args = arrays(program, inputs)
    (got,) = run(at_level(program, level), args)
    _, rel = compare([got], [want])
    tol = tolerance(program.module, int(args[-1]))
    assert rel <= tol, f"relative error {rel:.2e} > {tol:.2e}"
    return got


def test_layer_loops_run_to_the_length() -> None:
    module = at_loop_ir(symbolic_layer("llama"))
    text = str(module)
    assert "memref.alloc(%seq) : memref<1x?x64xf32>" in text
    kernels = list(loop.kernels(module))
    dynamic = [k for k in kernels if any(isinstance(op, loop.ForOp | loop.ReduceOp)
                                         and op.is_dynamic for op in k.walk())]
    assert dynamic == kernels  # every kernel of a layer iterates over the tokens
    # attention is one flash kernel (already Tile IR here): its query blocks and the grid
    # follow the runtime length
    (flash,) = [op for op in module.walk()
                if isinstance(op, tile.KernelOp) and "llmopt.flash" in op.attributes]
    assert flash.grid_size is not None
    assert any(isinstance(op, tile.ForallOp) and op.runtime_sizes for op in flash.walk())
    # the length reaches each kernel as an index argument bound to the symbol
    for kernel in kernels:
        assert [str(b.name_hint) for b in kernel.buffers if isinstance(b.type, IndexType)] \
            == ["seq"]


def test_layer_grids_follow_the_length() -> None:
    module = at_level(symbolic_layer("llama"), "tile")
    kernels = [op for op in module.walk() if isinstance(op, tile.KernelOp)]
    one_row = [k for k in kernels if k.attributes.get("llmopt.bucket") == IntegerAttr(1, i64)]
    assert one_row and all(k.grid_size is None for k in one_row)  # exactly one row: static
    assert all(k.grid_size is not None for k in kernels if k not in one_row)
    text = str(module)
    assert "arith.ceildivui" in text and "grid [%seq max 128, 1, 1]" in text
    # the schedule passes tile the products and fuse attention: blocks over the length
    blocks = [op for op in module.walk() if isinstance(op, tile.ForallOp)
              and op.mapping.data == "blocks" and op.runtime_sizes]
    assert any(isinstance(op, tile.AllocOp) and op.space.data == "registers"
               for f in blocks for op in f.walk())
    assert any("llmopt.flash" in k.attributes for k in kernels)


def test_layer_kernels_take_the_length() -> None:
    module = at_level(symbolic_layer("llama"), "kernel")
    funcs = [op for op in module.ops if op.name == "kernel.func"]
    launches = [op for op in module.walk() if op.name == "kernel.launch"]
    assert funcs and launches
    one_row = {fn.sym_name.data for fn in funcs if fn.sym_name.data.endswith("_coop1")}
    assert one_row  # the one-row variants of the products: launched on a static grid
    for fn in funcs:  # one index parameter: the length
        assert [str(t) for t in fn.function_type.inputs.data].count("index") == 1
    for launch in launches:
        static = launch.kernel.root_reference.data in one_row
        assert (launch.grid_size is None) == static


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("length", LENGTHS)
def test_decoder_layer_at_any_length(kind: str, length: int, level: str) -> None:
    model = tiny_model(kind)
    program = symbolic_layer(kind)
    x = torch.randn(1, length, 64, generator=torch.Generator().manual_seed(100 + length))
    cos, sin = position_embeddings(model, length)
    layer = copy.deepcopy(decoder_layers(model)[0]).double()
    with torch.no_grad():
        out = layer(x.double(), attention_mask=None,
                    position_embeddings=(cos.double(), sin.double()))
    want = (out[0] if isinstance(out, tuple) else out).numpy()
    got = check(program, (x, cos, sin), want, level)
    assert got.shape == (1, length, 64)


@functools.cache
def reference_model() -> Any:
    return copy.deepcopy(tiny_model("llama")).double()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("length", (1, 37, MAX))
def test_whole_model_at_any_length(length: int, level: str) -> None:
    program = symbolic_model("llama")
    ids = torch.randint(0, 97, (1, length), generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        want = reference_model()(input_ids=ids, use_cache=False).logits.numpy()
    logits = check(program, (ids,), want, level)
    assert (logits.argmax(-1) == want.argmax(-1)).all()


@pytest.mark.parametrize("level", LEVELS)
def test_length_above_the_maximum_is_an_error(level: str) -> None:
    program = symbolic_layer("llama")
    module = at_level(program, level)
    cos, sin = position_embeddings(tiny_model("llama"), MAX + 1)
    args = [a.detach().numpy() for a in program.params.values()]
    args += [np.ones((1, MAX + 1, 64), np.float32), cos.numpy(), sin.numpy()]
    with pytest.raises(InterpretError, match=r"input 'hidden_states' dim 1 is 129, outside "
                       r"\[1, 128\], the bounds of symbol 'seq'"):
        run(module, args)


LOOP_PAST_ITS_MAXIMUM = """
func.func @forward(%x: memref<?xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]},
                   %n: index {llmopt.symbol = "n", llmopt.max = 8}) -> memref<1xf32> {
  %two = arith.constant 2 : index
  %m = arith.muli %n, %two : index
  %out = memref.alloc() : memref<1xf32>
  loop.kernel @k (%a = %x : memref<?xf32>, %o = %out : memref<1xf32>, %b = %m : index) {
    %s = loop.reduce add %k = 0 to %b max 8 : f32 {
      %v = loop.load %a[%k floordiv 2] : memref<?xf32>
      loop.yield %v : f32
    }
    loop.store %s, %o[0] : memref<1xf32>
  }
  func.return %out : memref<1xf32>
}
"""


def test_loop_bound_above_its_maximum_is_an_error() -> None:
    module = llmopt.parse(LOOP_PAST_ITS_MAXIMUM)
    rng = np.random.default_rng(3)
    (got,) = run(module, [rng.standard_normal(4).astype(np.float32)])  # 8 iterations: fine
    assert np.isfinite(got).all()
    with pytest.raises(InterpretError, match=r"the loop bound is 10, outside \[0, 8\]"):
        run(module, [rng.standard_normal(5).astype(np.float32)])
