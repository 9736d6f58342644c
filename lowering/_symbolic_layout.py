"""Strides of buffers with ``?`` extents in CUDA (used by ``kernel-to-cuda``).

A symbolic program has one length. Its buffers are dense and row-major at the length the
program runs with (Kernel IR's layout of a ``memref<1x4x?x16xf32>``), so a stride that spans
a ``?`` dim is a runtime value. The layout chosen here binds every ``?`` extent of a
kernel's buffers to the kernel's length parameter (its one ``index`` parameter): the stride
of dim ``d`` is ``c * n**p``, ``c`` the product of the static extents after ``d`` and ``p``
the number of ``?`` extents after it. :func:`length_parameters` proves the binding at every
launch — each ``?`` extent of a buffer passed to the kernel must be the very value the
launch passes as the length (the operand of its ``memref.alloc``, or the symbol argument a
function argument's ``llmopt.dynamic`` names) — and raises otherwise, so a kernel is never
printed with strides that may be wrong.

Why not lay buffers out at the maximum (static strides): the program's inputs and outputs
have the caller's length, so every input would be copied into, and every output out of, a
buffer of the maximum's layout, and every kernel would touch memory spread over the
maximum rather than the length.
"""

from __future__ import annotations

from xdsl.dialects import func, memref
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel
from llmopt.dialects._symbols import (
    argument_dynamic,
    dynamic_dims,
    function_symbols,
    has_dynamic,
    is_dynamic,
)

__all__ = ["length_parameters", "needs_length", "symbolic_strides"]


def symbolic_strides(typ: MemRefType) -> list[tuple[int, int]]:
    """The row-major stride of each dim of ``typ`` as ``(c, p)``: ``c * n**p`` elements,
    ``n`` the length every ``?`` extent is bound to."""
    strides: list[tuple[int, int]] = []
    constant, power = 1, 0
    for extent in reversed(typ.get_shape()):
        strides.append((constant, power))
        if is_dynamic(extent):
            power += 1
        else:
            constant *= int(extent)
    return strides[::-1]


def needs_length(typ: object) -> bool:
    """Whether a stride of ``typ`` that is ever used spans a ``?`` extent: a buffer whose
    ``?`` extents come before every dim but ones of extent 1 (whose index is always 0) has
    static strides where it is indexed (a cache of rows at its length, ``memref<?x4x16xf32>``;
    ``memref<1x?x16xf32>``), and a kernel reading it needs no length parameter for it."""
    return (isinstance(typ, MemRefType) and has_dynamic(typ)
            and any(power and extent != 1 for extent, (_, power)
                    in zip(typ.get_shape(), symbolic_strides(typ), strict=True)))


def _host_extents(value: SSAValue) -> list[SSAValue] | None:
    """The ``index`` values of the ``?`` extents of ``value`` (a host-side buffer), or
    ``None`` when they cannot be found."""
    owner = value.owner
    if isinstance(owner, memref.AllocOp):
        return list(owner.dynamic_sizes)
    if isinstance(owner, memref.CollapseShapeOp) and _keeps_extents(owner):
        return _host_extents(owner.src)
    if isinstance(value, BlockArgument) and isinstance(owner := value.block.parent_op(),
                                                       func.FuncOp):
        names = argument_dynamic(owner, value.index) or ()
        symbols = function_symbols(owner)
        args = owner.body.block.args
        found = [args[symbols[name].arg] for name in names if name in symbols]
        return found if len(found) == len(dynamic_dims(value.type)) else None
    return None


def _keeps_extents(view: memref.CollapseShapeOp) -> bool:
    """Whether each ``?`` extent of ``view`` is one ``?`` extent of its source, merged only
    with extents of 1 (``squeeze-unit-dims``' views): then its ``?`` extents are the
    source's, in order."""
    shape = view.src.type.get_shape()  # type: ignore[attr-defined]
    for group in view.reassociation.data:
        dims = [shape[d.value.data] for d in group.data]  # type: ignore[attr-defined]
        dynamic = [d for d in dims if is_dynamic(d)]
        if dynamic and (len(dynamic) > 1 or any(d != 1 for d in dims if not is_dynamic(d))):
            return False
    return True


def _fail(op: Operation, message: str) -> PassFailedException:
    from llmopt.passes._rewrite import fail

    return fail(op, message)


def length_parameters(module: ModuleOp) -> dict[str, int | SSAValue]:
    """For each kernel with ``?`` buffer parameters, its length: the position of its length
    parameter, or the value it loads from a lengths buffer (``lengths-in-memory``). A kernel
    whose ``?`` buffers have static strides where indexed (:func:`needs_length`) may have
    none or several ``index`` parameters, and is left out.

    Raises when such a kernel has not exactly one length, or when a launch passes a buffer
    whose ``?`` extent is not the length: the value it passes as the length, or the symbol
    the kernel loads.
    """
    from llmopt.passes.kernel.lengths_in_memory import length_loads

    found: dict[str, int | SSAValue] = {}
    loaded: dict[str, str] = {}  # kernel -> the symbol it loads as its length
    for op in module.ops:
        if not isinstance(op, kernel.FuncOp):
            continue
        args = op.body.block.args
        if not any(has_dynamic(a.type) for a in args):
            continue
        lengths: list[int | SSAValue] = [k for k, a in enumerate(args)
                                         if isinstance(a.type, IndexType)]
        loads = length_loads(op)
        lengths += list(loads.values())
        if len(lengths) != 1:
            if not any(needs_length(a.type) for a in args):
                continue  # static strides wherever indexed: no length to bind
            raise _fail(op, f"kernel @{op.sym_name.data} has buffers with ? extents and "
                            f"{len(lengths)} lengths (index parameters or lengths it loads); "
                            "kernel-to-cuda binds every ? extent to one length")
        found[op.sym_name.data] = lengths[0]
        if loads:
            loaded[op.sym_name.data] = next(iter(loads))
    for launch in module.walk():
        if not isinstance(launch, kernel.LaunchOp):
            continue
        name = launch.kernel.root_reference.data
        if name not in found:
            continue
        position = found[name]
        if isinstance(position, int):
            length, what = launch.args[position], f"the length it passes (operand #{position})"
        else:
            length, what = _symbol_value(launch, loaded[name]), f"the symbol '{loaded[name]}'"
        for k, arg in enumerate(launch.args):
            if not needs_length(arg.type):
                continue
            extents = _host_extents(arg)
            if extents is None or length is None or any(e != length for e in extents):
                raise _fail(launch, f"operand #{k} of the launch of @{name} has a ? extent "
                                    f"that is not {what}; its strides would be wrong")
    return found


def _symbol_value(launch: kernel.LaunchOp, name: str) -> SSAValue | None:
    """The host function's argument of the symbol ``name`` (``None``: there is none)."""
    fn = launch.parent_op()
    while fn is not None and not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()
    if fn is None or name not in (symbols := function_symbols(fn)):
        return None
    return fn.body.block.args[symbols[name].arg]
