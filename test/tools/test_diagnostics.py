"""Quality of ``llm-opt``'s diagnostics: every error points at the op.

* a verifier error of llmopt's dialects names the op and its ``file:line:col``, shows the
  source line with a caret, and says what was expected;
* input rejected while parsing (an out-of-range integer, an op or type whose constructor
  rejects it, a name used before it is defined) is located the same way;
* an operand used where its definition is not visible (xDSL does not check dominance) is an
  error at the using op;
* a pass that cannot handle an op names the op, its position in the input and the pass;
* an unknown pass lists close matches;
* an NVRTC error names the kernel, and the kernel's location (carried down by the lowerings,
  read by :func:`llmopt.codegen.cuda_printer.kernel_locations`, printed as a comment on
  request) maps it back to the IR op it came from.

All of them exit with status 1, without a traceback or an "internal error".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmopt.tools.fuzz import run_llm_opt


def run(tmp_path: Path, text: str, *args: str) -> tuple[int | None, str, str]:
    """Write ``text`` to ``input.mlir`` and run ``llm-opt`` on it in process."""
    path = tmp_path / "input.mlir"
    path.write_text(text)
    status, stdout, stderr, escaped = run_llm_opt([str(path), *args], timeout=120)
    assert escaped is None, escaped
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return status, stdout, stderr


def assert_located(stderr: str, line: int, op: str, message: str, source: str) -> None:
    """``input.mlir:LINE:COL: error: 'op' op MESSAGE``, then the source line and a caret."""
    lines = stderr.rstrip("\n").split("\n")
    head = re.escape(f"'{op}' op") + r":? "
    assert re.match(rf".*input\.mlir:{line}:(\d+): error: {head}", lines[0]), stderr
    assert message in lines[0], stderr
    column = int(re.match(r".*input\.mlir:\d+:(\d+):", lines[0]).group(1))  # type: ignore[union-attr]
    assert lines[1].strip() == source.strip(), stderr
    assert lines[2] == " " * (column - 1) + "^", stderr


KERNEL = """\
func.func @f(%x: memref<4x8xf32>) {{
  {op}
  func.return
}}
"""

VERIFIER_ERRORS = {
    "too_many_threads": (
        """\
func.func @f(%x: memref<8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [2048, 1, 1] (%a = %x : memref<8xf32>) {
  }
  func.return
}
""",
        2, "tile.kernel", "2048 threads per block exceed 1024",
    ),
    "unknown_mapping": (
        """\
func.func @f(%x: memref<8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<8xf32>) {
    tile.forall (%i) in [8] over warps {
    }
  }
  func.return
}
""",
        3, "tile.forall",
        "unknown mapping 'warps', expected ('blocks', 'threads', 'block_threads')",
    ),
    "zero_extent": (
        """\
func.func @f(%x: memref<8xf32>) {
  loop.kernel @k (%a = %x : memref<8xf32>) {
    loop.for %i = 0 to 0 {
    }
  }
  func.return
}
""",
        3, "loop.for", "extent must be positive, got 0",
    ),
    "reduce_kind": (
        """\
func.func @f(%x: memref<8xf32>) {
  loop.kernel @k (%a = %x : memref<8xf32>) {
    %s = loop.reduce avg %k = 0 to 8 : f32 {
      %v = loop.load %a[%k] : memref<8xf32>
      loop.yield %v : f32
    }
  }
  func.return
}
""",
        3, "loop.reduce", "unknown reduction kind 'avg', expected one of ('add', 'mul', 'max', "
                          "'min')",
    ),
    "reduce_of_a_buffer": (
        """\
func.func @f(%x: memref<8xf32>) {
  loop.kernel @k (%a = %x : memref<8xf32>) {
    %s = loop.reduce add %k = 0 to 8 : memref<8xf32> {
      loop.yield %a : memref<8xf32>
    }
  }
  func.return
}
""",
        3, "loop.reduce", "a reduction yields a float, signless integer or index scalar, got "
                          "memref<8xf32>",
    ),
    "load_rank": (
        """\
func.func @f(%x: memref<4x8xf32>) {
  loop.kernel @k (%a = %x : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      %v = loop.load %a[%i] : memref<4x8xf32>
    }
  }
  func.return
}
""",
        4, "loop.load", "1 indices for a rank-2 buffer",
    ),
    "shuffle_offset": (
        """\
kernel.func @k(%a: memref<32xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %a[%t] : memref<32xf32>
  %w = kernel.shuffle_xor %v, 3 : f32
  kernel.return
}
""",
        4, "kernel.shuffle_xor", "shuffle offset must be 1, 2, 4, 8 or 16, got 3",
    ),
    "coop_reduce_in_threads": (
        """\
func.func @f(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    tile.forall (%i) in [4] over threads {
      %s = tile.coop_reduce add %r = 0 to 8 : f32 {
        %v = loop.load %a[%i, %r] : memref<4x8xf32>
        tile.yield %v : f32
      }
    }
  }
  func.return
}
""",
        4, "tile.coop_reduce", "cannot sit inside a forall over threads",
    ),
}


@pytest.mark.parametrize("name", sorted(VERIFIER_ERRORS))
def test_verifier_error_names_the_op(tmp_path: Path, name: str) -> None:
    """Each verifier error: exit 1, ``file:line:col: error: 'op' op <what was expected>``."""
    text, line, op, message = VERIFIER_ERRORS[name]
    status, _, stderr = run(tmp_path, text, "-p", "lower-to-cuda")
    assert status == 1
    assert_located(stderr, line, op, message, text.split("\n")[line - 1])


PARSE_ERRORS = {
    "integer_out_of_range": (
        KERNEL.format(op="tile.kernel @k grid [99999999999999999999, 1, 1] block [32, 1, 1] "
                         "(%a = %x : memref<4x8xf32>) {\n  }"),
        2, "integer 99999999999999999999 does not fit in 64 bits",
    ),
    "constant_out_of_range": (
        "func.func @f() -> i8 {\n  %c = arith.constant 300 : i8\n  func.return %c : i8\n}\n",
        2, "'arith.constant' op is invalid: Integer value 300 is out of range for type i8",
    ),
    "float_op_on_integers": (
        "func.func @f(%a: i8) -> i8 {\n  %c = arith.mulf %a, %a : i8\n  func.return %c : i8\n}\n",
        2, "'arith.mulf' op is invalid: ",
    ),
    "pointer_to_pointer": (
        "cuda.kernel @k(x : !cuda.ptr<!cuda.ptr<f32>>) {\n}\n",
        1, "'cuda.kernel' op is invalid: !cuda.ptr points to a scalar or vector type",
    ),
    "operand_named_in_the_body": (
        KERNEL.format(op="loop.kernel @k (%a = %b : memref<4x8xf32>, %b = %x : memref<4x8xf32>) "
                         "{\n  }"),
        2, "use of undefined value %b (a name defined inside the body is not visible to the "
           "operands)",
    ),
}


@pytest.mark.parametrize("name", sorted(PARSE_ERRORS))
def test_parse_error_is_located(tmp_path: Path, name: str) -> None:
    """Input rejected while parsing: ``file:line:col: error: ...`` and the marked line."""
    text, line, message = PARSE_ERRORS[name]
    status, _, stderr = run(tmp_path, text)
    assert status == 1
    first, source, caret = stderr.split("\n")[:3]
    assert re.match(rf".*input\.mlir:{line}:\d+: error: ", first), stderr
    assert message in first, stderr
    assert source == text.split("\n")[line - 1] and caret.strip(" ^") == "", stderr


def test_redeclaration_shows_both_places(tmp_path: Path) -> None:
    """An error that refers to a second place (a block declared twice) shows it as a note."""
    text = ("func.func @f() {\n  \"test.op\"() ({\n  ^bb0:\n    \"test.op\"() : () -> ()\n"
            "  ^bb0:\n    \"test.op\"() : () -> ()\n  }) : () -> ()\n  func.return\n}\n")
    status, _, stderr = run(tmp_path, text, "--allow-unregistered-dialect")
    assert status == 1
    assert re.search(r"input\.mlir:5:3: error: re-declaration of block 'bb0'", stderr), stderr
    assert re.search(r"input\.mlir:3:3: note: originally declared here", stderr), stderr


def test_use_before_definition(tmp_path: Path) -> None:
    """An operand defined later in the block: an error at the use, naming the definition."""
    text = ("func.func @f(%a: f32) -> f32 {\n  %c = arith.addf %b, %a : f32\n"
            "  %b = arith.mulf %a, %a : f32\n  func.return %c : f32\n}\n")
    status, _, stderr = run(tmp_path, text)
    assert status == 1
    assert_located(stderr, 2, "arith.addf", "operand #0 (%b) is used before its definition at ",
                   "  %c = arith.addf %b, %a : f32")
    assert "input.mlir:3:3" in stderr


ANOTHER_REGION = """\
kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %v = kernel.load %a[%i] : memref<8xf32>
  }
  kernel.store %v, %a[%c0] : memref<8xf32>
  kernel.return
}
"""


def test_value_of_another_region(tmp_path: Path) -> None:
    """A value defined inside a loop body and used after the loop: an error at its use."""
    status, _, stderr = run(tmp_path, ANOTHER_REGION, "-p", "lower-to-cuda")
    assert status == 1
    first, source, caret = stderr.split("\n")[:3]
    assert re.match(r".*input\.mlir:8:16: error: use of undefined value %v$", first), stderr
    assert source == "  kernel.store %v, %a[%c0] : memref<8xf32>"
    assert caret == " " * 15 + "^^"


def test_dominance_checked_after_passes() -> None:
    """IR that a pass leaves with a use outside its definition's region is caught too."""
    from xdsl.context import Context
    from xdsl.dialects import arith, builtin, scf
    from xdsl.parser import Parser

    from llmopt.dialects import kernel
    from llmopt.tools.llm_opt import DominanceError, verify_dominance

    ctx = Context()
    for dialect in (builtin.Builtin, arith.Arith, scf.Scf, kernel.Kernel):
        ctx.load_dialect(dialect)
    text = ANOTHER_REGION.replace("kernel.store %v,", "kernel.store %f,").replace(
        "  %c0 =", "  %f = arith.constant 1.0 : f32\n  %c0 =")
    module = Parser(ctx, text).parse_module()
    verify_dominance(module)
    load = next(op for op in module.walk() if isinstance(op, kernel.LoadOp))
    store = next(op for op in module.walk() if isinstance(op, kernel.StoreOp))
    store.operands[0] = load.result
    with pytest.raises(DominanceError, match=r"operand #0 \(%v\) is defined in a region that "
                       "does not enclose this use") as info:
        verify_dominance(module)
    assert info.value.op is store


def test_pass_failure_names_op_position_and_pass(tmp_path: Path) -> None:
    """A lowering that cannot handle an op: the op (here the reduction a warp shuffle of an
    ``i8`` comes from), its source line, and the pass."""
    text = """\
func.func @f(%x: memref<8xi8>, %y: memref<8xi8>) {
  loop.kernel @k (%a = %x : memref<8xi8>, %b = %y : memref<8xi8>) {
    %s = loop.reduce add %k = 0 to 8 : i8 {
      %v = loop.load %a[%k] : memref<8xi8>
      loop.yield %v : i8
    }
    loop.store %s, %b[0] : memref<8xi8>
  }
  func.return
}
"""
    status, _, stderr = run(tmp_path, text, "-p", "lower-to-cuda", "-t", "cuda")
    assert status == 1
    assert_located(stderr, 3, "kernel.shuffle_xor", "cannot shuffle i8 (in pass 'kernel-to-cuda')",
                   "    %s = loop.reduce add %k = 0 to 8 : i8 {")


def test_half_precision_math_lowers_to_cuda(tmp_path: Path) -> None:
    """A 16-bit op that once stopped ``kernel-to-cuda`` (no CUDA math function for ``f16``)
    lowers: computed in ``float`` between ``__half`` conversions."""
    text = """\
func.func @forward(%x: tensor<64xf16>) -> tensor<64xf16> {
  %0 = torch.rsqrt %x : tensor<64xf16> -> tensor<64xf16>
  func.return %0 : tensor<64xf16>
}
"""
    status, out, stderr = run(tmp_path, text, "-p", "lower-to-cuda", "-t", "cuda")
    assert status == 0, stderr
    assert "__float2half(rsqrtf(__half2float(" in out, out


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("loop-to-tiles", "'loop-to-tile'"), ("kernel2cuda", "'kernel-to-cuda'"),
     ("lower-to-cud", "'lower-to-cuda'"), ("tile-to-kernal", "'tile-to-kernel'")],
)
def test_unknown_pass_lists_close_matches(tmp_path: Path, typo: str, suggestion: str) -> None:
    """``-p`` with a misspelt pass: one line, the close matches, exit 1."""
    status, _, stderr = run(tmp_path, "func.func @f() {\n  func.return\n}\n", "-p", typo)
    assert status == 1
    assert stderr.startswith(f"llm-opt: error: unknown pass '{typo}'; did you mean "), stderr
    assert suggestion in stderr and len(stderr.strip().split("\n")) == 1


# --- NVRTC errors back to the IR -----------------------------------------------------------------

BROKEN_CUDA = """\
cuda.kernel @fine(y : !cuda.ptr<f32>) {
  %0 = cuda.var y : !cuda.ptr<f32>
  %1 = cuda.literal 0 : index
  %2 = cuda.index %0[%1] : !cuda.ptr<f32>, index
  %3 = cuda.literal 1.0 : f32
  cuda.assign %2 = %3 : f32
}
cuda.kernel @broken(y : !cuda.ptr<f32>) {
  %0 = cuda.var y : !cuda.ptr<f32>
  %1 = cuda.literal 0 : index
  %2 = cuda.index %0[%1] : !cuda.ptr<f32>, index
  %3 = cuda.literal 1.0 : f32
  %4 = cuda.call not_a_cuda_function(%3) : (f32) -> f32
  cuda.assign %2 = %4 : f32
}
"""


def lowered(tmp_path: Path, text: str) -> object:
    """``text`` parsed by ``llm-opt``'s parser (ops located in ``input.mlir``) and lowered
    with ``lower-to-cuda``."""
    from llmopt.tools.llm_opt import LLMOptMain, LocatingParser

    path = tmp_path / "input.mlir"
    path.write_text(text)
    tool = LLMOptMain(args=[str(path), "-p", "lower-to-cuda"])
    module = LocatingParser(tool.ctx, text, str(path)).parse_module()
    tool.setup_pipeline()
    tool.pipeline.apply(tool.ctx, module)
    return module


LOOP_KERNEL = """func.func @f(%x: memref<64xf32>) {
  loop.kernel @twice (%a = %x : memref<64xf32>) {
    loop.for %i = 0 to 64 {
      %v = loop.load %a[%i] : memref<64xf32>
      %w = arith.addf %v, %v : f32
      loop.store %w, %a[%i] : memref<64xf32>
    }
  }
  func.return
}
"""


def test_kernels_keep_the_location_of_their_source_op(tmp_path: Path) -> None:
    """Lowering carries the ``loop.kernel``'s location down to its ``cuda.kernel``;
    :func:`kernel_locations` reads it, and ``locations=True`` prints it as a comment."""
    from llmopt.codegen.cuda_printer import cuda_source, kernel_locations

    module = lowered(tmp_path, LOOP_KERNEL)
    path = tmp_path / "input.mlir"
    assert kernel_locations(module) == {"twice": f"{path}:2:3"}  # type: ignore[arg-type]
    plain = cuda_source(module)  # type: ignore[arg-type]
    commented = cuda_source(module, locations=True)  # type: ignore[arg-type]
    assert plain.startswith('extern "C" __global__')  # the default text has no comment
    assert commented == f"// {path}:2:3\n" + plain


def test_nvrtc_error_maps_to_kernel_and_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """NVRTC names the kernel whose line fails; the kernel's location names the op."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from llmopt.codegen import nvrtc
    from llmopt.codegen.cuda_printer import cuda_source, kernel_locations

    monkeypatch.setenv("LLMOPT_NO_CACHE", "1")
    module = lowered(tmp_path, BROKEN_CUDA)
    with pytest.raises(nvrtc.NvrtcError) as info:
        nvrtc.compile_cuda(cuda_source(module), arch="sm_90")  # type: ignore[arg-type]
    err = info.value
    assert err.kernel_names == ["broken"]
    assert "in kernel 'broken'" in str(err) and "not_a_cuda_function" in str(err)
    where = kernel_locations(module)[err.kernel_names[0]]  # type: ignore[arg-type]
    assert where == f"{tmp_path / 'input.mlir'}:8:1"
