"""Capture a PyTorch module or function as Torch IR.

:func:`capture` exports the model with ``torch.export`` (non-strict), runs the empty
decomposition table (functionalisation only: high-level ops such as ``linear``, ``silu``,
``softmax`` and ``rms_norm`` stay intact, in-place ops and dropout disappear) and translates
the ATen graph op by op into a ``func.func`` of ``torch`` dialect ops::

    func.func @forward(%l.weight: tensor<32x16xf32> {llmopt.param = "l.weight"},
                       %x: tensor<8x16xf32> {llmopt.input = "x"}) -> tensor<8x32xf32>

The arguments are first the parameters, buffers and lifted constants (named after their
``state_dict`` keys), then the user inputs; the results are the flattened outputs. Weights are
never constants in the IR: :class:`CapturedProgram` keeps the concrete tensors for the runtime.

Shapes are those of the example inputs, except the dims named in ``dynamic``: those become
symbolic extents (``?``) through ``torch.export.Dim``, one program for every length up to the
declared maximum::

    capture(fn, (x,), dynamic={"x": {1: "seq"}}, max={"seq": 2048})

    func.func @forward(%w: tensor<16xf32> {llmopt.param = "w"},
                       %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                       %seq: index {llmopt.symbol = "seq", llmopt.max = 2048})

Each symbol is an ``index`` argument after the inputs (see :mod:`llmopt.dialects._symbols`).
The sizes export computes from it (``s0``, ``4*s0``, ``s0 - 1``, ``(s0 + 1)//2``) become
``arith`` ops on that argument, the ``index`` operands of the ops that need them
(``torch.reshape``, ``torch.expand``, ``torch.arange``, ``torch.slice``).

Tensors are ``f16``, ``bf16``, ``f32`` or
``f64``, or signed integers and ``bool`` (``i64`` token ids and positions, ``i1`` masks).
Dtype promotion becomes explicit ``torch.to`` ops and Python scalars become ``torch.constant``
operands. Weights the computation never reads are not arguments. Each op carries the location
of the Python line that produced it; an ATen op without a translation raises
:class:`CaptureError` naming the op and that line.

A module built on the ``meta`` device captures without any weight in memory: ``params`` then
holds ``meta`` tensors (names, shapes, dtypes) and :meth:`CapturedProgram.bind` supplies real
tensors later (``llmopt.frontend.models.load_weights`` reads them from a checkpoint).
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    FileLineColLoc,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects import torch as t
from llmopt.dialects._symbols import (
    DYNAMIC_ATTR,
    INPUT_ATTR,
    MAX_ATTR,
    MIN_ATTR,
    SYMBOL_ATTR,
    verify_module,
)
from llmopt.dialects._updates import UPDATES_ATTR

if TYPE_CHECKING:
    import torch
    from torch.fx import Node

PARAM_ATTR = "llmopt.param"
"""Argument attribute naming the ``state_dict`` key a weight argument is bound to."""


class CaptureError(Exception):
    """The model cannot be captured: an unsupported op, dtype, input or output."""


@dataclass
class CapturedProgram:
    """A captured model: Torch IR plus what the runtime needs to call it.

    ``module`` holds one ``func.func`` whose arguments are ``param_names`` (weights, in
    order) followed by ``input_names``, and whose results are the ``output_count`` outputs
    followed by the new values of ``updated_inputs``; ``params`` maps each ``state_dict``
    key to its tensor. A model captured on the ``meta`` device has ``meta`` tensors there
    (names and shapes only): :meth:`bind` supplies the data later.
    """

    module: ModuleOp
    params: dict[str, torch.Tensor]
    param_names: list[str]
    input_names: list[str]
    output_count: int
    name: str = "forward"
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict[str, tuple[int, int]])
    """The symbolic extents, ``name -> (min, max)``: their ``index`` arguments follow the
    inputs, in this order, and :meth:`arguments` binds them from the inputs' shapes."""
    updated_inputs: list[str] = field(default_factory=list[str])
    """The inputs the captured function writes into (``cache[-1] = k``), in input order:
    their new values are the last results, marked ``llmopt.updates`` (see
    :mod:`llmopt.dialects._updates`), after the ``output_count`` outputs."""

    @property
    def func(self) -> FuncOp:
        """The captured function."""
        for op in self.module.ops:
            if isinstance(op, FuncOp) and op.sym_name.data == self.name:
                return op
        raise KeyError(self.name)

    @property
    def unbound(self) -> list[str]:
        """The weights that hold no data yet (``meta`` tensors, as captured from a model
        built on the meta device), in argument order."""
        return [n for n in self.param_names if self.params[n].is_meta]

    def bind(self, tensors: Mapping[str, torch.Tensor] | torch.nn.Module, *,
             strict: bool = True) -> CapturedProgram:
        """A copy of this program whose weights are taken from ``tensors``.

        ``tensors`` maps ``state_dict`` keys to tensors (e.g. a checkpoint's state dict, or
        ``safetensors.torch.load_file``), or is a module whose parameters and buffers
        (non-persistent ones included) are taken by name. Names the program does not use are
        ignored; weights not named keep their current tensor. Each tensor must have its
        argument's shape and dtype. The IR is shared, not copied. With ``strict`` (the
        default) every weight must hold data afterwards (no ``meta`` tensor left).

        Raises:
            CaptureError: a tensor does not fit its argument, or (``strict``) a weight is
                still unbound.
        """
        import torch

        if isinstance(tensors, torch.nn.Module):
            source: dict[str, torch.Tensor] = {
                **dict(tensors.named_buffers(remove_duplicate=False)),
                **dict(tensors.named_parameters(remove_duplicate=False)),
            }
        else:
            source = dict(tensors)
        types = dict(zip(self.param_names, self.func.function_type.inputs.data, strict=False))
        params = dict(self.params)
        for name in self.param_names:
            if name not in source:
                continue
            tensor = source[name]
            if not isinstance(tensor, torch.Tensor):
                raise CaptureError(f"weight '{name}' must be a tensor, got "
                                   f"{type(tensor).__name__}")
            typ = types[name]
            assert isinstance(typ, TensorType)
            if tuple(tensor.shape) != tuple(typ.get_shape()) or \
                    element_type(tensor.dtype) != typ.element_type:
                raise CaptureError(
                    f"weight '{name}' is {tensor.dtype} {list(tensor.shape)}, the program "
                    f"takes {typ}"
                )
            params[name] = tensor.detach()
        bound = dataclasses.replace(self, params=params)
        missing = bound.unbound
        if strict and missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise CaptureError(f"{len(missing)} weight(s) are still unbound (meta): {shown}")
        return bound

    def arguments(self, *inputs: torch.Tensor) -> list[Any]:
        """The function's arguments in order: the weights, then ``inputs``, then the value of
        each symbol (taken from the inputs' shapes and checked against its bounds).

        Raises:
            CaptureError: a weight is still a ``meta`` tensor (see :meth:`bind`), or an
                input's shape does not fit the program.
        """
        if len(inputs) != len(self.input_names):
            raise TypeError(f"expected {len(self.input_names)} inputs ({self.input_names}), "
                            f"got {len(inputs)}")
        missing = self.unbound
        if missing:
            raise CaptureError(f"weights {missing[:5]} hold no data (meta tensors): bind real "
                               "tensors with CapturedProgram.bind first")
        args: list[Any] = [*(self.params[n] for n in self.param_names), *inputs]
        if self.symbols:
            from llmopt.dialects._symbols import BindError, bind_arguments

            try:
                args, _ = bind_arguments(self.func, args)
            except BindError as err:
                raise CaptureError(str(err)) from None
        return args


# --- entry point --------------------------------------------------------------------------------


def capture(
    fn_or_module: Callable[..., Any],
    example_args: tuple[Any, ...],
    *,
    name: str = "forward",
    dynamic: Mapping[str, Mapping[int, str]] | None = None,
    max: Mapping[str, int] | None = None,  # noqa: A002 - the bound's plain name
    min: Mapping[str, int] | None = None,  # noqa: A002
) -> CapturedProgram:
    """Export ``fn_or_module`` on ``example_args`` and translate it into Torch IR.

    A plain function is wrapped in an ``nn.Module`` whose ``forward`` has the function's
    signature, so user inputs keep their parameter names. Modules are exported in eval mode
    (inference: dropout is the identity); their training flags are restored afterwards.

    ``dynamic`` makes dims symbolic: it maps an input's parameter name to ``{dim: symbol}``
    (``{"x": {1: "seq"}}``; dims that share a symbol have equal extents). Every symbol needs
    a maximum in ``max`` (``{"seq": 2048}``); ``min`` (default 1) may raise its minimum. The
    example inputs must have an extent of at least 2 there (``torch.export`` specialises
    lengths 0 and 1). A program whose graph only holds for part of the range (it slices off
    a token, so the length must be at least 2) fails with export's suggested bounds.

    Raises :class:`CaptureError` when export fails or the graph holds something Torch IR
    cannot express.
    """
    import torch

    from llmopt.frontend.attention_op import sdpa_as_leaf
    from llmopt.frontend.predispatch import prepare_direct
    from llmopt.gc_tuning import fewer_collections

    module = _as_module(fn_or_module)
    spec = _dynamic_spec(module, tuple(example_args), dynamic, max, min)
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    code = getattr(fn_or_module, "__code__", None)
    renamed = ((code.co_filename, fn_or_module.__name__)
               if isinstance(fn_or_module, types.FunctionType) and code is not None else None)

    def translate(exported: torch.export.ExportedProgram) -> CapturedProgram:
        return _Translator(exported, name, spec=spec, renamed=renamed).run()

    with fewer_collections():  # export allocates millions of objects that live on
        try:
            shapes = None if spec is None else spec.dynamic_shapes
            with sdpa_as_leaf():
                exported = torch.export.export(module, tuple(example_args), strict=False,
                                               dynamic_shapes=shapes)
            direct = prepare_direct(exported)
        except Exception as err:  # torch raises many kinds of errors here
            raise CaptureError(f"torch.export failed: {err}") from err
        finally:
            for submodule, training in modes:
                submodule.training = training
        if direct:  # a pure graph: translated without a second trace (predispatch)
            try:
                return translate(exported)
            except CaptureError:
                pass  # an op only the decomposed graph spells in Torch IR's terms
        try:
            exported = exported.run_decompositions({})
        except Exception as err:
            raise CaptureError(f"torch.export failed: {err}") from err
        return translate(exported)


@dataclass
class _DynamicSpec:
    """What :func:`capture` was asked to make symbolic."""

    dims: dict[str, dict[int, str]]
    """Input name -> {dim: symbol name}."""
    bounds: dict[str, tuple[int, int]]
    """Symbol name -> (min, max), in declaration order."""
    dynamic_shapes: dict[str, Any]
    """The ``dynamic_shapes`` argument of ``torch.export.export``."""


def _dynamic_spec(module: torch.nn.Module, example_args: tuple[Any, ...],
                  dynamic: Mapping[str, Mapping[int, str]] | None,
                  high: Mapping[str, int] | None, low: Mapping[str, int] | None
                  ) -> _DynamicSpec | None:
    """Check ``capture``'s ``dynamic``/``max``/``min`` and build export's dynamic shapes."""
    import torch

    if not dynamic:
        if high or low:
            raise CaptureError("max/min bound symbols, but no dim is dynamic (pass dynamic=)")
        return None
    try:
        params = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError) as err:
        raise CaptureError(f"cannot read the parameter names of the forward: {err}") from err
    params = params[:len(example_args)]
    high, low = dict(high or {}), dict(low or {})
    dims: dict[str, dict[int, str]] = {}
    order: list[str] = []
    for input_name, entries in dynamic.items():
        if input_name not in params:
            raise CaptureError(f"dynamic names input '{input_name}', but the inputs are "
                               f"{params}")
        example = example_args[params.index(input_name)]
        if not isinstance(example, torch.Tensor):
            raise CaptureError(f"dynamic input '{input_name}' is not a tensor")
        dims[input_name] = {}
        for dim, symbol in entries.items():
            if not isinstance(dim, int) or not -example.ndim <= dim < example.ndim:
                raise CaptureError(f"dim {dim!r} of input '{input_name}' is out of range for "
                                   f"its rank {example.ndim}")
            if not isinstance(symbol, str) or not symbol.isidentifier():
                raise CaptureError(f"symbol {symbol!r} must be a name such as 'seq'")
            dim %= example.ndim
            extent = int(example.shape[dim])
            if symbol not in high:
                raise CaptureError(f"symbol '{symbol}' needs a maximum: max={{'{symbol}': N}}")
            top, bottom = int(high[symbol]), int(low.get(symbol, 1))
            if not 1 <= bottom <= top:
                raise CaptureError(f"symbol '{symbol}': bounds [{bottom}, {top}] must satisfy "
                                   "1 <= min <= max")
            if extent < 2 or not bottom <= extent <= top:
                raise CaptureError(
                    f"input '{input_name}' has extent {extent} in dynamic dim {dim}: use an "
                    f"example of at least 2 (export specialises 0 and 1) within [{bottom}, "
                    f"{top}]"
                )
            dims[input_name][dim] = symbol
            if symbol not in order:
                order.append(symbol)
    for symbol in [*high, *low]:
        if symbol not in order:
            raise CaptureError(f"symbol '{symbol}' is bounded but no dynamic dim names it")
    bounds = {sym: (int(low.get(sym, 1)), int(high[sym])) for sym in order}
    objects = {sym: torch.export.Dim(sym, min=bounds[sym][0], max=bounds[sym][1])
               for sym in order}
    shapes: dict[str, Any] = {name: None for name in params}
    for input_name, entries in dims.items():
        shapes[input_name] = {dim: objects[sym] for dim, sym in entries.items()}
    return _DynamicSpec(dims, bounds, shapes)


def _as_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """``fn`` itself if it is a module, else a module whose ``forward`` is ``fn``.

    A plain Python function becomes the ``forward`` of the module under that name (same code,
    globals and closure): export keeps the parameter names of the signature and records
    stack traces only through frames named ``forward``, so source lines still point into
    ``fn``.
    """
    import torch

    if isinstance(fn, torch.nn.Module):
        return fn
    if not callable(fn):
        raise CaptureError(f"expected an nn.Module or a function, got {type(fn).__name__}")
    title = getattr(fn, "__name__", "function")
    wrapper = type(f"Captured_{title}", (torch.nn.Module,), {})()
    code = getattr(fn, "__code__", None)
    if isinstance(fn, types.FunctionType) and code is not None:
        forward = types.FunctionType(
            code.replace(co_name="forward", co_qualname="forward"),
            fn.__globals__, "forward", fn.__defaults__, fn.__closure__,
        )
        forward.__kwdefaults__ = fn.__kwdefaults__
    else:
        def forward(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        try:
            forward.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            pass
    object.__setattr__(wrapper, "forward", forward)
    return wrapper


# --- source lines -------------------------------------------------------------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?P<code>.*)')


@dataclass(frozen=True)
class SourceLine:
    """A Python source line: where a graph node came from."""

    file: str
    line: int
    function: str
    code: str

    def __str__(self) -> str:
        text = f"{self.file}:{self.line} in {self.function}"
        return f"{text}: {self.code}" if self.code else text


def _is_library(path: str) -> bool:
    """Frames of torch, transformers, installed packages and this wrapper are not the user's."""
    if path == __file__:
        return True
    return any(f"/{lib}/" in path for lib in ("torch", "transformers", "site-packages"))


def source_line(node: Node) -> SourceLine | None:
    """The innermost frame of the node's stack trace outside torch/transformers (the last
    frame if all are library frames), or ``None`` without a stack trace."""
    trace = node.meta.get("stack_trace") or ""
    frames = [
        SourceLine(m["file"], int(m["line"]), m["func"], m["code"].strip())
        for m in _FRAME.finditer(trace)
    ]
    if not frames:
        return None
    user = [f for f in frames if not _is_library(f.file)]
    return (user or frames)[-1]


# --- translation --------------------------------------------------------------------------------


def element_type(dtype: torch.dtype) -> Attribute:
    """The xDSL element type of a torch dtype (floats, signed integers, ``bool`` as ``i1``);
    raises :class:`CaptureError` for others (unsigned, complex, quantised)."""
    import torch

    table: dict[torch.dtype, Attribute] = {
        torch.float32: Float32Type(),
        torch.float64: Float64Type(),
        torch.float16: Float16Type(),
        torch.bfloat16: BFloat16Type(),
        torch.int64: IntegerType(64),
        torch.int32: IntegerType(32),
        torch.int16: IntegerType(16),
        torch.int8: IntegerType(8),
        torch.bool: IntegerType(1),
    }
    if dtype not in table:
        raise CaptureError(f"unsupported dtype {dtype} (Torch IR holds f16, bf16, f32, f64, "
                           "int8/16/32/64 and bool)")
    return table[dtype]


def _tensor_type(val: Any, what: str) -> TensorType:
    """The tensor type of an exported value: symbolic extents (``SymInt``) become ``?``."""
    import torch

    if not isinstance(val, torch.Tensor):
        raise CaptureError(f"{what} is not a tensor ({type(val).__name__})")
    return TensorType(element_type(val.dtype), _static_or_dynamic(val.shape))


def _static_or_dynamic(shape: Any) -> list[int]:
    """A torch shape with each symbolic extent as ``?`` (never guarding on its value)."""
    import torch

    out: list[int] = []
    for extent in shape:
        if isinstance(extent, torch.SymInt):
            expr = extent.node.expr
            out.append(int(expr) if expr.is_number else DYNAMIC_INDEX)
        else:
            out.append(int(extent))
    return out


Converter = Callable[["_Translator", "Node", dict[str, Any]], SSAValue]
_CONVERTERS: dict[str, Converter] = {}
_IDENTITY = {
    "aten.clone.default", "aten.contiguous.default", "aten.alias.default", "aten.detach.default",
    "aten.lift_fresh_copy.default", "aten.lift_fresh.default", "aten.dropout.default",
    "aten.feature_dropout.default",
}  # fmt: skip
_DROPPED = {
    "aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default", "aten.sym_constrain_range.default",
    "aten._assert_async.msg", "aten._assert_async.default",
}  # fmt: skip


MultiConverter = Callable[["_Translator", "Node", dict[str, Any]], list[SSAValue]]
_MULTI_CONVERTERS: dict[str, MultiConverter] = {}


def supported_ops() -> list[str]:
    """The ATen overloads :func:`capture` translates (or drops as no-ops)."""
    return sorted([*_CONVERTERS, *_MULTI_CONVERTERS, *_IDENTITY, *_DROPPED])


def _converts(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for name in names:
            _CONVERTERS[name] = fn
        return fn

    return register


@dataclass
class _Translator:
    exported: torch.export.ExportedProgram
    name: str
    block: Block = field(default_factory=Block)
    values: dict[str, SSAValue] = field(default_factory=dict[str, SSAValue])
    constants: dict[tuple[str, str], SSAValue] = field(
        default_factory=dict[tuple[str, str], SSAValue]
    )
    loc: SourceLine | None = None
    parts: dict[str, list[SSAValue]] = field(default_factory=dict[str, list[SSAValue]])
    """Results of multi-output nodes (``split``), picked by ``getitem`` nodes."""
    renamed: tuple[str, str] | None = None
    """(file, name) of a function captured under the name ``forward``."""
    spec: _DynamicSpec | None = None
    """The dims :func:`capture` made symbolic, if any."""
    symbol_args: dict[Any, SSAValue] = field(default_factory=dict[Any, SSAValue])
    """Export's sympy symbols -> the ``index`` arguments they are bound to."""
    index_values: dict[str, SSAValue] = field(default_factory=dict[str, SSAValue])
    """Index values emitted for sympy expressions (and integers), by their text."""
    node: Node | None = None
    """The graph node being translated (the one a :class:`CaptureError` is about)."""

    # -- driver ----------------------------------------------------------------------------

    def run(self) -> CapturedProgram:
        from torch.export.graph_signature import InputKind, OutputKind

        graph = self.exported.graph_module.graph
        sig = self.exported.graph_signature
        placeholders = [n for n in graph.nodes if n.op == "placeholder" and not _is_size(n)]
        specs = dict(zip([n.name for n in placeholders], sig.input_specs, strict=True))

        params: dict[str, torch.Tensor] = {}
        weights: list[tuple[Node, str]] = []
        inputs: list[tuple[Node, str]] = []
        for node in placeholders:
            spec = specs[node.name]
            if spec.kind == InputKind.USER_INPUT:
                inputs.append((node, spec.arg.name))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                target = spec.target
                assert target is not None
                weights.append((node, target))
                params[target] = self._tensor_value(target)
            else:
                raise CaptureError(f"unsupported graph input {node.name} ({spec.kind.name})")
        updates: dict[str, str] = {}  # output node name -> the input it updates
        for spec in sig.output_specs:
            if spec.kind == OutputKind.USER_INPUT_MUTATION and spec.target is not None:
                updates[spec.arg.name] = spec.target
            elif spec.kind != OutputKind.USER_OUTPUT:
                raise CaptureError(
                    f"the model mutates its state ({spec.kind.name} of {spec.target}); "
                    "only pure functions of the inputs (and writes into inputs) can be "
                    "captured"
                )

        arg_types: list[Attribute] = []
        arg_attrs: list[DictionaryAttr] = []
        for node, key in weights:
            arg_types.append(_tensor_type(node.meta.get("val"), f"parameter '{key}'"))
            arg_attrs.append(DictionaryAttr({PARAM_ATTR: StringAttr(key)}))
        symbols = self._symbols(inputs)
        for node, key in inputs:
            typ = _tensor_type(node.meta.get("val"), f"input '{key}'")
            arg_types.append(typ)
            entries: dict[str, Attribute] = {INPUT_ATTR: StringAttr(key)}
            names = [symbols[e.node.expr] for e in node.meta["val"].shape
                     if _is_symbolic(e)]
            if names:
                entries[DYNAMIC_ATTR] = ArrayAttr([StringAttr(n) for n in names])
            arg_attrs.append(DictionaryAttr(entries))
        assert self.spec is not None or not symbols
        by_name = {name: expr for expr, name in symbols.items()}
        for name in (self.spec.bounds if self.spec else {}):
            low, high = self.spec.bounds[name]  # type: ignore[union-attr]
            arg_types.append(IndexType())
            entries = {SYMBOL_ATTR: StringAttr(name), MAX_ATTR: IntegerAttr(high, 64)}
            if low != 1:
                entries[MIN_ATTR] = IntegerAttr(low, 64)
            arg_attrs.append(DictionaryAttr(entries))
        self.block = Block(arg_types=arg_types)
        for arg, (node, key) in zip(self.block.args, [*weights, *inputs], strict=False):
            arg.name_hint = key if SSAValue.is_valid_name(key) else None
            self.values[node.name] = arg
        for k, name in enumerate(self.spec.bounds if self.spec else {}):
            arg = self.block.args[len(weights) + len(inputs) + k]
            arg.name_hint = name
            if name in by_name:
                self.symbol_args[by_name[name]] = arg

        results: list[SSAValue] = []
        for node in graph.nodes:
            if node.op == "call_function" and _is_size(node):
                continue  # size arithmetic: emitted from the expressions where it is used
            if node.op == "call_function":
                self._translate(node)
            elif node.op == "output":
                self.loc = None
                updated: dict[str, SSAValue] = {}
                for k, out in enumerate(_flatten(node.args[0])):
                    if out is None or not hasattr(out, "name") or out.name not in self.values:
                        raise CaptureError(f"output #{k} is not a tensor ({out!r})")
                    if out.name in updates:
                        updated[updates[out.name]] = self.values[out.name]
                    else:
                        results.append(self.values[out.name])
            elif node.op != "placeholder":
                raise CaptureError(f"unsupported graph node {node.op} {node.target}")

        user_outputs = len(results)
        updated_names = [key for _, key in inputs if key in updated]
        results += [updated[key] for key in updated_names]
        self.block.add_op(ReturnOp(*results))
        for op in reversed(list(self.block.ops)):  # drop unused parts of splits
            if isinstance(op, t.TorchOp) and not any(r.uses for r in op.results):
                self.block.erase_op(op)
        # Weights the computation never reads (e.g. a rotary embedding's saved copy of its
        # frequencies) are not arguments.
        for k in reversed(range(len(weights))):
            arg = self.block.args[k]
            if not arg.uses:
                self.block.erase_arg(arg)
                key = weights[k][1]
                del arg_types[k], arg_attrs[k], weights[k]
                if all(other != key for _, other in weights):
                    params.pop(key)
        func = FuncOp(
            self.name,
            (arg_types, [r.type for r in results]),
            Region(self.block),
            arg_attrs=ArrayAttr(arg_attrs),
            res_attrs=ArrayAttr(
                [DictionaryAttr({}) for _ in range(user_outputs)]
                + [DictionaryAttr({UPDATES_ATTR: StringAttr(key)}) for key in updated_names]
            ) if updated_names else None,
        )
        module = ModuleOp([func])
        try:
            module.verify()
            verify_module(module)
        except VerifyException as err:
            raise CaptureError(f"internal error: captured IR does not verify: {err}") from err
        return CapturedProgram(
            module=module,
            params=params,
            param_names=[key for _, key in weights],
            input_names=[key for _, key in inputs],
            output_count=user_outputs,
            updated_inputs=updated_names,
            name=self.name,
            symbols=dict(self.spec.bounds) if self.spec else {},
        )

    def _symbols(self, inputs: list[tuple[Node, str]]) -> dict[Any, str]:
        """Export's symbol of each dynamic dim -> the name :func:`capture` gave it; raises
        :class:`CaptureError` when export specialised a dim or tied it to an expression."""
        if self.spec is None:
            return {}
        out: dict[Any, str] = {}
        shapes = {key: node.meta.get("val") for node, key in inputs}
        for input_name, dims in self.spec.dims.items():
            val = shapes.get(input_name)
            if val is None:
                raise CaptureError(f"dynamic input '{input_name}' is not a graph input")
            for dim, name in dims.items():
                extent = val.shape[dim]
                if not _is_symbolic(extent):
                    raise CaptureError(
                        f"torch.export made dim {dim} of input '{input_name}' static "
                        f"({int(extent)}): the program only works at that length"
                    )
                expr = extent.node.expr
                if not expr.is_Symbol:
                    raise CaptureError(f"torch.export ties dim {dim} of input '{input_name}' "
                                       f"to {expr}, not to a symbol of its own")
                if expr in out and out[expr] != name:
                    raise CaptureError(
                        f"torch.export found dim {dim} of input '{input_name}' equal to "
                        f"symbol '{out[expr]}': name both '{out[expr]}'"
                    )
                out[expr] = name
        for node, key in inputs:
            for dim, extent in enumerate(node.meta["val"].shape):
                if _is_symbolic(extent) and extent.node.expr not in out:
                    raise CaptureError(f"dim {dim} of input '{key}' is symbolic "
                                       f"({extent.node.expr}) but not named in dynamic=")
        return out

    def index(self, value: Any) -> SSAValue:
        """An ``index`` value for an integer or a ``SymInt`` (export's sympy expression of
        the symbols): ``arith`` ops on the symbol arguments, emitted once per expression."""
        import torch

        expr = value.node.expr if isinstance(value, torch.SymInt) else value
        return self._index_expr(expr)

    def _index_expr(self, expr: Any) -> SSAValue:
        import sympy
        from torch.utils._sympy.functions import CeilDiv, FloorDiv, Mod, PythonMod

        key = str(expr)
        if key in self.index_values:
            return self.index_values[key]
        saved, self.loc = self.loc, None
        try:
            if isinstance(expr, int) or (hasattr(expr, "is_Integer") and expr.is_Integer):
                op: Operation = arith.ConstantOp(IntegerAttr(int(expr), IndexType()))
            elif isinstance(expr, sympy.Symbol):
                if expr not in self.symbol_args:
                    raise CaptureError(f"size {expr} depends on data or on a dim not named in "
                                       "dynamic=")
                return self.symbol_args[expr]
            elif isinstance(expr, sympy.Add | sympy.Mul):
                terms = [self._index_expr(a) for a in expr.args]
                kind = arith.AddiOp if isinstance(expr, sympy.Add) else arith.MuliOp
                value = terms[0]
                for term in terms[1:-1]:
                    value = self._emit_index(kind(value, term))
                op = kind(value, terms[-1])
            elif isinstance(expr, FloorDiv):
                lhs, rhs = (self._index_expr(a) for a in expr.args)
                op = arith.FloorDivSIOp(lhs, rhs)
            elif isinstance(expr, CeilDiv):
                lhs, rhs = (self._index_expr(a) for a in expr.args)
                op = arith.CeilDivSIOp(lhs, rhs)
            elif isinstance(expr, Mod | PythonMod):
                lhs, rhs = (self._index_expr(a) for a in expr.args)
                op = arith.RemSIOp(lhs, rhs)
            elif isinstance(expr, sympy.Max | sympy.Min):
                kind = arith.MaxSIOp if isinstance(expr, sympy.Max) else arith.MinSIOp
                terms = [self._index_expr(a) for a in expr.args]
                value = terms[0]
                for term in terms[1:-1]:
                    value = self._emit_index(kind(value, term))
                op = kind(value, terms[-1])
            else:
                raise CaptureError(f"cannot express the size {expr} ({type(expr).__name__}) "
                                   "as index arithmetic")
            result = self._emit_index(op)
        finally:
            self.loc = saved
        self.index_values[key] = result
        return result

    def _emit_index(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def sizes(self, shape: Any) -> list[SSAValue]:
        """The ``index`` values of the symbolic extents of a torch ``shape``, in order."""
        return [self.index(e) for e in shape if _is_symbolic(e)]

    def _tensor_value(self, target: str) -> torch.Tensor:
        import torch

        if target in self.exported.state_dict:
            value = self.exported.state_dict[target]
        elif target in self.exported.constants:
            value = self.exported.constants[target]
        else:
            raise CaptureError(f"cannot find the tensor of '{target}'")
        if not isinstance(value, torch.Tensor):
            raise CaptureError(f"'{target}' is not a tensor ({type(value).__name__})")
        return value.detach()

    def _translate(self, node: Node) -> None:
        self.node = node
        target = str(node.target)
        self.loc = source_line(node)
        if self.loc and self.renamed and (self.loc.file, self.loc.function) == (
            self.renamed[0], "forward"
        ):
            self.loc = dataclasses.replace(self.loc, function=self.renamed[1])
        if target in _DROPPED:
            return
        if target in _IDENTITY:
            self.values[node.name] = self.value(node.args[0])
            return
        if node.target is operator.getitem:
            source, index = node.args
            parts = self.parts.get(getattr(source, "name", ""))
            if parts is None or not isinstance(index, int):
                raise CaptureError(f"unsupported getitem {node.format_node()}")
            self.values[node.name] = parts[index]
            return
        if target in _MULTI_CONVERTERS:
            vals = node.meta.get("val")
            if not isinstance(vals, list | tuple):
                raise CaptureError(f"internal error: {target} has no list of results")
            expected_parts = [_tensor_type(v, f"a result of {target}") for v in vals]
            try:
                parts = _MULTI_CONVERTERS[target](self, node, _bind(node))
            except (VerifyException, ValueError, TypeError) as err:
                where = f" at {self.loc}" if self.loc else ""
                raise CaptureError(f"cannot translate {target}{where}: {err}") from err
            self.parts[node.name] = [
                self._conform(v, e, target) for v, e in zip(parts, expected_parts, strict=True)
            ]
            return
        converter = _CONVERTERS.get(target)
        if converter is None:
            where = f" at {self.loc}" if self.loc else ""
            raise CaptureError(f"unsupported op {target}{where}")
        expected = _tensor_type(node.meta.get("val"), f"the result of {target}")
        try:
            value = converter(self, node, _bind(node))
        except (VerifyException, ValueError, TypeError) as err:
            where = f" at {self.loc}" if self.loc else ""
            raise CaptureError(f"cannot translate {target}{where}: {err}") from err
        value = self._conform(value, expected, target)
        if isinstance(value.owner, Operation) and value.name_hint is None:
            value.name_hint = node.name
        self.values[node.name] = value

    def _conform(self, value: SSAValue, expected: TensorType, target: str) -> SSAValue:
        """Check the translation against the exported type; cast when only the dtype differs."""
        got = value.type
        assert isinstance(got, TensorType)
        if got.get_shape() != expected.get_shape():
            raise CaptureError(
                f"internal error: {target} translated to {got}, expected {expected}"
                + (f" (at {self.loc})" if self.loc else "")
            )
        if got.element_type != expected.element_type:
            value = self.emit(t.ToOp(value, expected.element_type))
        return value

    # -- helpers for converters ------------------------------------------------------------

    def emit(self, op: t.TorchOp) -> SSAValue:
        """Append ``op`` (with the current source location) and return its result."""
        if self.loc is not None:
            op.location = FileLineColLoc(StringAttr(self.loc.file), IntAttr(self.loc.line),
                                         IntAttr(1))
        self.block.add_op(op)
        return op.results[0]

    def value(self, arg: Any) -> SSAValue:
        """The SSA value of a graph node argument."""
        name = getattr(arg, "name", None)
        if name is None or name not in self.values:
            raise CaptureError(f"expected a tensor argument, got {arg!r}")
        return self.values[name]

    def constant(self, scalar: float, element: Attribute) -> SSAValue:
        """A (shared) rank-0 ``torch.constant`` holding ``scalar``."""
        key = (repr(float(scalar)), str(element))  # repr: -0.0 is not 0.0
        if key not in self.constants:
            saved, self.loc = self.loc, None
            self.constants[key] = self.emit(t.ConstantOp(float(scalar), element))
            self.loc = saved
        return self.constants[key]

    def operand(self, arg: Any, element: Attribute) -> SSAValue:
        """A tensor or Python-scalar argument as a value of element type ``element``."""
        if isinstance(arg, bool | int | float):
            return self.constant(float(arg), element)
        value = self.value(arg)
        return self.cast(value, element)

    def cast(self, value: SSAValue, element: Attribute) -> SSAValue:
        typ = value.type
        assert isinstance(typ, TensorType)
        if typ.element_type == element:
            return value
        return self.emit(t.ToOp(value, element))


def _flatten(args: Any) -> list[Any]:
    if isinstance(args, list | tuple):
        return [x for a in args for x in _flatten(a)]
    return [args]


def _bind(node: Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound: dict[str, Any] = {}
    for k, arg in enumerate(schema.arguments):
        if k < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[k]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def _out_element(node: Node) -> Attribute:
    return element_type(node.meta["val"].dtype)


def _out_shape(node: Node) -> list[int]:
    """The node's result shape, symbolic extents as ``?``."""
    return _static_or_dynamic(node.meta["val"].shape)


def _is_symbolic(extent: Any) -> bool:
    """Whether a torch extent is symbolic (a ``SymInt`` whose value is not a number)."""
    import torch

    return isinstance(extent, torch.SymInt) and not extent.node.expr.is_number


def _is_size(node: Node) -> bool:
    """Whether ``node`` computes a size (``sym_size``, ``SymInt`` arithmetic), not a tensor."""
    import torch

    return isinstance(node.meta.get("val"), torch.SymInt | int) and not isinstance(
        node.meta.get("val"), bool)


def _rank(value: SSAValue) -> int:
    typ = value.type
    assert isinstance(typ, TensorType)
    return typ.get_num_dims()


def _shape(value: SSAValue) -> tuple[int, ...]:
    typ = value.type
    assert isinstance(typ, TensorType)
    return tuple(typ.get_shape())


def _element(value: SSAValue) -> Attribute:
    typ = value.type
    assert isinstance(typ, TensorType)
    return typ.element_type


# --- converters: elementwise --------------------------------------------------------------------


def _binary(op: type[t.BinaryOp], tr: _Translator, node: Node, lhs: Any, rhs: Any) -> SSAValue:
    element = _out_element(node)
    return tr.emit(op(tr.operand(lhs, element), tr.operand(rhs, element)))


@_converts("aten.add.Tensor", "aten.add.Scalar")
def _add(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary_scaled(t.AddOp, tr, node, a["self"], a["other"], a.get("alpha"))


@_converts("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary_scaled(t.SubOp, tr, node, a["self"], a["other"], a.get("alpha"))


@_converts("aten.rsub.Tensor", "aten.rsub.Scalar")
def _rsub(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary_scaled(t.SubOp, tr, node, a["other"], a["self"], a.get("alpha"))


def _binary_scaled(op: type[t.BinaryOp], tr: _Translator, node: Node, lhs: Any, rhs: Any,
                   alpha: Any) -> SSAValue:
    element = _out_element(node)
    lhs_v = tr.operand(lhs, element)
    if alpha is None or alpha == 1:
        rhs_v = tr.operand(rhs, element)
    elif isinstance(rhs, bool | int | float):
        rhs_v = tr.constant(rhs * alpha, element)
    else:
        rhs_v = tr.emit(t.MulOp(tr.operand(rhs, element), tr.constant(alpha, element)))
    return tr.emit(op(lhs_v, rhs_v))


@_converts("aten.mul.Tensor", "aten.mul.Scalar")
def _mul(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary(t.MulOp, tr, node, a["self"], a["other"])


@_converts("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    if a.get("rounding_mode") is not None:
        raise CaptureError(f"division with rounding_mode={a['rounding_mode']!r} is unsupported"
                           + (f" at {tr.loc}" if tr.loc else ""))
    return _binary(t.DivOp, tr, node, a["self"], a["other"])


@_converts("aten.maximum.default", "aten.max.other")
def _maximum(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary(t.MaximumOp, tr, node, a["self"], a["other"])


@_converts("aten.minimum.default", "aten.min.other")
def _minimum(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary(t.MinimumOp, tr, node, a["self"], a["other"])


def _clamped(tr: _Translator, node: Node, x: Any, low: Any, high: Any) -> SSAValue:
    """PyTorch's ``clamp``, ``min(max(x, low), high)``: a ``torch.maximum`` with ``low``, then
    a ``torch.minimum`` with ``high`` (a bound that is ``None`` adds no op), all operands in
    the result's element type. Both ops propagate NaN, so a NaN in ``x`` or in a bound is NaN
    in the result, and ``low > high`` gives ``high``, as in PyTorch."""
    element = _out_element(node)
    out = tr.operand(x, element)
    if low is not None:
        out = tr.emit(t.MaximumOp(out, tr.operand(low, element)))
    if high is not None:
        out = tr.emit(t.MinimumOp(out, tr.operand(high, element)))
    return out


@_converts("aten.clamp.default", "aten.clamp.Tensor", "aten.clip.default", "aten.clip.Tensor")
def _clamp(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _clamped(tr, node, a["self"], a.get("min"), a.get("max"))


@_converts("aten.clamp_min.default", "aten.clamp_min.Tensor")
def _clamp_min(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _clamped(tr, node, a["self"], a["min"], None)


@_converts("aten.clamp_max.default", "aten.clamp_max.Tensor")
def _clamp_max(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _clamped(tr, node, a["self"], None, a["max"])


@_converts("aten.hardtanh.default")
def _hardtanh(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _clamped(tr, node, a["self"], a["min_val"], a["max_val"])


@_converts("aten.relu6.default")
def _relu6(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _clamped(tr, node, a["self"], 0, 6)


@_converts("aten.reciprocal.default")
def _reciprocal(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary(t.DivOp, tr, node, 1.0, a["self"])


def _unary(op: type[t.UnaryOp]) -> Converter:
    def convert(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
        return tr.emit(op(tr.operand(a["self"], _out_element(node))))

    return convert


for _name, _op in t.UNARY_OPS.items():
    _CONVERTERS[f"aten.{_name}.default"] = _unary(_op)


@_converts("aten.pow.Tensor_Scalar")
def _pow(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    exponent = a["exponent"]
    if not isinstance(exponent, bool | int | float):
        raise CaptureError(f"pow with a non-constant exponent {exponent!r} is unsupported")
    return tr.emit(t.PowOp(tr.operand(a["self"], _out_element(node)), float(exponent)))


@_converts("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.type_as.default")
def _to(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return tr.cast(tr.value(a["self"]), _out_element(node))


def _example(arg: Any) -> Any:
    """The example value of a graph node argument (its fake tensor), or the Python scalar."""
    meta = getattr(arg, "meta", None)
    return arg if meta is None else meta.get("val")


def _promoted(lhs: Any, rhs: Any) -> Attribute:
    """The element type PyTorch promotes the two (tensor or scalar) operands to."""
    import torch

    a, b = _example(lhs), _example(rhs)
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        raise CaptureError(f"expected a tensor operand, got {lhs!r} and {rhs!r}")
    return element_type(torch.result_type(a, b))  # type: ignore[arg-type]


def _compare(op: type[t.CompareOp]) -> Converter:
    def convert(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
        element = _promoted(a["self"], a["other"])
        return tr.emit(op(tr.operand(a["self"], element), tr.operand(a["other"], element)))

    return convert


for _name, _cmp in t.COMPARE_OPS.items():
    _CONVERTERS[f"aten.{_name}.Tensor"] = _CONVERTERS[f"aten.{_name}.Scalar"] = _compare(_cmp)

_BOOL = IntegerType(1)


@_converts("aten.logical_and.default", "aten.logical_or.default")
def _logical(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    op = t.LogicalAndOp if "and" in str(node.target) else t.LogicalOrOp
    return tr.emit(op(tr.operand(a["self"], _BOOL), tr.operand(a["other"], _BOOL)))


@_converts("aten.__and__.Tensor", "aten.bitwise_and.Tensor", "aten.__or__.Tensor",
           "aten.bitwise_or.Tensor")
def _bitwise(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    if _out_element(node) != _BOOL:
        raise CaptureError(f"bitwise logic on integers is unsupported ({node.target})"
                           + (f" at {tr.loc}" if tr.loc else ""))
    return _logical(tr, node, a)


@_converts("aten.logical_not.default", "aten.bitwise_not.default")
def _logical_not(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    if "bitwise" in str(node.target) and _out_element(node) != _BOOL:
        raise CaptureError("bitwise_not on integers is unsupported"
                           + (f" at {tr.loc}" if tr.loc else ""))
    return tr.emit(t.LogicalNotOp(tr.operand(a["self"], _BOOL)))


@_converts("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
           "aten.where.Scalar")
def _where(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    element = _out_element(node)
    return tr.emit(t.WhereOp(tr.operand(a["condition"], _BOOL), tr.operand(a["self"], element),
                             tr.operand(a["other"], element)))


@_converts("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    element = _out_element(node)
    return tr.emit(t.WhereOp(tr.operand(a["mask"], _BOOL), tr.operand(a["value"], element),
                             tr.operand(a["self"], element)))


def _filled(tr: _Translator, node: Node, value: Any) -> SSAValue:
    """A constant broadcast to the node's result shape."""
    if not isinstance(value, bool | int | float):
        raise CaptureError(f"fill value {value!r} is not a Python scalar")
    element = _out_element(node)
    constant = tr.constant(float(value), element)
    shape = _out_shape(node)
    sizes = tr.sizes(node.meta["val"].shape)
    return tr.emit(t.ExpandOp(constant, shape, sizes)) if shape else constant


@_converts("aten.ones.default", "aten.new_ones.default", "aten.ones_like.default")
def _ones(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _filled(tr, node, 1)


@_converts("aten.zeros.default", "aten.new_zeros.default", "aten.zeros_like.default")
def _zeros(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _filled(tr, node, 0)


@_converts("aten.full.default", "aten.new_full.default", "aten.full_like.default")
def _full(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _filled(tr, node, a["fill_value"])


@_converts("aten.scalar_tensor.default")
def _scalar_tensor(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _filled(tr, node, a["s"])


@_converts("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    bounds = [a.get("start", 0), _example(a["end"]), a.get("step", 1)]
    length = node.meta["val"].shape[0]
    if _is_symbolic(length):
        start, step = (_example(b) for b in (bounds[0], bounds[2]))
        if not all(isinstance(b, int) for b in (start, 1 if step is None else step)):
            raise CaptureError("arange with a symbolic extent needs an integer start and step"
                               + (f" at {tr.loc}" if tr.loc else ""))
        return tr.emit(t.ArangeOp(int(start), tr.index(length), 1 if step is None else step,
                                  _out_element(node)))
    values: list[int] = []
    for bound in bounds:
        bound = 1 if bound is None else bound
        if not isinstance(bound, bool | int | float) or float(bound) != int(bound):
            raise CaptureError(f"arange needs integer bounds, got {bound!r}"
                               + (f" at {tr.loc}" if tr.loc else ""))
        values.append(int(bound))
    start, end, step = values
    return tr.emit(t.ArangeOp(start, end, step, _out_element(node)))


# --- converters: embedding and attention --------------------------------------------------------


@_converts("aten.embedding.default")
def _embedding(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return tr.emit(t.EmbeddingOp(tr.value(a["weight"]), tr.value(a["indices"])))


@_converts("aten.scaled_dot_product_attention.default", "llmopt.sdpa.default")
def _sdpa(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    import math

    if a.get("dropout_p"):
        raise CaptureError(f"scaled_dot_product_attention with dropout_p={a['dropout_p']} is "
                           "unsupported" + (f" at {tr.loc}" if tr.loc else ""))
    element = _out_element(node)
    q, k, v = (tr.operand(a[n], element) for n in ("query", "key", "value"))
    mask = None
    if a.get("attn_mask") is not None:
        mask = tr.value(a["attn_mask"])
        if _element(mask) != _BOOL:
            mask = tr.cast(mask, element)
    scale = a.get("scale")
    if scale is None:
        if _shape(q)[-1] == DYNAMIC_INDEX:
            raise CaptureError("scaled_dot_product_attention over a symbolic head dim needs an "
                               "explicit scale" + (f" at {tr.loc}" if tr.loc else ""))
        scale = 1.0 / math.sqrt(_shape(q)[-1])
    return tr.emit(t.SdpaOp(q, k, v, mask, is_causal=bool(a.get("is_causal")),
                            scale=float(scale), enable_gqa=bool(a.get("enable_gqa"))))


# --- converters: reductions ---------------------------------------------------------------------


def _reduction(op: type[t.ReductionOp]) -> Converter:
    def convert(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
        x = tr.value(a["self"])
        dims = a.get("dim")
        if dims is None or (isinstance(dims, list | tuple) and not dims):
            dims = list(range(_rank(x)))
        elif isinstance(dims, int):
            dims = [dims]
        if a.get("dtype") is not None:
            x = tr.cast(x, element_type(a["dtype"]))
        if not dims:  # a rank-0 input reduces to itself
            return x
        return tr.emit(op(x, list(dims), bool(a.get("keepdim") or False)))

    return convert


_converts("aten.sum.dim_IntList", "aten.sum.default")(_reduction(t.SumOp))
_converts("aten.mean.dim", "aten.mean.default")(_reduction(t.MeanOp))
_converts("aten.amax.default", "aten.max.default")(_reduction(t.AmaxOp))
_converts("aten.amin.default", "aten.min.default")(_reduction(t.AminOp))


_I64 = IntegerType(64)


def _first_extreme(tr: _Translator, x: SSAValue, dim: int, keepdim: bool, *, largest: bool
                   ) -> tuple[SSAValue, SSAValue]:
    """The maximum (``largest``) or minimum of ``x`` along ``dim``, with ``dim`` kept
    (extent 1), and the first index that holds it, an ``i64`` tensor with ``dim`` kept as
    ``keepdim`` says::

        m     = amax(x, dim, keepdim=True)            # amin for the minimum; NaN-propagating
        hit   = (x == m) | (x != x)                   # the extreme, or a NaN (floats only)
        index = amin(where(hit, iota, N), dim, keepdim)

    ``iota`` is ``torch.arange`` of the extent ``N`` along ``dim`` (a ``reshape`` puts it on
    that dim; ``where`` broadcasts it): the smallest index that hits is PyTorch's first
    index of the maximum, or of the first NaN when the row holds one, where ``amax`` is NaN
    too. ``N`` is never chosen, since every row holds its extreme."""
    extent = _shape(x)[dim]
    m = tr.emit((t.AmaxOp if largest else t.AminOp)(x, [dim], True))
    hit = tr.emit(t.EqOp(x, m))
    if t.is_float(_element(x)):
        hit = tr.emit(t.LogicalOrOp(hit, tr.emit(t.NeOp(x, x))))
    iota = tr.emit(t.ArangeOp(0, extent, 1, _I64))
    trailing = _rank(x) - 1 - dim
    if trailing:
        iota = tr.emit(t.ReshapeOp(iota, [extent] + [1] * trailing))
    first = tr.emit(t.WhereOp(hit, iota, tr.constant(extent, _I64)))
    return m, tr.emit(t.AminOp(first, [dim], keepdim))


def _extreme_and_index(tr: _Translator, node: Node, a: dict[str, Any], *, largest: bool
                       ) -> tuple[SSAValue, SSAValue]:
    """:func:`_first_extreme` of ``a["self"]`` along ``a["dim"]`` (every element, flattened,
    when it is ``None``), each reshaped to the shape of the node's result (its first one for
    ``max.dim``/``min.dim``). ``i1`` tensors compare as ``i32``."""
    import math

    x = tr.value(a["self"])
    if _element(x) == _BOOL:
        x = tr.cast(x, IntegerType(32))
    val = node.meta["val"]
    out = val[0] if isinstance(val, list | tuple) else val
    example = _example(a["self"])
    dim, keepdim = a.get("dim"), bool(a.get("keepdim"))
    if dim is None or _rank(x) == 0:
        if any(_is_symbolic(e) for e in example.shape):
            raise CaptureError(f"{node.target} over every element of a tensor with a symbolic "
                               "extent is not supported" + (f" at {tr.loc}" if tr.loc else ""))
        numel = math.prod(_shape(x))
        if _shape(x) != (numel,):
            x = tr.emit(t.ReshapeOp(x, [numel]))
        dim, keepdim = 0, False
    else:
        dim = t.norm_dim(int(dim), _rank(x))
        if _is_symbolic(example.shape[dim]):
            raise CaptureError(f"{node.target} along the symbolic dim {dim} is not supported"
                               + (f" at {tr.loc}" if tr.loc else ""))
    m, index = _first_extreme(tr, x, dim, keepdim, largest=largest)
    shape, sizes = _static_or_dynamic(out.shape), tr.sizes(out.shape)
    m, index = (v if list(_shape(v)) == shape else tr.emit(t.ReshapeOp(v, shape, sizes))
                for v in (m, index))
    return m, index


@_converts("aten.argmax.default", "aten.argmin.default")
def _argmax_argmin(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    """``argmax``/``argmin``: the index of :func:`_first_extreme` (see there)."""
    return _extreme_and_index(tr, node, a, largest="argmax" in str(node.target))[1]


def _max_min_dim(tr: _Translator, node: Node, a: dict[str, Any]) -> list[SSAValue]:
    """``x.max(dim)``/``x.min(dim)``: the values (``amax``/``amin``) and the indices (the
    ``argmax``/``argmin`` of :func:`_first_extreme`), from one ``amax``/``amin``."""
    return list(_extreme_and_index(tr, node, a, largest="max" in str(node.target)))


@_converts("aten.softmax.int", "aten._softmax.default", "aten._safe_softmax.default")
def _softmax(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    x = tr.cast(tr.value(a["self"]), _out_element(node))
    return tr.emit(t.SoftmaxOp(x, int(a["dim"])))


@_converts("aten.rms_norm.default")
def _rms_norm(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    import torch

    x = tr.value(a["input"])
    eps = a.get("eps")
    if eps is None:
        eps = torch.finfo(node.args[0].meta["val"].dtype).eps  # type: ignore[union-attr]
    weight = None if a.get("weight") is None else tr.operand(a["weight"], _out_element(node))
    return tr.emit(t.RmsNormOp(tr.cast(x, _out_element(node)), weight,
                               len(a["normalized_shape"]), float(eps)))


# --- converters: contractions -------------------------------------------------------------------


@_converts("aten.linear.default")
def _linear(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    element = _out_element(node)
    bias = None if a.get("bias") is None else tr.operand(a["bias"], element)
    return tr.emit(t.LinearOp(tr.operand(a["input"], element), tr.operand(a["weight"], element),
                              bias))


@_converts("aten.matmul.default", "aten.mm.default")
def _matmul(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary(t.MatmulOp, tr, node, a["self"], a.get("other", a.get("mat2")))  # type: ignore[arg-type]


@_converts("aten.bmm.default")
def _bmm(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _binary(t.BmmOp, tr, node, a["self"], a["mat2"])  # type: ignore[arg-type]


# --- converters: data movement ------------------------------------------------------------------


@_converts(
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
    "aten.flatten.using_ints", "aten.unflatten.int", "aten.squeeze.dim", "aten.squeeze.dims",
    "aten.squeeze.default",
)  # fmt: skip
def _reshape(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    x = tr.value(a["self"])
    shape = _out_shape(node)
    if list(_shape(x)) == shape and not _input_extents_differ(node, a["self"]):
        return x
    return tr.emit(t.ReshapeOp(x, shape, tr.sizes(node.meta["val"].shape)))


@_converts("aten.transpose.int")
def _transpose(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return tr.emit(t.TransposeOp(tr.value(a["self"]), int(a["dim0"]), int(a["dim1"])))


@_converts("aten.t.default", "aten.numpy_T.default")
def _t(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    x = tr.value(a["self"])
    if _rank(x) < 2:
        return x
    if _rank(x) == 2:
        return tr.emit(t.TransposeOp(x, 0, 1))
    return tr.emit(t.PermuteOp(x, list(reversed(range(_rank(x))))))


@_converts("aten.permute.default")
def _permute(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return tr.emit(t.PermuteOp(tr.value(a["self"]), [int(d) for d in a["dims"]]))


@_converts("aten.unsqueeze.default")
def _unsqueeze(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return tr.emit(t.UnsqueezeOp(tr.value(a["self"]), int(a["dim"])))


@_converts("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default")
def _expand(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    return _broadcast(tr, node, tr.value(a["self"]), a["self"])


def _broadcast(tr: _Translator, node: Node, x: SSAValue, source: Any) -> SSAValue:
    """``x`` (the value of graph argument ``source``) broadcast to ``node``'s result shape;
    ``x`` itself when it already has it."""
    shape = _out_shape(node)
    if list(_shape(x)) == shape and not _input_extents_differ(node, source):
        return x
    return tr.emit(t.ExpandOp(x, shape, tr.sizes(node.meta["val"].shape)))


def _input_extents_differ(node: Node, source: Any) -> bool:
    """Whether the symbolic extents of ``source`` and of ``node``'s result differ (two
    ``?`` types can hold different lengths)."""
    before = [e.node.expr for e in _example(source).shape if _is_symbolic(e)]
    after = [e.node.expr for e in node.meta["val"].shape if _is_symbolic(e)]
    return before != after


def _clamp_slice(extent: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Python slice bounds (negative, out of range, ``None``) as ``0 <= start <= end <= extent``."""
    start = 0 if start is None else start
    end = extent if end is None else end
    start = min(max(start + extent if start < 0 else start, 0), extent)
    end = min(max(end + extent if end < 0 else end, 0), extent)
    return start, max(start, end)


@_converts("aten.slice.Tensor")
def _slice(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    x = tr.value(a["self"])
    dim = t.norm_dim(int(a["dim"]), _rank(x))
    step = int(a.get("step") or 1)
    extent = _example(a["self"]).shape[dim]
    start, end = _example(a.get("start")), _example(a.get("end"))
    if any(_is_symbolic(v) for v in (extent, start, end)):
        return _symbolic_slice(tr, node, x, dim, (extent, start, end), step)
    start, end = _clamp_slice(_shape(x)[dim], start, end)
    if start == 0 and end == _shape(x)[dim] and step == 1:
        return x
    return tr.emit(t.SliceOp(x, dim, start, end, step))


def _symbolic_slice(tr: _Translator, node: Node, x: SSAValue, dim: int,
                    bounds: tuple[Any, Any, Any], step: int) -> SSAValue:
    """A slice whose extent or bounds are symbolic: bounds as ``index`` operands (Python's
    negative and open bounds resolved against the symbolic extent, as export did)."""
    import sympy

    length = node.meta["val"].shape[dim]
    if not _is_symbolic(length):
        raise CaptureError(f"a slice of a symbolic extent to the static length {length} is not "
                           "supported" + (f" at {tr.loc}" if tr.loc else ""))
    extent, lo, hi = _symbolic_bounds(*bounds)
    if sympy.simplify(lo) == 0 and sympy.simplify(hi - extent) == 0 and step == 1:
        return x
    return tr.emit(t.SliceOp(x, dim, tr.index(lo), tr.index(hi), step))


def _symbolic_bounds(extent: Any, start: Any, end: Any) -> tuple[Any, Any, Any]:
    """Python slice bounds over a symbolic extent as sympy expressions ``(extent, start,
    end)``: open bounds (``None``, export's ``2**63 - 1``) resolved to ``0`` and the extent,
    negative ones counted from the extent, as export did."""
    import sympy
    import torch

    extent, start, end = (b.node.expr if isinstance(b, torch.SymInt) else b
                          for b in (extent, start, end))

    def resolve(bound: Any, default: Any) -> Any:
        if bound is None or (isinstance(bound, int) and bound >= 2**62):
            return default
        if isinstance(bound, int) and bound < 0:
            return extent + bound
        return bound

    return extent, resolve(start, sympy.Integer(0)), resolve(end, extent)


@_converts("aten.select.int")
def _select(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    x = tr.value(a["self"])
    dim = t.norm_dim(int(a["dim"]), _rank(x))
    extent = _example(a["self"]).shape[dim]
    index = _example(a["index"])
    sizes = tr.sizes(node.meta["val"].shape)
    if _is_symbolic(extent) or _is_symbolic(index):
        import torch

        expr = index.node.expr if isinstance(index, torch.SymInt) else index
        if isinstance(expr, int) and expr < 0:
            expr = extent.node.expr + expr
        sliced = tr.emit(t.SliceOp(x, dim, tr.index(expr), tr.index(expr + 1), 1))
        return tr.emit(t.ReshapeOp(sliced, _out_shape(node), sizes))
    index = int(index)
    if index < 0:
        index += _shape(x)[dim]
    sliced = tr.emit(t.SliceOp(x, dim, index, index + 1, 1))
    return tr.emit(t.ReshapeOp(sliced, _out_shape(node), sizes))


def _split_parts(tr: _Translator, node: Node, a: dict[str, Any]) -> list[SSAValue]:
    """``split``/``chunk``/``unbind``: one slice per result (sizes from the exported results),
    reshaped where the result drops the dim (``unbind``)."""
    x = tr.value(a["self"])
    dim = t.norm_dim(int(a.get("dim") or 0), _rank(x))
    if _is_symbolic(_example(a["self"]).shape[dim]):
        raise CaptureError(f"splitting along the symbolic dim {dim} is not supported"
                           + (f" at {tr.loc}" if tr.loc else ""))
    shapes = [_static_or_dynamic(v.shape) for v in node.meta["val"]]
    parts: list[SSAValue] = []
    start = 0
    for shape, val in zip(shapes, node.meta["val"], strict=True):
        size = shape[dim] if len(shape) == _rank(x) else 1
        part = x
        if size != _shape(x)[dim]:
            part = tr.emit(t.SliceOp(x, dim, start, start + size, 1))
        if list(_shape(part)) != shape:
            part = tr.emit(t.ReshapeOp(part, shape, tr.sizes(val.shape)))
        parts.append(part)
        start += size
    return parts


_MULTI_CONVERTERS["aten.max.dim"] = _MULTI_CONVERTERS["aten.min.dim"] = _max_min_dim

for _name in ("aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default",
              "aten.unbind.int", "aten.unsafe_split.Tensor"):
    _MULTI_CONVERTERS[_name] = _split_parts


@_converts("aten.copy.default")
def _copy(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    """``self.copy_(src)`` made functional: ``src`` broadcast to ``self``'s shape, in its
    dtype (``self``'s values are not read)."""
    return _broadcast(tr, node, tr.cast(tr.value(a["src"]), _out_element(node)), a["src"])


@_converts("aten.slice_scatter.default")
def _slice_scatter(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    base = tr.value(a["self"])
    src = tr.cast(tr.value(a["src"]), _element(base))
    dim = t.norm_dim(int(a.get("dim") or 0), _rank(base))
    if int(a.get("step") or 1) != 1:
        raise CaptureError("slice_scatter with a step other than 1 is not supported"
                           + (f" at {tr.loc}" if tr.loc else ""))
    extent = _example(a["self"]).shape[dim]
    start, end = _example(a.get("start")), _example(a.get("end"))
    if any(_is_symbolic(v) for v in (extent, start, end)):
        _, lo, hi = _symbolic_bounds(extent, start, end)
        return tr.emit(t.SliceScatterOp(base, src, dim, tr.index(lo), tr.index(hi)))
    lo, hi = _clamp_slice(_shape(base)[dim], start, end)
    return tr.emit(t.SliceScatterOp(base, src, dim, lo, hi))


@_converts("aten.select_scatter.default")
def _select_scatter(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    """``select_scatter(base, src, dim, i)``: ``src`` with the dim put back, written over
    ``i : i + 1``."""
    base = tr.value(a["self"])
    dim = t.norm_dim(int(a["dim"]), _rank(base))
    src = tr.emit(t.UnsqueezeOp(tr.cast(tr.value(a["src"]), _element(base)), dim))
    extent, index = _example(a["self"]).shape[dim], _example(a["index"])
    if _is_symbolic(extent) or _is_symbolic(index):
        import torch

        expr = index.node.expr if isinstance(index, torch.SymInt) else index
        if isinstance(expr, int) and expr < 0:
            expr = extent.node.expr + expr
        return tr.emit(t.SliceScatterOp(base, src, dim, tr.index(expr), tr.index(expr + 1)))
    index = int(index) + (_shape(base)[dim] if int(index) < 0 else 0)
    return tr.emit(t.SliceScatterOp(base, src, dim, index, index + 1))


@_converts("aten.cat.default", "aten.concat.default")
def _cat(tr: _Translator, node: Node, a: dict[str, Any]) -> SSAValue:
    element = _out_element(node)
    # Legacy cat skips 1-D empty tensors.
    inputs = [tr.operand(x, element) for x in a["tensors"]]
    inputs = [v for v in inputs if _shape(v) != (0,) or _rank(v) == len(_out_shape(node))]
    if len(inputs) == 1:
        return inputs[0]
    return tr.emit(t.CatOp(inputs, int(a["dim"])))


__all__ = [
    "CaptureError", "CapturedProgram", "SourceLine", "capture", "element_type", "source_line",
    "supported_ops", "PARAM_ATTR", "INPUT_ATTR",
]  # fmt: skip
