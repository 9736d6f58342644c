"""C names for ``kernel-to-cuda``: the functions the generated code calls, the names of its
variables, and kernels renamed to C identifiers (:func:`rename_kernels`).

A name comes from the SSA name hint where there is one, so that the CUDA source reads like
the IR; it must then be a C identifier and clash with nothing the source uses: a keyword, a
function it calls (:data:`MATH_FUNCTIONS` and the intrinsics), a built-in variable or a type
name of the CUDA headers it may include.
"""

from __future__ import annotations

import re

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr
from xdsl.ir import Operation

from llmopt.dialects import cuda, kernel

__all__ = ["MATH_FUNCTIONS", "Names", "c_identifier", "rename_kernels"]

# math op -> (float function, double function)
MATH_FUNCTIONS: dict[type[Operation], tuple[str, str]] = {
    math.AbsFOp: ("fabsf", "fabs"), math.AcosOp: ("acosf", "acos"),
    math.AcoshOp: ("acoshf", "acosh"), math.AsinOp: ("asinf", "asin"),
    math.AsinhOp: ("asinhf", "asinh"), math.AtanOp: ("atanf", "atan"),
    math.AtanhOp: ("atanhf", "atanh"), math.Atan2Op: ("atan2f", "atan2"),
    math.CbrtOp: ("cbrtf", "cbrt"), math.CeilOp: ("ceilf", "ceil"),
    math.CopySignOp: ("copysignf", "copysign"), math.CosOp: ("cosf", "cos"),
    math.CoshOp: ("coshf", "cosh"), math.ErfOp: ("erff", "erf"),
    math.ExpOp: ("expf", "exp"), math.Exp2Op: ("exp2f", "exp2"),
    math.ExpM1Op: ("expm1f", "expm1"), math.FloorOp: ("floorf", "floor"),
    math.FmaOp: ("fmaf", "fma"), math.LogOp: ("logf", "log"),
    math.Log10Op: ("log10f", "log10"), math.Log1pOp: ("log1pf", "log1p"),
    math.Log2Op: ("log2f", "log2"), math.PowFOp: ("powf", "pow"),
    math.RoundOp: ("roundf", "round"), math.RoundEvenOp: ("rintf", "rint"),
    math.RsqrtOp: ("rsqrtf", "rsqrt"), math.SinOp: ("sinf", "sin"),
    math.SinhOp: ("sinhf", "sinh"), math.SqrtOp: ("sqrtf", "sqrt"),
    math.TanOp: ("tanf", "tan"), math.TanhOp: ("tanhf", "tanh"),
    math.TruncOp: ("truncf", "trunc"),
    arith.MaxnumfOp: ("fmaxf", "fmax"), arith.MinnumfOp: ("fminf", "fmin"),
}  # fmt: skip

# Names of functions the generated code may call: never used for variables.
_CALLED = frozenset(
    {name for pair in MATH_FUNCTIONS.values() for name in pair}
    | {"max", "min", "abs", "llabs", "__popc", "__popcll", "__clz", "__clzll",
       "__shfl_xor_sync", "__syncthreads", "__int_as_float", "__float_as_int",
       "__longlong_as_double", "__double_as_longlong", "__float2half", "__float2bfloat16",
       "__half2float", "__bfloat162float", "__double2half", "__double2bfloat16",
       "__pipeline_memcpy_async", "__pipeline_commit", "__pipeline_wait_prior"}
)
# Built-in variables, and type names of the CUDA headers the generated code may include.
_RESERVED = cuda.KEYWORDS | _CALLED | {
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "main", "half", "half2",
    "nv_bfloat16", "nv_bfloat162", cuda.TENSOR_MAP_STRUCT,
}


class Names:
    """Unique, readable C names for one kernel."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.counters: dict[str, int] = {}

    def fresh(self, hint: str | None, default: str) -> str:
        """A new name from the SSA name hint, else ``default`` (``v`` becomes ``v0, v1 …``)."""
        base = c_identifier(hint, "v_") if hint else default
        numbered = not hint and default == "v"
        if not numbered and base not in self.used:
            self.used.add(base)
            return base
        n = self.counters.get(base, 0 if numbered else 1)
        while f"{base}{n}" in self.used:
            n += 1
        self.counters[base] = n + 1
        self.used.add(f"{base}{n}")
        return f"{base}{n}"


def c_identifier(name: str, prefix: str) -> str:
    """``name`` made a C identifier that is neither a keyword nor a name the generated code or
    the CUDA headers use: other characters become ``_``, and ``prefix`` stands before a name
    that would still clash or start with a digit or ``_`` (with ``k_``: ``double`` →
    ``k_double``, ``my-kernel`` → ``my_kernel``)."""
    c_name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not c_name or c_name[0].isdigit() or c_name.startswith("_") or c_name in _RESERVED:
        c_name = prefix + c_name.lstrip("_")
    return c_name


def rename_kernels(module: ModuleOp) -> None:
    """Give every ``kernel.func`` whose symbol is not a usable C name a C name (unique among
    the module's symbols), and point its ``kernel.launch`` ops at it."""
    taken = {sym.data for inner in module.walk()
             if isinstance(sym := inner.properties.get("sym_name"), StringAttr)}
    renamed: dict[str, str] = {}
    for func in module.ops:
        if not isinstance(func, kernel.FuncOp):
            continue
        name = func.sym_name.data
        c_name = c_identifier(name, "k_")
        if c_name == name:
            continue
        base, k = c_name, 0
        while c_name in taken:
            k += 1
            c_name = f"{base}_{k}"
        taken.add(c_name)
        renamed[name] = c_name
        func.sym_name = StringAttr(c_name)
    if not renamed:
        return
    for launch in module.walk():
        if isinstance(launch, kernel.LaunchOp):
            new = renamed.get(launch.kernel.root_reference.data)
            if new is not None:
                launch.kernel = SymbolRefAttr(new)
