"""One Dynamo graph at one set of shapes: exported, partitioned, and its pieces compiled.

:func:`specialise` is steps 2-4 of :class:`~llmopt.dynamo.compiler.CompiledGraph`: it exports
the Dynamo graph on the call's tensors (``.item()`` of a scalar input folded to its value
first, so the export sees a number, not a data-dependent symbol), partitions the ATen graph,
translates each ``fused_<k>`` piece to Torch IR — refusing a node the translator rejects and
partitioning again — and lowers each piece into a
:class:`~llmopt.dynamo.runner.PartitionRunner`. A piece whose lowering fails runs in PyTorch
too (its error is in the fallback list): the model still runs, and the warning says why.

Weights are the inputs Dynamo marks static (parameters and buffers): they become the
programs' weight arguments, which the executor binds once instead of copying per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from llmopt.dynamo.compiler import (
    MAX_RETRIES,
    PREFIX,
    BackendOptions,
    LlmoptInterpreterWarning,
    Specialised,
    _say_once,
    copy_graph,
)
from llmopt.dynamo.partition import (
    Fallback,
    LlmoptSupport,
    drop_assertions,
    fallbacks,
    partition,
)
from llmopt.dynamo.runner import PartitionRunner
from llmopt.frontend.capture import CapturedProgram, CaptureError
from llmopt.frontend.graph import GraphCaptureError, capture_graph


class _Input:
    """Reads one argument of the exported graph from the call's arguments (converted to the
    backend's dtype; a weight's conversion is made once and kept)."""

    def __init__(self, index: int, dtype: torch.dtype | None, example: Any) -> None:
        self.index = index
        self.dtype = dtype
        self.source = example
        self.converted = self._convert(example)

    def _convert(self, value: Any) -> Any:
        if self.dtype is None or not isinstance(value, torch.Tensor) or \
                not value.is_floating_point():
            return value
        return value.detach().to(self.dtype)

    def __call__(self, args: Sequence[Any]) -> Any:
        value = args[self.index]
        if value is self.source:
            return self.converted
        return self._convert(value)


def is_weight(value: Any) -> bool:
    """Whether Dynamo passes ``value`` as a parameter or buffer (a static input)."""
    return isinstance(value, torch.nn.Parameter) or \
        getattr(value, "_dynamo_static_input_type", None) is not None


def fold_items(gm: torch.fx.GraphModule, args: Sequence[Any]) -> None:
    """Replace ``x.item()`` of a scalar input ``x`` by its value (Dynamo passes a float
    attribute of a module, such as an epsilon, as a 0-d tensor read with ``.item()``)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    for node in list(gm.graph.nodes):
        if node.op != "call_method" or node.target != "item" or \
                node.args[0] not in placeholders:
            continue
        value = args[placeholders.index(node.args[0])].item()  # type: ignore[arg-type]

        def fold(n: torch.fx.Node, item: torch.fx.Node = node, value: Any = value) -> Any:
            return value if n is item else n

        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, fold)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, fold)
        gm.graph.erase_node(node)
    gm.recompile()


def _exported(gm: torch.fx.GraphModule, args: Sequence[Any], options: BackendOptions,
              dynamic: Mapping[int, Mapping[int, str]] | None = None,
              sizes: Mapping[int, str] | None = None
              ) -> tuple[torch.export.ExportedProgram, list[_Input]]:
    """Export ``gm`` on ``args``; ``dynamic`` (argument position -> {dim: symbol}) exports
    those dims as ``torch.export.Dim`` of at least 2 and at most ``options.max_seq`` (one
    per symbol); the ``int`` arguments at ``sizes`` (position -> symbol) are read from those
    dims instead (:func:`read_sizes`)."""
    from llmopt.frontend.attention_op import sdpa_as_leaf

    graph = copy_graph(gm)
    fold_items(graph, args)
    if dynamic and sizes:
        read_sizes(graph, dynamic, sizes)
    inputs = [_Input(k, options.dtype, a) for k, a in enumerate(args)]
    example = tuple(get(args) for get in inputs)
    shapes = None
    if dynamic:
        objects = {s: torch.export.Dim(s, min=2, max=options.max_seq)
                   for entries in dynamic.values() for s in entries.values()}
        shapes = tuple({d: objects[s] for d, s in dynamic[k].items()} if k in dynamic
                       else None for k in range(len(args)))
    with sdpa_as_leaf():
        exported = torch.export.export(graph, example, strict=False, dynamic_shapes=shapes)
    return exported.run_decompositions({}), inputs


def read_sizes(gm: torch.fx.GraphModule, dynamic: Mapping[int, Mapping[int, str]],
               sizes: Mapping[int, str]) -> None:
    '''Replace the uses of each ``int`` size placeholder (Dynamo passes a symbolic size that
    the code reads, such as a length, as an argument of its own) by the size of a tensor
    placeholder's dim with the same symbol, so export sees one symbol, not two it would
    have to prove equal; the placeholder stays, unused.'''
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    where = {s: (placeholders[k], d) for k, entries in dynamic.items()
             for d, s in entries.items()}
    last = placeholders[-1]
    for k, symbol in sizes.items():
        if symbol not in where or not placeholders[k].users:
            continue
        tensor, dim = where[symbol]
        with gm.graph.inserting_after(last):
            size = gm.graph.call_function(torch.ops.aten.sym_size.int, (tensor, dim))
        placeholders[k].replace_all_uses_with(size)
        last = size
    gm.recompile()


def symbol_bounds(exported: torch.export.ExportedProgram) -> dict[str, tuple[int, int]]:
    """Export's symbols with finite integer ranges, by name: what the pieces' symbolic
    sizes are bound by."""
    out: dict[str, tuple[int, int]] = {}
    for symbol, vr in exported.range_constraints.items():
        if vr.lower.is_finite and vr.upper.is_finite:  # else not a length to plan for
            out[str(symbol)] = (int(vr.lower), int(vr.upper))
    return out


def _arguments(exported: torch.export.ExportedProgram, inputs: list[_Input]
               ) -> tuple[list[Any], dict[str, torch.Tensor]]:
    """The exported graph's argument getters (in placeholder order) and its weights by
    placeholder name."""
    from torch.export.graph_signature import InputKind

    getters: list[Any] = []
    weights: dict[str, torch.Tensor] = {}
    user = 0
    for spec in exported.graph_signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if spec.kind == InputKind.USER_INPUT:
            get = inputs[user]
            user += 1
            if is_weight(get.source) and name is not None:
                weights[name] = get.converted
            getters.append(get)
        else:
            assert spec.target is not None
            table = exported.constants if spec.kind == InputKind.CONSTANT_TENSOR \
                else exported.state_dict
            value = table[spec.target]
            getters.append(lambda _args, value=value: value)
    return getters, weights


def _translate(aten: torch.fx.GraphModule, weights: dict[str, torch.Tensor],
               bounds: Mapping[str, tuple[int, int]]
               ) -> tuple[torch.fx.GraphModule, dict[str, CapturedProgram], dict[str, str]]:
    """Partition and translate, refusing the nodes the translator rejects."""
    refused: dict[str, str] = {}
    for _ in range(MAX_RETRIES + 1):
        fused = partition(copy_graph(aten), LlmoptSupport(refused))
        programs: dict[str, CapturedProgram] = {}
        try:
            for name, sub in fused.named_children():
                if name.startswith(PREFIX):
                    assert isinstance(sub, torch.fx.GraphModule)
                    mine = {n.name: weights[n.name] for n in sub.graph.find_nodes(
                        op="placeholder") if n.name in weights}
                    programs[name] = capture_graph(sub, mine, bounds=bounds)
            return fused, programs, refused
        except GraphCaptureError as err:
            nodes = [err.node] if err.node else [
                n.name for n in sub.graph.nodes if n.op == "call_function"]
            refused.update(dict.fromkeys(nodes, f"translation failed: {err}"))
    raise CaptureError(f"more than {MAX_RETRIES} nodes refused translation: "
                       f"{sorted(refused)[:5]} ...")


def specialise(gm: torch.fx.GraphModule, args: Sequence[Any], options: BackendOptions,
               dynamic: Mapping[int, Mapping[int, str]] | None = None,
               sizes: Mapping[int, str] | None = None) -> Specialised:
    """Export ``gm`` on ``args`` (symbolic in ``dynamic``'s dims, argument position ->
    {dim: symbol}, and the ``int`` sizes at ``sizes``), partition it and compile its
    supported pieces."""
    exported, inputs = _exported(gm, args, options, dynamic, sizes)
    getters, weights = _arguments(exported, inputs)
    aten = exported.graph_module
    drop_assertions(aten)
    fused, programs, refused = _translate(aten, weights, symbol_bounds(exported))
    compiled_ops = 0
    for name, program in programs.items():
        sub = getattr(fused, name)
        device = next((n.meta["val"].device for n in sub.graph.find_nodes(op="placeholder")),
                      torch.device("cpu"))
        ops = [n.name for n in sub.graph.nodes if n.op == "call_function"]
        if options.explain:
            compiled_ops += len(ops)
            continue
        interpret = options.interpret or device.type != "cuda"
        if interpret:
            _say_once("interpret", "llmopt: no CUDA tensors, so the generated kernels run in "
                      "the Kernel-IR interpreter on the CPU (slow; for tests and debugging)",
                      LlmoptInterpreterWarning)
        try:
            runner = PartitionRunner(program, sub, device, options.pipeline,
                                     options.cuda_graph, interpret=interpret)
        except Exception as err:  # noqa: BLE001 - reported, and the piece runs in PyTorch
            refused.update(dict.fromkeys(ops, f"lowering failed: {type(err).__name__}: {err}"))
            continue
        fused.add_submodule(name, runner)
        compiled_ops += len(ops)
    fused.recompile()
    (output,) = gm.graph.find_nodes(op="output")
    originals = [getattr(n, "meta", {}).get("example_value") for n in output.args[0]]
    restore = [v.dtype if options.dtype is not None and isinstance(v, torch.Tensor)
               and v.is_floating_point() else None for v in originals]
    support = LlmoptSupport(refused)
    return Specialised(fused, getters, exported.call_spec.out_spec,
                       fallbacks(aten, support, refused), len(programs), compiled_ops,
                       restore)


__all__ = ["Fallback", "fold_items", "is_weight", "read_sizes", "specialise",
           "symbol_bounds"]
