"""Translate an ATen-level ``torch.fx`` graph (not a whole exported program) into Torch IR.

:func:`capture` exports a model and translates the exported graph; :func:`capture_graph`
translates a graph that is already at the ATen level of ``run_decompositions({})`` — a piece
of an exported graph, cut out by a partitioner (see :mod:`llmopt.dynamo`). Every node must
carry its example value in ``node.meta["val"]`` (export puts it there; the partitioner's
``fuse_partitions`` copies it), which gives the translator each value's shape and dtype without
tracing again.

A graph traced with symbolic sizes (Dynamo's ``dynamic=True``, exported with
``dynamic_shapes``) translates to a symbolic program when ``bounds`` bounds its symbols: a
placeholder dim that is a bare symbol (``s0``) becomes a ``?`` extent bound to the ``index``
argument of that name (see :mod:`llmopt.dialects._symbols`).

The graph's tensor placeholders are the function's arguments, in order (a size placeholder
is none: sizes come from the tensors' shapes); those named in ``weights`` become weight
arguments (``{llmopt.param = "<placeholder>"}``, their tensors kept in the
program's ``params`` so an executor binds them once), the others inputs. The same
translation as :func:`~llmopt.frontend.capture.capture` runs (one converter per ATen op,
:func:`~llmopt.frontend.capture.supported_ops`), so what one accepts the other accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmopt.frontend.capture import (
    CapturedProgram,
    CaptureError,
    _DynamicSpec,
    _is_size,
    _Translator,
)

if TYPE_CHECKING:
    import torch


class GraphCaptureError(CaptureError):
    """A node of the graph cannot be translated; ``node`` names it (``None`` when the error
    is about the graph as a whole)."""

    def __init__(self, message: str, node: str | None) -> None:
        super().__init__(message)
        self.node = node


@dataclass
class _Signature:
    """The part of an ``ExportedProgram``'s graph signature the translator reads."""

    input_specs: list[Any]
    output_specs: list[Any]


@dataclass
class _GraphProgram:
    """What the translator reads of an ``ExportedProgram``, built for a plain graph."""

    graph_module: torch.fx.GraphModule
    graph_signature: _Signature
    state_dict: dict[str, torch.Tensor] = field(default_factory=dict[str, "torch.Tensor"])
    constants: dict[str, Any] = field(default_factory=dict[str, Any])


def capture_graph(gm: torch.fx.GraphModule, weights: Mapping[str, torch.Tensor] | None = None,
                  *, name: str = "forward", bounds: Mapping[str, tuple[int, int]] | None = None
                  ) -> CapturedProgram:
    """Translate ``gm`` (ATen ops, ``meta["val"]`` on every node) into Torch IR.

    ``weights`` maps placeholder names to the tensors bound to them; those placeholders
    become weight arguments named after themselves. ``bounds`` maps the symbols of
    symbolic input sizes to their ``(min, max)``. Raises :class:`GraphCaptureError`
    naming the node that cannot be translated.
    """
    import torch
    from torch.export.graph_signature import (
        InputKind,
        InputSpec,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )

    weights = dict(weights or {})
    spec = _graph_spec(gm, weights, bounds or {})
    inputs: list[InputSpec] = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        if _is_size(node):
            _check_size(node, spec)
            continue  # a size: the converters read sizes from the example values
        if not isinstance(node.meta.get("val"), torch.Tensor):
            raise GraphCaptureError(f"graph input '{node.name}' is not a tensor", node.name)
        kind = InputKind.PARAMETER if node.name in weights else InputKind.USER_INPUT
        target = node.name if node.name in weights else None
        inputs.append(InputSpec(kind, TensorArgument(node.name), target))
    outputs = [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(n.name), None)
               for n in gm.graph.find_nodes(op="output")]
    program = _GraphProgram(gm, _Signature(inputs, outputs),
                            state_dict={k: v.detach() for k, v in weights.items()})
    translator = _Translator(program, name, spec=spec)  # type: ignore[arg-type]  # duck-typed
    try:
        return translator.run()
    except CaptureError as err:
        node = translator.node.name if translator.node is not None else None
        if str(err).startswith(("output #", "internal error")):
            node = None  # about the graph's results, not the last node translated
        raise GraphCaptureError(str(err), node) from err


def _check_size(node: torch.fx.Node, spec: _DynamicSpec | None) -> None:
    """A size placeholder (Dynamo passes a symbolic size it reads as an ``int``) is no
    argument: it must be a number or follow from the symbols of the tensor inputs' dims."""
    import torch

    value = node.meta.get("val")
    if not isinstance(value, torch.SymInt):
        return
    known = {s for dims in (spec.dims.values() if spec else []) for s in dims.values()}
    missing = sorted(str(s) for s in value.node.expr.free_symbols if str(s) not in known)
    if missing:
        raise GraphCaptureError(f"graph input '{node.name}' is the size {value.node.expr}, "
                                f"which no input tensor's shape gives ({missing})", None)


def _graph_spec(gm: torch.fx.GraphModule, weights: Mapping[str, Any],
                bounds: Mapping[str, tuple[int, int]]) -> _DynamicSpec | None:
    """The symbolic dims of ``gm``'s inputs (placeholder -> {dim: symbol}) and the bounds of
    the symbols they use, in order of first use; ``None`` when no input size is symbolic."""
    import torch

    dims: dict[str, dict[int, str]] = {}
    used: dict[str, tuple[int, int]] = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if node.name in weights or not isinstance(val, torch.Tensor):
            continue
        for d, extent in enumerate(val.shape):
            if not isinstance(extent, torch.SymInt) or extent.node.expr.is_number:
                continue
            symbol = str(extent.node.expr)
            if not extent.node.expr.is_Symbol:
                raise GraphCaptureError(f"dim {d} of input '{node.name}' is {symbol}, not a "
                                        "symbol of its own", None)
            if symbol not in bounds:
                raise GraphCaptureError(f"dim {d} of input '{node.name}' is the symbol "
                                        f"{symbol}, which has no bounds", None)
            dims.setdefault(node.name, {})[d] = symbol
            used.setdefault(symbol, bounds[symbol])
    return _DynamicSpec(dims, used, {}) if dims else None


__all__ = ["GraphCaptureError", "capture_graph"]
