"""CUDA graphs of a :class:`~llmopt.codegen.executor.CompiledProgram`: capture and replay.

With ``cuda_graph=True`` the first call copies the call's tensor arguments into static
buffers, runs the program once eagerly (warm-up, on a side stream) and captures it into a
``torch.cuda.CUDAGraph``; every later call copies its arguments into the static buffers and
replays the graph (one host call instead of one driver call per kernel). A call that passes
the static buffers themselves (:attr:`GraphReplay.static_inputs`) skips the copies. The
results are the graph's static output tensors, overwritten by the next call. A zeroed
allocation (``{llmopt.zeroed}``) the capture makes becomes a memset in the graph, so each
replay starts it at zero again (a symbolic program's flat buffers are zeroed once, when the
program is built, outside any capture).

A symbolic program has one graph per length seen, captured on that length's first call —
unless its launches do not depend on the lengths (``lengths-in-memory``: every kernel reads
them from a buffer the host writes, grids are at their maxima) and its results have static
shapes. Such a program is **one graph for every length** (:attr:`GraphReplay.one_graph`):
its static input buffers are sized for the symbols' maxima, a call's inputs are copied into
their prefix (a buffer with ``?`` extents is dense at the call's length), the host writes
the call's lengths (the program's ``memref.store`` steps, run before the replay rather than
captured), and the graph replays. A caller that passes prefixes of the static buffers
(``program.static_inputs[k][:n]`` for a buffer whose leading extent is the length, such as a
KV cache) copies nothing.

A launch of a kernel with tensor maps (``tma.load``) passes each map by value, encoded from
the buffer's address when the launch is captured (:mod:`llmopt.codegen.tensor_map`); the
graph keeps it, and replays read the same static buffers. A map of a buffer with ``?``
extents holds the call's extents, so a program with one has a graph per length.

Such a program can also run several calls from one graph
(:meth:`GraphReplay.capture_steps`): the calls are captured back to back on the static
buffers, each followed by the caller's own captured work (a decode step's greedy pick, written
into the next step's token input), and each call copies its lengths from a table on the
device, at a row a cursor in device memory gives and each call advances
(:class:`StepsGraph`): a replay only sets the cursor, and between its calls nothing
returns to the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llmopt.codegen.plan import (
    AllocStep,
    CopyStep,
    ExecutorError,
    HostPlan,
    LaunchStep,
    StoreStep,
)

if TYPE_CHECKING:
    from llmopt.codegen.symbolic import SymbolicHost

__all__ = ["GraphReplay", "StepsGraph", "length_free"]


def length_free(plan: HostPlan, host: SymbolicHost) -> bool:
    """Whether every call of a symbolic ``plan`` launches the same kernels with the same
    grids and arguments whatever its lengths, and returns buffers of static shapes: no
    launch takes a symbol or ``index`` arithmetic of one, or a tensor map of a buffer with
    ``?`` extents (the map holds the call's extents), no grid is computed, no launch sits
    under a host ``scf.if``, no host copy (whose size is the call's) runs."""
    varying = set(plan.symbols) | set(plan.computed)
    for step in plan.steps:
        if isinstance(step, CopyStep):
            return False
        if isinstance(step, LaunchStep) and (varying & set(step.args) or any(
                e < 0 for m in step.tensor_maps for e in m.buffer.get_shape())):
            return False
    if any(launch.grid_size is not None or guard for launch, guard in host.launches):
        return False
    shapes = {s.slot: s.shape for s in plan.steps if isinstance(s, AllocStep)}
    return not any(root in shapes and any(e < 0 for e in shapes[root])
                   for root in plan.view_roots(plan.results))


def _into_prefix(flat: Any, arg: Any) -> Any:
    """``arg`` copied into the start of the flat buffer ``flat``, densely at its shape."""
    staged = flat[: arg.numel()].view(arg.shape)
    staged.copy_(arg)
    return staged


class StepsGraph:
    """``steps`` calls of a one-graph program in one CUDA graph (see
    :meth:`GraphReplay.capture_steps`)."""

    def __init__(self, graph: Any, cursor: Any, steps: int, rows: int) -> None:
        self._graph = graph
        self._cursor = cursor  # the row of the lengths table the next call reads
        self.steps = steps
        self._rows = rows

    def replay(self, row: int) -> None:
        """Replay the graph, its calls at rows ``row, row + 1, …`` of the lengths table
        (without synchronising: the host writes nothing the graph reads but the row)."""
        if not 0 <= row <= self._rows - self.steps:
            raise ExecutorError(f"{self.steps} calls from row {row} pass the lengths "
                                f"table's {self._rows} rows")
        self._cursor.fill_(row)
        self._graph.replay()


class GraphReplay:
    """The CUDA-graph side of :class:`~llmopt.codegen.executor.CompiledProgram` (see the
    module docstring); the program's attributes it uses are declared below."""

    plan: HostPlan
    symbolic: SymbolicHost | None
    check: bool
    device: Any
    _call_slots: tuple[int, ...]
    _expected: list[tuple[str, Any, tuple[int, ...] | None]]
    _buffers: dict[int, Any]
    _bind: Callable[[Sequence[Any]], list[Any]]
    _run: Callable[..., tuple[Any, ...]]
    _check_arg: Callable[[int, Any], None]
    symbols_of: Callable[[Sequence[Any]], dict[str, int]]
    _layout_for: Callable[[dict[str, int]], Any]

    def _init_graphs(self) -> None:
        self._graph: Any = None
        self._static: dict[int, Any] = {}
        self._graph_scalars: dict[int, Any] = {}
        self._graph_outputs: tuple[Any, ...] = ()
        self._graphs: dict[tuple[int, ...], tuple[Any, ...]] = {}
        self.one_graph = self.symbolic is not None and length_free(self.plan, self.symbolic)
        """Whether one CUDA graph serves every length (see the module docstring)."""
        self._flat: dict[int, Any] = {}  # one graph: call slot -> flat static buffer
        self._graph_env: list[Any] = []  # the captured call's bound arguments
        stores = [s for s in self.plan.steps if isinstance(s, StoreStep)]
        # (the flat buffer's slot, the position, the stored value's slot) of each host store
        self._stores = list(zip(self.plan.view_roots(s.target for s in stores),
                                (s.index for s in stores), (s.value for s in stores),
                                strict=True))

    def reset_graph(self) -> None:
        """Drop the captured CUDA graph (the next call with ``cuda_graph`` captures anew)."""
        self._graph = None
        self._static = {}
        self._graph_scalars = {}
        self._graph_outputs = ()
        self._graphs = {}
        self._flat = {}
        self._graph_env = []

    @property
    def static_inputs(self) -> tuple[Any, ...]:
        """The tensors the captured CUDA graph reads its inputs from, in call order (scalar
        arguments as captured; with :attr:`one_graph`, buffers with ``?`` extents at the
        symbols' maxima). A call that passes these very tensors (or, with ``one_graph``,
        their prefixes) replays the graph without copying its inputs. Empty before the first
        call captures."""
        if self._graph is None:
            return ()
        return tuple(self._static.get(k, self._graph_scalars.get(k)) for k in self._call_slots)

    def replay_graph(self) -> None:
        """Replay the current CUDA graph (the last call's length) as it is: no copies of
        inputs, no lengths written; for timing the graph alone.

        Raises:
            ExecutorError: no graph has been captured yet.
        """
        if self._graph is None:
            raise ExecutorError("no CUDA graph captured yet: call the program first")
        self._graph.replay()

    @property
    def graph_captured(self) -> bool:
        """Whether a CUDA graph has been captured."""
        return self._graph is not None

    def _staged(self, k: int, arg: Any) -> Any:
        """Where the graph reads argument ``k`` of this call from (``arg`` copied there,
        unless it is that very storage)."""
        if k in self._flat:
            flat = self._flat[k]
            if arg.data_ptr() == flat.data_ptr():
                return arg
            if self.check:
                self._check_arg(k, arg)
            return _into_prefix(flat, arg)
        static = self._static[k]
        if arg is not static:
            if self.check:
                self._check_arg(k, arg)
            static.copy_(arg)
        return static

    def _copy_in(self, args: Sequence[Any]) -> list[Any]:
        staged = []
        for k, arg in zip(self._call_slots, args, strict=True):
            if k in self._graph_scalars:
                if arg != self._graph_scalars[k]:
                    raise ExecutorError(
                        f"argument {k} ('{self.plan.inputs[k][0]}') is {arg!r}, but the CUDA "
                        f"graph was captured with {self._graph_scalars[k]!r}; call "
                        "reset_graph() to capture again"
                    )
                staged.append(arg)
            else:
                staged.append(self._staged(k, arg))
        return staged

    def _copy_out(self, args: Sequence[Any], staged: Sequence[Any]) -> None:
        for k, arg, where in zip(self._call_slots, args, staged, strict=True):
            if k in self.plan.written_inputs and where is not arg:
                arg.copy_(where)

    def _write_lengths(self, symbols: dict[str, int]) -> None:
        """The program's host stores (the lengths its kernels read) at ``symbols``."""
        scalars = self._layout_for(symbols).scalars
        for buffer, position, value in self._stores:
            self._buffers[buffer][position].fill_(scalars[value])

    def _replay(self, args: Sequence[Any]) -> tuple[Any, ...]:
        if self.one_graph:
            symbols = self.symbols_of(args)
            if self._graph is None:
                self._capture(args)
            self._write_lengths(symbols)
        elif self.symbolic is not None:
            key = tuple(self.symbols_of(args).values())
            if key in self._graphs:
                (self._graph, self._static, self._graph_scalars,
                 self._graph_outputs) = self._graphs[key]
            else:
                self._capture(args)
                self._graphs[key] = (self._graph, self._static, self._graph_scalars,
                                     self._graph_outputs)
        elif self._graph is None:
            self._capture(args)
        staged = self._copy_in(args)
        self._graph.replay()
        self._copy_out(args, staged)
        return self._graph_outputs

    def lengths_table(self, rows: Sequence[dict[str, int]]) -> Any:
        """The values the host's stores write at each of ``rows`` (the symbols of a call
        each), as a device tensor of one row per call and one column per store: what the
        calls of a :meth:`capture_steps` graph copy into the lengths buffer."""
        import torch

        assert self.symbolic is not None
        dtype = (self._buffers[self._stores[0][0]].dtype if self._stores else torch.int64)
        names = {symbol.arg: name for name, symbol in self.symbolic.symbols.items()}
        if all(value in names for _, _, value in self._stores):  # the symbols themselves
            values = [[symbols[names[value]] for _, _, value in self._stores]
                      for symbols in rows]
        else:
            layouts = (self._layout_for(symbols).scalars for symbols in rows)
            values = [[int(scalars[value]) for _, _, value in self._stores]
                      for scalars in layouts]
        return torch.tensor(values, dtype=dtype, device=self.device).view(len(rows), -1)

    def capture_steps(self, steps: int, after: Callable[[int, tuple[Any, ...]], None],
                      table: Any) -> StepsGraph:
        """A CUDA graph of ``steps`` calls of this program back to back, on the static buffers
        of the graph the first call captured (:attr:`static_inputs`), call ``i`` followed by
        ``after(i, results)``, whose CUDA work (PyTorch ops on the results and the static
        inputs) is captured too: a decode step's greedy pick written into the next call's
        token input, say. Call ``i`` reads its lengths from row ``r + i`` of ``table``
        (:meth:`lengths_table`), ``r`` being the row :meth:`StepsGraph.replay` is given: a
        cursor in device memory, which each call advances, so the host writes one number a
        replay and never waits for the GPU.

        Raises:
            ExecutorError: the program is not :attr:`one_graph`, or no call has captured
                its graph yet.
        """
        import torch

        if not self.one_graph:
            raise ExecutorError("only a program whose launches take no length (one_graph) "
                                "runs several calls from one CUDA graph")
        if self._graph is None:
            raise ExecutorError("no CUDA graph captured yet: call the program first")
        targets = [self._buffers[buffer][position] for buffer, position, _ in self._stores]
        cursor = torch.zeros(1, dtype=torch.long, device=self.device)
        with torch.cuda.device(self.device):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(steps):
                    if targets:
                        row = table.index_select(0, cursor)[0]
                        for j, target in enumerate(targets):
                            target.copy_(row[j])
                    after(i, self._run(list(self._graph_env), stores=False))
                    cursor.add_(1)
        return StepsGraph(graph, cursor, steps, table.shape[0])

    def _static_buffer(self, k: int, arg: Any) -> Any:
        """A static buffer for tensor argument ``k``: a clone of ``arg``; with
        :attr:`one_graph` and ``?`` extents, a flat buffer for the maxima, ``arg`` copied
        into its prefix."""
        import torch

        shape = self._expected[k][2]
        if not (self.one_graph and shape is not None and any(e < 0 for e in shape)):
            self._static[k] = arg.clone()
            return self._static[k]
        assert self.symbolic is not None
        maxima = self.symbolic.max_input_shape(k)
        flat = torch.empty(math.prod(maxima), dtype=arg.dtype, device=arg.device)
        self._flat[k] = flat
        self._static[k] = flat.view(maxima)
        return _into_prefix(flat, arg)

    def _capture(self, args: Sequence[Any]) -> None:
        """Static buffers, one eager warm-up run on a side stream, then the capture (without
        the host stores: a replay writes the lengths first)."""
        import torch

        env = self._bind(args)
        self._static = {}
        self._graph_scalars = {}
        self._flat = {}
        for k in self._call_slots:
            if self._expected[k][2] is None:
                self._graph_scalars[k] = env[k]
            else:
                env[k] = self._static_buffer(k, env[k])
        with torch.cuda.device(self.device):
            current = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                self._run(list(env))  # warm-up: first launches, shared-memory opt-ins
            current.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = self._run(list(env), stores=not self.one_graph)
        self._graph = graph
        self._graph_outputs = outputs
        self._graph_env = env
