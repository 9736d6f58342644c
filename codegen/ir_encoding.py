"""A module as compact data, for the compile cache: rebuilt without the text parser.

Parsing IR text costs about a millisecond an op (the lexer, each op's custom syntax, every
type spelled out again at each use), so the host function of a whole model (thousands of
launches, allocations and ``index`` computations) takes many seconds to parse back.
:func:`encode_module` writes a module as JSON instead: every distinct attribute and type
once, in one table (printed, and parsed back in one go), and each op as its name, operand
numbers, result types, properties, attributes, SSA name hints and regions.
:func:`decode_module` rebuilds the ops with ``Operation.create`` — no lexing, no custom
syntax — and gives a module that prints exactly as the encoded one.

What it cannot encode (a use before the definition, as in a graph region or a branch back
to an earlier block; an op with successors) raises :class:`EncodingError`, and the cache
then keeps only the text. Decoding checks the data's structure (op names known to the
context, numbers in range) and raises :class:`EncodingError` otherwise; it does not run the
verifiers again: an encoding is written from a verified module, and the compile cache
stores it in an entry checksummed and bound to its key.
"""

from __future__ import annotations

import json
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

__all__ = ["EncodingError", "decode_module", "encode_module"]

_FORMAT = "llmopt-ir-1"


class EncodingError(ValueError):
    """The module cannot be encoded, or the data is not an encoding of one."""


class _Encoder:
    def __init__(self) -> None:
        self.attributes: dict[Attribute, int] = {}
        self.values: dict[SSAValue, int] = {}

    def attribute(self, attr: Attribute) -> int:
        number = self.attributes.get(attr)
        if number is None:
            number = self.attributes[attr] = len(self.attributes)
        return number

    def value(self, value: SSAValue) -> int:
        number = self.values.get(value)
        if number is None:
            raise EncodingError("a value is used before it is defined")
        return number

    def op(self, op: Operation) -> list[Any]:
        if op.successors:
            raise EncodingError(f"'{op.name}' has successors")
        operands = [self.value(v) for v in op.operands]
        regions = [self.region(r) for r in op.regions]
        for result in op.results:  # defined after its regions, which cannot use them
            self.values[result] = len(self.values)
        return [op.name, operands, [self.attribute(r.type) for r in op.results],
                [r.name_hint for r in op.results],
                {k: self.attribute(a) for k, a in op.properties.items()},
                {k: self.attribute(a) for k, a in op.attributes.items()}, regions]

    def region(self, region: Region) -> list[Any]:
        blocks = []
        for block in region.blocks:
            for arg in block.args:
                self.values[arg] = len(self.values)
            blocks.append([[self.attribute(a.type) for a in block.args],
                           [a.name_hint for a in block.args], [self.op(o) for o in block.ops]])
        return blocks


def encode_module(module: ModuleOp) -> str:
    """``module`` as JSON text (see the module docstring); raises :class:`EncodingError`
    for what the encoding cannot express."""
    encoder = _Encoder()
    body = encoder.region(module.body)
    head = {k: encoder.attribute(a) for k, a in module.attributes.items()}
    props = {k: encoder.attribute(a) for k, a in module.properties.items()}
    table = str(ArrayAttr(list(encoder.attributes)))
    return json.dumps([_FORMAT, table, head, props, body], separators=(",", ":"))


class _Decoder:
    def __init__(self, ctx: Context, attributes: list[Attribute]) -> None:
        self.ctx = ctx
        self.attributes = attributes
        self.values: list[SSAValue] = []

    def attribute(self, number: int) -> Attribute:
        if not isinstance(number, int) or not 0 <= number < len(self.attributes):
            raise EncodingError(f"attribute #{number} is not in the table")
        return self.attributes[number]

    def named(self, entries: dict[str, int]) -> dict[str, Attribute]:
        return {str(k): self.attribute(v) for k, v in entries.items()}

    def value(self, number: int) -> SSAValue:
        if not isinstance(number, int) or not 0 <= number < len(self.values):
            raise EncodingError(f"value #{number} is not defined")
        return self.values[number]

    def op(self, data: list[Any]) -> Operation:
        name, operands, types, hints, props, attrs, regions = data
        op_type = self.ctx.get_optional_op(name)
        if op_type is None:
            raise EncodingError(f"unknown op '{name}'")
        op = op_type.create(operands=[self.value(v) for v in operands],
                            result_types=[self.attribute(t) for t in types],
                            properties=self.named(props), attributes=self.named(attrs),
                            regions=[self.region(r) for r in regions])
        for result, hint in zip(op.results, hints, strict=True):
            result.name_hint = hint
            self.values.append(result)
        return op

    def region(self, blocks: list[Any]) -> Region:
        region = Region()
        for types, hints, ops in blocks:
            block = Block(arg_types=[self.attribute(t) for t in types])
            for arg, hint in zip(block.args, hints, strict=True):
                arg.name_hint = hint
                self.values.append(arg)
            region.add_block(block)
            block.add_ops(self.op(o) for o in ops)
        return region


def decode_module(text: str, ctx: Context | None = None) -> ModuleOp:
    """The module that :func:`encode_module` wrote as ``text`` (ops of dialects registered
    in ``ctx``, default :func:`llmopt.api.make_context`); raises :class:`EncodingError`
    for data that is not such an encoding."""
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    from llmopt.api import make_context

    ctx = ctx or make_context()
    try:
        form, table, head, props, body = json.loads(text)
        if form != _FORMAT:
            raise EncodingError(f"not an encoding of the format {_FORMAT}")
        attributes = Parser(ctx, table).parse_attribute()
        if not isinstance(attributes, ArrayAttr):
            raise EncodingError("the attribute table is not an array")
        decoder = _Decoder(ctx, list(attributes.data))
        return ModuleOp.create(properties=decoder.named(props),
                               attributes=decoder.named(head), regions=[decoder.region(body)])
    except EncodingError:
        raise
    except (ParseError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise EncodingError(f"not an encoded module ({type(err).__name__}: {err})") from None
