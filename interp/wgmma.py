"""Interpretation of the ``wgmma`` dialect (warpgroup tensor-core products) at Tile and Kernel IR.

The ops are warpgroup-collective (:mod:`llmopt.dialects.wgmma` gives the layouts): the threads
of a block, the frame's last axis, form warpgroups of 128 consecutive threads, a block whose
size is not a multiple of 128 cannot run them, and a warpgroup runs each op with all of its
threads or none; any other mask is a divergence error.

``wgmma.fence`` does nothing here and ``wgmma.wait`` passes its accumulators through: a
``wgmma.mma``'s values are computed when it is issued, so a result read before its wait is
not detected. Its tiles, though, count as read until the wait that retires its group: at
Kernel IR ``wgmma.commit`` closes the group of the products issued since the last one, and
``wgmma.wait N`` reads the tiles of every group but the newest ``N`` again (race-checked,
values unused), so a write after a barrier into a tile that a product still in flight reads
is a race, as on the GPU, where the tensor core may read the tile until the wait.
``wgmma.mma`` takes its indices from the warpgroup's threads, which must agree, with row
indices multiples of 8 and ``k`` indices of 16, and reads the ``64 × 16`` box of ``a`` (or
gathers it from the four pairs of each thread of an ``a`` in registers) and
the ``N × 16`` box of ``b`` (an N-major ``b``: its ``16 × N`` box) the way a load of its level
does (bounds-checked; at Kernel IR
race-checked too, each element as read by two threads of the warpgroup, so that a write by
any one thread since the last barrier is a race). The tiles' swizzle is a physical layout
only: the reads see logical elements. The tensor core is modelled as in
:mod:`llmopt.interp.mma`: products exact, their sum with ``C`` rounded once to ``f32``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue

from llmopt.dialects.mma import pair_element
from llmopt.dialects.wgmma import ATOM_COLUMNS, SWIZZLE_ROWS, WARPGROUP, K, M, MmaOp, WaitOp
from llmopt.interp._core import DivergenceError, InterpretError, error
from llmopt.interp.kernel import KernelEvaluator, read
from llmopt.interp.mma import half_a_fragment
from llmopt.interp.simt import SimtEvaluator, buffer_of, simt_impl

_LANE = np.arange(WARPGROUP)
_ROWS = _LANE // 32 * 16 + _LANE % 32 // 4
"""The accumulator row of each thread of a warpgroup, before the ``+ 8`` of odd pairs."""
_COLS = 2 * (_LANE % 4)
"""The accumulator column of each thread of a warpgroup, before the ``8``-column block."""


def _warpgroups(ev: SimtEvaluator, op: Operation) -> tuple[tuple[int, ...], np.ndarray]:
    """The frame with its thread axis split into warpgroups, ``lead + (128,)`` (``lead`` =
    ``frame[:-1] + (warpgroups,)``), once the op is known to run whole warpgroups; and which
    warpgroups execute it (a boolean array of shape ``lead``)."""
    if ev.threads is None:
        raise error(InterpretError, op, "is warpgroup-level: it must sit in a kernel")
    frame = ev.frame
    threads = frame[-1]
    if threads % WARPGROUP:
        raise error(InterpretError, op, f"needs whole warpgroups of {WARPGROUP} threads, the "
                    f"block has {threads} threads")
    lead = frame[:-1] + (threads // WARPGROUP,)
    if ev.mask is None:
        return lead, np.ones(lead, bool)
    mask = np.broadcast_to(ev.mask, frame).reshape(lead + (WARPGROUP,))
    if not (mask.all(-1) | ~mask.any(-1)).all():
        raise error(DivergenceError, op, "every thread of a warpgroup must execute it (it "
                    "sits in divergent control flow)")
    return lead, mask.all(-1)


_Read = tuple[Operation, SSAValue, list[np.ndarray]]
"""One box a product read: the product, its tile, and the index arrays of one round."""


class _Groups:
    """The reads of a launch's products whose groups no wait has retired yet."""

    def __init__(self) -> None:
        self.open: list[_Read] = []  # products issued since the last commit
        self.committed: list[list[_Read]] = []  # oldest first


_GROUPS: weakref.WeakKeyDictionary[KernelEvaluator, _Groups] = weakref.WeakKeyDictionary()


def _groups(ev: SimtEvaluator) -> _Groups | None:
    """The launch's groups in flight (Kernel IR only: Tile IR has no race checks)."""
    if not isinstance(ev, KernelEvaluator) or ev.races is None:
        return None
    return _GROUPS.setdefault(ev, _Groups())


@simt_impl("wgmma.fence")
def _fence(ev: SimtEvaluator, op: Operation) -> None:
    """Ordering only: nothing to compute once the warpgroups are known to run it whole."""
    _warpgroups(ev, op)


@simt_impl("wgmma.commit")
def _commit(ev: SimtEvaluator, op: Operation) -> None:
    """Close the group of the products issued since the last commit."""
    _warpgroups(ev, op)
    groups = _groups(ev)
    if groups is not None and groups.open:
        groups.committed.append(groups.open)
        groups.open = []


@simt_impl("wgmma.wait")
def _wait(ev: SimtEvaluator, op: Operation) -> None:
    """The accumulators pass through (every product's values were computed when it was
    issued); the groups this wait retires read their tiles once more, race-checked."""
    _warpgroups(ev, op)
    groups = _groups(ev)
    if groups is not None:
        assert isinstance(op, WaitOp)
        keep = op.pending.value.data
        retired = groups.committed[:max(0, len(groups.committed) - keep)]
        del groups.committed[:len(retired)]
        for product, buffer, at in (r for group in retired for r in group):
            read(ev, product, buffer, at)
    for result, value in zip(op.results, op.operands, strict=True):
        ev.env[result] = ev.env[value]


def _origin(ev: SimtEvaluator, op: MmaOp, lead: tuple[int, ...], active: np.ndarray,
            role: str, indices: Sequence[SSAValue], n_major: bool = False) -> None:
    """Raise unless the active warpgroups' threads agree on ``indices`` (…, row, k) of tile
    ``role`` and the row is a multiple of 8, the ``k`` a multiple of 16 (``n_major``: on
    ``(…, k, column)``, the ``k`` a multiple of 16, the column of 64)."""
    lead_names = [f"leading {d}" for d in range(len(indices) - 2)]
    last = (("k", K), ("column", ATOM_COLUMNS)) if n_major else (("row", SWIZZLE_ROWS), ("k", K))
    names = (*lead_names, *(name for name, _ in last))
    steps = (1,) * len(lead_names) + tuple(step for _, step in last)
    for name, value, step in zip(names, indices, steps, strict=True):
        lanes = np.broadcast_to(np.asarray(ev.env[value]), ev.frame)
        lanes = lanes.reshape(lead + (WARPGROUP,))
        first = lanes[..., 0]
        differs = (lanes != first[..., None]).any(-1) & active
        if differs.any():
            at = np.unravel_index(int(np.argmax(differs)), lead)
            lane = int(np.argmax(lanes[at] != first[at]))
            start = at[:-1] + (at[-1] * WARPGROUP,)
            point = at[:-1] + (at[-1] * WARPGROUP + lane,)
            raise error(InterpretError, op, f"the {name} index of '{role}' must be the same "
                        f"for every thread of a warpgroup: {int(first[at])} at "
                        f"{ev.describe_point(start)} but {int(lanes[at][lane])} at "
                        f"{ev.describe_point(point)}")
        bad = (first % step != 0) & active
        if bad.any():
            at = np.unravel_index(int(np.argmax(bad)), lead)
            point = at[:-1] + (at[-1] * WARPGROUP,)
            raise error(InterpretError, op, f"the {name} index of '{role}' must be a multiple "
                        f"of {step}, got {int(first[at])} at {ev.describe_point(point)}")


def _box(ev: SimtEvaluator, op: MmaOp, lead: tuple[int, ...], buffer: SSAValue,
         indices: Sequence[SSAValue], rows: int, cols: int = K) -> np.ndarray:
    """Each warpgroup's ``rows × cols`` box of ``buffer`` from its ``(…, row, column)``
    (leading indices pick the tile), as ``float64`` of shape ``lead + (rows, cols)``.
    Element ``e`` (row-major) of a round of ``64`` is read by threads ``e`` and ``e + 64``
    of the warpgroup."""
    frame = ev.frame
    *leading, row0, k0 = (np.broadcast_to(np.asarray(ev.env[v]), frame) for v in indices)
    half = WARPGROUP // 2
    spot = np.arange(frame[-1]) % half
    rounds = []
    groups = _groups(ev)
    for r in range(rows * cols // half):
        element = r * half + spot
        at = [*leading, row0 + element // cols, k0 + element % cols]
        if isinstance(ev, KernelEvaluator):
            value = read(ev, op, buffer, at)
            if groups is not None:
                groups.open.append((op, buffer, at))
        else:
            value = ev.gather(op, buffer_of(ev, op, buffer), at)
        lanes = np.broadcast_to(value, frame).reshape(lead + (WARPGROUP,))
        rounds.append(lanes[..., :half].astype(np.float64))
    return np.stack(rounds, -2).reshape(lead + (rows, cols))


def _registers_a(ev: SimtEvaluator, op: MmaOp, lead: tuple[int, ...]) -> np.ndarray:
    """Each warpgroup's ``64 × 16`` ``A`` from its threads' four pairs (``float64``, shape
    ``lead + (64, 16)``): warp ``w`` holds rows ``16·w`` to ``16·w + 15`` as ``mma.sync``'s
    ``m16n8k16`` ``A`` fragment, ``a_q = A[g + 8·(q mod 2)][2t + 8·(q / 2) + {0, 1}]``."""
    element = pair_element(op.a_pairs[0].type)
    assert element is not None
    warps = WARPGROUP // 32
    pairs = [np.broadcast_to(np.asarray(ev.env[value], np.uint32), ev.frame)
             .reshape(lead + (warps, 8, 4)) for value in op.a_pairs]
    return half_a_fragment(pairs, element).reshape(lead + (M, K))


@simt_impl("wgmma.mma")
def _mma(ev: SimtEvaluator, op: Operation) -> None:
    """``D = A·B + C`` for every warpgroup of every block (see the module docstring); ``C``
    is zero for a product ``+ zeros(n)``."""
    assert isinstance(op, MmaOp)
    lead, active = _warpgroups(ev, op)
    frame = ev.frame
    n = op.n
    _origin(ev, op, lead, active, "b", op.b_indices, op.n_major)
    if op.a is None:
        mat_a = _registers_a(ev, op, lead)
    else:
        _origin(ev, op, lead, active, "a", op.a_indices)
        mat_a = _box(ev, op, lead, op.a, op.a_indices, M)
    if op.n_major:  # the tile holds B as it is: k rows, n columns
        mat_b = _box(ev, op, lead, op.b, op.b_indices, K, n)
    else:
        mat_b = np.swapaxes(_box(ev, op, lead, op.b, op.b_indices, n), -1, -2)
    spots = [(_ROWS + 8 * (i // 2 % 2), _COLS + 8 * (i // 4) + i % 2) for i in range(n // 2)]
    mat_c = np.zeros(lead + (M, n))
    for value, (row, col) in zip(op.c, spots, strict=not op.from_zero):
        lanes = np.broadcast_to(np.asarray(ev.env[value], np.float32), frame)
        mat_c[..., row, col] = lanes.reshape(lead + (WARPGROUP,))
    mat_d = (mat_a @ mat_b + mat_c).astype(np.float32)
    for result, (row, col) in zip(op.d, spots, strict=True):
        ev.env[result] = np.ascontiguousarray(mat_d[..., row, col]).reshape(frame)
