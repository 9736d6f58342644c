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

from collections.abc import Sequence
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


def _exported(gm: torch.fx.GraphModule, args: Sequence[Any], options: BackendOptions
              ) -> tuple[torch.export.ExportedProgram, list[_Input]]:
    graph = copy_graph(gm)
    fold_items(graph, args)
    inputs = [_Input(k, options.dtype, a) for k, a in enumerate(args)]
    example = tuple(get(args) for get in inputs)
    exported = torch.export.export(graph, example, strict=False).run_decompositions({})
    return exported, inputs


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


def _translate(aten: torch.fx.GraphModule, weights: dict[str, torch.Tensor]
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
                    programs[name] = capture_graph(sub, mine)
            return fused, programs, refused
        except GraphCaptureError as err:
            nodes = [err.node] if err.node else [
                n.name for n in sub.graph.nodes if n.op == "call_function"]
            refused.update(dict.fromkeys(nodes, f"translation failed: {err}"))
    raise CaptureError(f"more than {MAX_RETRIES} nodes refused translation: "
                       f"{sorted(refused)[:5]} ...")


def specialise(gm: torch.fx.GraphModule, args: Sequence[Any], options: BackendOptions
               ) -> Specialised:
    """Export ``gm`` on ``args``, partition it and compile its supported pieces."""
    exported, inputs = _exported(gm, args, options)
    getters, weights = _arguments(exported, inputs)
    aten = exported.graph_module
    drop_assertions(aten)
    fused, programs, refused = _translate(aten, weights)
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


__all__ = ["Fallback", "fold_items", "is_weight", "specialise"]
