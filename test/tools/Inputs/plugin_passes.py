"""A plugin for ``llm-opt --load-plugin``: passes and a named pipeline for the tool's tests."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.passes import ModulePass

from llmopt.registry import register_pass, register_pipeline


@register_pass
@dataclass(frozen=True)
class PrefixFunctions(ModulePass):
    """Prepend ``prefix`` to the name of every ``func.func``."""

    name = "test-prefix-functions"

    prefix: str = "plugin_"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        """Rename the functions of ``op``."""
        for function in op.walk():
            if isinstance(function, func.FuncOp):
                function.sym_name = builtin.StringAttr(self.prefix + function.sym_name.data)


@register_pass
@dataclass(frozen=True)
class Crash(ModulePass):
    """Fail with an exception: a stand-in for a buggy pass."""

    name = "test-crash"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        """Raise."""
        raise RuntimeError("the test-crash pass crashed on purpose")


@register_pass
@dataclass(frozen=True)
class BreakTypes(ModulePass):
    """Make every function claim to return ``i64``: a pass that produces invalid IR."""

    name = "test-break-types"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        """Rewrite the function types."""
        for function in op.walk():
            if isinstance(function, func.FuncOp):
                inputs = function.function_type.inputs.data
                function.function_type = builtin.FunctionType.from_lists(inputs, [builtin.i64])


register_pipeline(
    "test-cleanup",
    "canonicalize,test-prefix-functions{{prefix={prefix}}},cse",
    {"prefix": "clean_"},
)
