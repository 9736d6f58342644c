"""``dedup-kernels``: structurally identical ``kernel.func`` ops become one kernel.

**Matches** every module-level ``kernel.func``. Two kernels are identical when their
bodies are the same ops in the same order, with the same operand wiring (values are
numbered in definition order, so the SSA names and name hints do not matter), the same
result and block-argument types, properties and attributes, and the same launch block and
function type. The kernel's symbol name, its value names and its ops' source locations
are ignored.

**Produces** one kernel per class of identical kernels (the first in module order keeps its
name) and retargets every ``kernel.launch`` of a removed duplicate to it. Launches keep
their own grid and arguments.

**Why** a model of N identical decoder layers lowers to N copies of each layer's kernels;
after this pass the CUDA source holds one layer's kernel set, so NVRTC compiles (and the
kernel cache stores) each distinct kernel once. Each kernel's key is computed in one walk
over its body (a nested tuple, hashed once), so the pass is linear in the size of the
module and takes milliseconds for hundreds of kernels.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, SymbolRefAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from llmopt.dialects import kernel

__all__ = ["DedupKernels", "body_key", "structural_key"]


def _attr_key(attr: Attribute) -> Hashable:
    """An attribute as a hashable key (xDSL attributes are hashable; fall back to text)."""
    try:
        hash(attr)
    except TypeError:
        return str(attr)
    return attr


def _dict_key(attrs: dict[str, Attribute], skip: frozenset[str] = frozenset()) -> Hashable:
    return tuple(sorted((k, _attr_key(v)) for k, v in attrs.items() if k not in skip))


class _Keyer:
    """Builds the structural key of one isolated op, numbering values as it goes."""

    def __init__(self) -> None:
        self.values: dict[SSAValue, int] = {}
        self.blocks: dict[Block, int] = {}

    def value(self, value: SSAValue) -> int:
        number = self.values.get(value)
        if number is None:  # defined outside the op: cannot happen in an isolated kernel
            raise ValueError(f"value {value} is used before its definition")
        return number

    def define(self, value: SSAValue) -> None:
        self.values[value] = len(self.values)

    def region(self, region: Region) -> Hashable:
        for block in region.blocks:
            self.blocks[block] = len(self.blocks)
        return tuple(self.block(block) for block in region.blocks)

    def block(self, block: Block) -> Hashable:
        for arg in block.args:
            self.define(arg)
        arg_types = tuple(_attr_key(a.type) for a in block.args)
        return (arg_types, tuple(self.op(op) for op in block.ops))

    def op(self, op: Operation, skip: frozenset[str] = frozenset()) -> Hashable:
        operands = tuple(self.value(v) for v in op.operands)
        for result in op.results:
            self.define(result)
        return (
            op.name,
            operands,
            tuple(_attr_key(r.type) for r in op.results),
            _dict_key(op.properties, skip),
            _dict_key(op.attributes, skip),
            tuple(self.blocks.get(s, -1) for s in op.successors),
            tuple(self.region(r) for r in op.regions),
        )


def body_key(op: Operation, skip: frozenset[str] = frozenset()) -> Hashable:
    """A key of ``op`` without its operands: its regions, properties and attributes
    (those in ``skip`` left out), equal for two ops identical up to value names and
    locations. For an isolated op bound to outside values (a ``loop.kernel``)."""
    keyer = _Keyer()
    return (op.name, tuple(_attr_key(r.type) for r in op.results),
            _dict_key(op.properties, skip), _dict_key(op.attributes, skip),
            tuple(keyer.region(r) for r in op.regions))


def structural_key(fn: kernel.FuncOp) -> Hashable:
    """A key equal for two kernels exactly when they are identical up to their symbol name,
    value names and locations."""
    return _Keyer().op(fn, skip=frozenset({"sym_name"}))


@dataclass(frozen=True)
class DedupKernels(ModulePass):
    """Merge structurally identical ``kernel.func`` ops (see the module docstring)."""

    name = "dedup-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        """Rewrite ``op`` in place."""
        canonical: dict[Hashable, str] = {}
        rename: dict[str, str] = {}
        duplicates: list[kernel.FuncOp] = []
        for fn in op.ops:
            if not isinstance(fn, kernel.FuncOp):
                continue
            key = structural_key(fn)
            name = fn.sym_name.data
            kept = canonical.setdefault(key, name)
            if kept != name:
                rename[name] = kept
                duplicates.append(fn)
        if not rename:
            return
        for top in op.ops:
            if isinstance(top, kernel.FuncOp):
                continue  # kernels launch no kernels
            for launch in top.walk():
                if isinstance(launch, kernel.LaunchOp):
                    target = rename.get(launch.kernel.root_reference.data)
                    if target is not None:
                        launch.properties["kernel"] = SymbolRefAttr(target)
        for fn in duplicates:
            fn.detach()
            fn.erase()
