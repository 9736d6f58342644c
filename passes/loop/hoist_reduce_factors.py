"""``hoist-reduce-factors``: factors that do not change along a sum leave it.

**Matches** a ``loop.reduce add`` over floats whose yielded value is a product: a tree of
``arith.mulf`` and ``arith.divf`` ops in the reduction's body, each used once, whose leaves
(the multiplicands, and the divisors of the ``divf`` ops) include at least one value defined
outside the body (*invariant*: the same for every term) and at least one multiplicand
defined inside it. Attention's ``P·V`` as ``fuse-kernels`` leaves it is one:
``Σ_k (p[k] / l) · v[k]``, with the softmax denominator ``l`` loaded outside the sum.

**Produces** the reduction of the product of the body's own leaves only (the same order of
multiplications, then the body's divisors), and after it the result multiplied by the
invariant multiplicands and divided by the invariant divisors, in the order they appeared:
``(Σ_k p[k] · v[k]) / l``. The sum is mathematically the same; it rounds differently (one
division instead of one a term).

**Why** ``register-tile`` recomputes whatever a product's operands need in its K loop: a
division per term (``div.rn.f32`` is a dozen instructions) where the multiply-add is one
made attention's ``P·V`` several times slower than a plain product of its size. Outside
the sum the division runs once per output, in the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop
from llmopt.passes._ir import defined_inside
from llmopt.passes._rewrite import KeepLocation


@dataclass
class Product:
    """A yielded product split into its leaves: multiplicands and divisors, each either of
    the reduction's body or invariant; ``tree`` holds the ``mulf``/``divf`` ops it is made
    of (erased once rebuilt)."""

    body_factors: list[SSAValue] = field(default_factory=list)
    body_divisors: list[SSAValue] = field(default_factory=list)
    invariant: list[tuple[SSAValue, bool]] = field(default_factory=list)
    """``(value, divides)`` in the order they appear."""
    tree: list[Operation] = field(default_factory=list)


def split_product(value: SSAValue, reduce: loop.ReduceOp) -> Product:
    """The leaves of the ``mulf``/``divf`` tree yielding ``value`` (see :class:`Product`)."""
    product = Product()

    def visit(v: SSAValue, divides: bool) -> None:
        if not defined_inside(v, reduce):
            product.invariant.append((v, divides))
            return
        owner = v.owner
        if divides or not isinstance(owner, arith.MulfOp | arith.DivfOp) or not v.has_one_use():
            (product.body_divisors if divides else product.body_factors).append(v)
            return
        product.tree.append(owner)
        visit(owner.lhs, False)
        visit(owner.rhs, isinstance(owner, arith.DivfOp))

    visit(value, False)
    return product


class HoistFactors(RewritePattern):
    """Rewrite one matched reduction (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ReduceOp, rewriter: PatternRewriter) -> None:
        if op.kind.data != "add" or not isinstance(op.result.type, AnyFloat):
            return
        yield_op = op.body.block.last_op
        assert isinstance(yield_op, loop.YieldOp)
        product = split_product(yield_op.values[0], op)
        if not product.invariant or not product.body_factors:
            return
        # the body's part, before the yield
        here = InsertPoint.before(yield_op)
        term = product.body_factors[0]
        for factor in product.body_factors[1:]:
            mul = arith.MulfOp(term, factor)
            rewriter.insert(mul, here)
            term = mul.result
        for divisor in product.body_divisors:
            div = arith.DivfOp(term, divisor)
            rewriter.insert(div, here)
            term = div.result
        yield_op.operands = [term]
        for old in product.tree:  # root first: each is dead once its user is gone
            rewriter.erase(old)
        # the invariant part, after the sum
        uses = list(op.result.uses)
        result = op.result
        after = InsertPoint.after(op)
        for value, divides in product.invariant:
            new = arith.DivfOp(result, value) if divides else arith.MulfOp(result, value)
            rewriter.insert(new, after)
            after = InsertPoint.after(new)
            result = new.result
        for use in uses:
            use.operation.operands[use.index] = result


@dataclass(frozen=True)
class HoistReduceFactors(ModulePass):
    """Move invariant factors out of sums (see the module docstring)."""

    name = "hoist-reduce-factors"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(KeepLocation(HoistFactors()), apply_recursively=False
                             ).rewrite_module(op)
