"""In-place updates of function arguments: how a program writes into a buffer it is given.

A KV cache is the reason: a decode step reads the cache of every earlier token and appends
one row, and copying the cache to return a new one would cost more than the step. The IR
says it at two points of the lowering:

* **Tensor levels** (Torch IR, Tensor IR) are values, so a function *returns* an argument's
  new value and marks the result with ``llmopt.updates``, naming the input it replaces::

      func.func @step(%cache: tensor<?x4x16xf32> {llmopt.input = "cache", ...}, ...)
          -> (tensor<1x1x97xf32>, tensor<?x4x16xf32> {llmopt.updates = "cache"})

  (``torch.export`` functionalises ``cache[-1] = k`` the same way: a ``slice_scatter``
  whose result is the input's new value.) Updated results follow the other results, in
  the order of their arguments, one per input at most, each of its argument's type.
* **Buffer levels** (Loop IR and below): ``prim-to-loop`` stores the new value into the
  argument's own buffer and drops the result; the argument is marked ``llmopt.written``::

      func.func @step(%cache: memref<?x4x16xf32> {llmopt.input = "cache", llmopt.written,
                      ...}, ...) -> memref<1x1x97xf32>

The interpreters return the final contents of every ``llmopt.written`` argument after the
function's results, in argument order, so a program compares equal before and after
``prim-to-loop`` (and the executor leaves a caller's tensor updated in place).
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    MemRefType,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, Operation

from llmopt.dialects._symbols import INPUT_ATTR, SymbolError, _arg_attrs, argument_name

UPDATES_ATTR = "llmopt.updates"
"""Result attribute (tensor levels): the ``llmopt.input`` name of the argument whose new value
the result is."""
WRITTEN_ATTR = "llmopt.written"
"""Argument attribute (buffer levels): the program writes into this argument's buffer."""


def _result_attrs(func: Operation, count: int) -> list[dict[str, Attribute]]:
    attrs = func.properties.get("res_attrs") or func.attributes.get("res_attrs")
    if not isinstance(attrs, ArrayAttr):
        return [{} for _ in range(count)]
    return [dict(a.data) if isinstance(a, DictionaryAttr) else {} for a in attrs.data]


def _types(func: Operation) -> tuple[list[Attribute], list[Attribute]]:
    ftype = func.properties["function_type"]
    return list(ftype.inputs.data), list(ftype.outputs.data)  # type: ignore[attr-defined]


def updated_results(func: Operation) -> list[tuple[int, int]]:
    """``(result, argument)`` for every result of ``func`` marked ``llmopt.updates``, the
    argument being the one whose ``llmopt.input`` it names (unverified: a name no argument
    has is skipped; :func:`verify_updates` reports it)."""
    _, outputs = _types(func)
    names = {}
    for k, entries in enumerate(_arg_attrs(func)):
        name = entries.get(INPUT_ATTR)
        if isinstance(name, StringAttr):
            names[name.data] = k
    out = []
    for r, entries in enumerate(_result_attrs(func, len(outputs))):
        name = entries.get(UPDATES_ATTR)
        if isinstance(name, StringAttr) and name.data in names:
            out.append((r, names[name.data]))
    return out


def written_arguments(func: Operation) -> list[int]:
    """The arguments of ``func`` marked ``llmopt.written``, in order."""
    return [k for k, entries in enumerate(_arg_attrs(func)) if WRITTEN_ATTR in entries]


def verify_updates(func: Operation) -> None:
    """Check a function's ``llmopt.updates`` results and ``llmopt.written`` arguments (see
    the module docstring); raises :class:`SymbolError` located at the function."""
    inputs, outputs = _types(func)
    arg_attrs = _arg_attrs(func)
    names = {e[INPUT_ATTR].data: k for k, e in enumerate(arg_attrs)
             if isinstance(e.get(INPUT_ATTR), StringAttr)}
    seen: list[int] = []
    for r, entries in enumerate(_result_attrs(func, len(outputs))):
        if UPDATES_ATTR not in entries:
            if seen:
                raise SymbolError(func, f"result #{r} follows an {UPDATES_ATTR} result: "
                                  "updated inputs are the last results")
            continue
        name = entries[UPDATES_ATTR]
        if not isinstance(name, StringAttr) or name.data not in names:
            known = ", ".join(f"'{n}'" for n in names) or "none"
            raise SymbolError(func, f"result #{r}: {UPDATES_ATTR} must name an input "
                              f"argument (inputs: {known})")
        k = names[name.data]
        if not isinstance(outputs[r], TensorType):
            raise SymbolError(func, f"result #{r}: {UPDATES_ATTR} is for tensor results; a "
                              f"buffer-level function marks the argument {WRITTEN_ATTR}")
        if outputs[r] != inputs[k]:
            raise SymbolError(func, f"result #{r} updates argument {argument_name(func, k)} "
                              f"of type {inputs[k]}, but has type {outputs[r]}")
        if seen and k <= seen[-1]:
            raise SymbolError(func, f"result #{r}: updated inputs are returned once each, in "
                              "the order of their arguments")
        seen.append(k)
    for k, entries in enumerate(arg_attrs):
        if WRITTEN_ATTR not in entries:
            continue
        if not isinstance(entries[WRITTEN_ATTR], UnitAttr):
            raise SymbolError(func, f"argument {argument_name(func, k)}: {WRITTEN_ATTR} is a "
                              "unit attribute")
        if not isinstance(inputs[k], MemRefType):
            raise SymbolError(func, f"argument {argument_name(func, k)} of type {inputs[k]} "
                              f"is marked {WRITTEN_ATTR}: only buffers are written (a tensor "
                              f"function returns the new value with {UPDATES_ATTR})")


__all__ = ["UPDATES_ATTR", "WRITTEN_ATTR", "updated_results", "verify_updates",
           "written_arguments"]
