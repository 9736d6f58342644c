"""A function's signature in ``prim-to-loop``: tensors become buffers, the updated
arguments (a KV cache) are stored into in place, and every argument's extents are
named for diagnostics."""

from __future__ import annotations

from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    MemRefType,
    TensorType,
    UnitAttr,
    UnrealizedConversionCastOp,
)
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import loop
from llmopt.dialects._symbols import Symbol, argument_dynamic, argument_name, function_symbols
from llmopt.dialects._updates import WRITTEN_ATTR, updated_results
from llmopt.lowering._extents import dynamic_values
from llmopt.lowering._prim_kernels import (
    LoopExtent,
    Runtime,
    _identity,
    free_nest,
    in_kernel,
    to_memref,
)


def convert_signature(fn: func.FuncOp) -> None:
    """Tensor arguments and results of ``fn`` become buffers of the same shape."""
    block = fn.body.block
    for arg in list(block.args):
        if isinstance(arg.type, TensorType):
            new = block.insert_arg(to_memref(arg.type), arg.index)
            new.name_hint = arg.name_hint
            cast = UnrealizedConversionCastOp.get([new], [arg.type])
            block.insert_op_before(cast, block.first_op)  # type: ignore[arg-type]
            arg.replace_all_uses_with(cast.results[0])
            block.erase_arg(arg)
    for ret in list(fn.walk()):
        if isinstance(ret, func.ReturnOp):
            new_operands = []
            for value in ret.arguments:
                if isinstance(value.type, TensorType):
                    cast = UnrealizedConversionCastOp.get([value], [to_memref(value.type)])
                    Rewriter.insert_op(cast, InsertPoint.before(ret))
                    value = cast.results[0]
                new_operands.append(value)
            ret.operands = new_operands
    fn.function_type = func.FunctionType.from_lists(
        [a.type for a in block.args], [to_memref(t) for t in fn.function_type.outputs.data]
    )


def store_updates(fn: func.FuncOp) -> None:
    """Results marked ``llmopt.updates`` (see :mod:`llmopt.dialects._updates`) become writes
    into their argument's buffer: nothing to do when the value already lives there (an
    in-place ``prim.insert``); the argument's buffer itself when the value is a fresh
    allocation of its shape and nothing else reads the argument (a cache written whole);
    else a copy kernel before the return. The result is dropped and the argument marked
    ``llmopt.written``."""
    ties = updated_results(fn)
    if not ties:
        return
    block = fn.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    symbols = function_symbols(fn)
    for r, k in ties:
        arg, value = block.args[k], ret.operands[r]
        if value is arg:
            continue
        extents = _argument_extents(fn, k, symbols)
        alloc = value.owner
        if (isinstance(alloc, memref.AllocOp) and alloc.parent_block() is block
                and not arg.uses and alloc.memref.type == arg.type
                and list(alloc.dynamic_sizes) == dynamic_values(
                    [e.value if isinstance(e, Runtime) else e for e in extents])):
            alloc.memref.replace_all_uses_with(arg)
            block.erase_op(alloc)
            continue
        kernel = loop.KernelOp(f"store_{argument_label(fn, k)}", [value, arg])
        block.insert_op_before(kernel, ret)
        src, out = kernel.body.block.args
        inner, ivs = free_nest(kernel.body.block, in_kernel(kernel, extents))
        load = loop.LoadOp(src, _identity(len(extents)), ivs)
        inner.add_ops([load, loop.StoreOp(load.result, out, _identity(len(extents)), ivs)])
    drop = {r for r, _ in ties}
    ret.operands = [v for j, v in enumerate(ret.operands) if j not in drop]
    outputs = [t for j, t in enumerate(fn.function_type.outputs.data) if j not in drop]
    fn.function_type = func.FunctionType.from_lists(list(fn.function_type.inputs.data), outputs)
    if fn.res_attrs is not None:
        kept = [a for j, a in enumerate(fn.res_attrs.data) if j not in drop]
        fn.res_attrs = ArrayAttr(kept) if any(a.data for a in kept) else None
    assert fn.arg_attrs is not None
    attrs = list(fn.arg_attrs.data)
    for _, k in ties:
        attrs[k] = DictionaryAttr({**attrs[k].data, WRITTEN_ATTR: UnitAttr()})
    fn.arg_attrs = ArrayAttr(attrs)


def _argument_extents(fn: func.FuncOp, k: int, symbols: dict[str, Symbol]
                      ) -> list[LoopExtent]:
    """The loop extents of argument ``k``'s buffer: its static extents, and for each ``?``
    the symbol argument ``llmopt.dynamic`` binds it to."""
    typ = fn.body.block.args[k].type
    assert isinstance(typ, MemRefType)
    names = iter(argument_dynamic(fn, k) or ())
    out: list[LoopExtent] = []
    for e in typ.get_shape():
        if e >= 0:
            out.append(int(e))
        else:
            symbol = symbols[next(names)]
            out.append(Runtime(fn.body.block.args[symbol.arg], symbol.max))
    return out


def argument_label(fn: func.FuncOp, k: int) -> str:
    """A kernel-name-safe label for argument ``k`` (its input name, else ``arg<k>``)."""
    name = argument_name(fn, k).strip("'%#")
    label = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return label if label and not label[0].isdigit() else f"arg{k}"
