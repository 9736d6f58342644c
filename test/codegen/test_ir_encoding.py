"""The compact encoding of a module that the compile cache rebuilds host functions from:
what it encodes decodes to a module that prints the same; what it cannot express, and data
that is not an encoding, raise :class:`EncodingError` (the cache then keeps only the text)."""

from __future__ import annotations

import json

import pytest
from xdsl.dialects import arith, cf, func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    Float32Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Block, Region
from xdsl.parser import Parser

import llmopt
from llmopt.api import make_context
from llmopt.codegen.ir_encoding import EncodingError, decode_module, encode_module

HOST = """
builtin.module attributes {llmopt.note = "x"} {
  func.func @forward(%w: memref<8xf32> {llmopt.param = "norm.weight"},
                     %x: memref<?x8xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                     %seq: index {llmopt.symbol = "seq", llmopt.max = 64 : i64})
                     -> memref<?x8xf32> {
    %0 = memref.alloc(%seq) : memref<?x8xf32>
    %c32 = arith.constant 32 : index
    %small = arith.cmpi ule, %seq, %c32 : index
    scf.if %small {
      %grid = arith.ceildivui %seq, %c32 : index
      %half = arith.constant 5.000000e-01 : f32
      %unused = memref.alloc(%grid) : memref<?xf32>
    }
    func.return %0 : memref<?x8xf32>
  }
}
"""


def test_a_module_decodes_to_what_it_was() -> None:
    module = llmopt.parse(HOST)
    text = encode_module(module)
    decoded = decode_module(text)
    assert str(decoded) == str(module)
    assert decoded.attributes == module.attributes
    decoded.verify()
    (fn,) = decoded.ops
    assert [a.name_hint for a in fn.body.block.args] == ["w", "x", "seq"]  # type: ignore[attr-defined]
    table = Parser(make_context(), json.loads(text)[1]).parse_attribute()
    assert isinstance(table, ArrayAttr)  # every attribute and type once
    assert MemRefType(Float32Type(), [DYNAMIC_INDEX, 8]) in table.data
    assert len(set(table.data)) == len(table.data)


def test_a_use_before_its_definition_is_not_encoded() -> None:
    c = arith.ConstantOp(IntegerAttr(1, IndexType()))
    add = arith.AddiOp(c.result, c.result)
    module = ModuleOp(Region(Block([add, c])))
    with pytest.raises(EncodingError, match="used before it is defined"):
        encode_module(module)


def test_successors_are_not_encoded() -> None:
    following = Block([func.ReturnOp()])
    body = Region([Block([cf.BranchOp(following)]), following])
    module = ModuleOp([func.FuncOp("f", ((), ()), body)])
    with pytest.raises(EncodingError, match="successors"):
        encode_module(module)


def _edited(edit: str) -> str:
    data = json.loads(encode_module(llmopt.parse(HOST)))
    if edit == "format":
        data[0] = "llmopt-ir-0"
    elif edit == "op":
        data[4][0][2][0][0] = "func.nothing"
    elif edit == "value":
        data[4][0][2][0][6][0][0][2][0][1] = [99]  # the alloc's operand
    elif edit == "attribute":
        data[4][0][2][0][2] = [10**6]
    elif edit == "table":
        data[1] = "[memref<"
    elif edit == "shape":
        data[4] = [[[], [], [["func.return"]]]]
    return json.dumps(data)


@pytest.mark.parametrize("edit, message", [
    ("format", "not an encoding of the format"), ("op", "unknown op 'func.nothing'"),
    ("value", "value #99 is not defined"), ("attribute", "is not in the table"),
    ("table", "ParseError"), ("shape", "not an encoded module"),
])
def test_data_that_is_not_an_encoding_is_refused(edit: str, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        decode_module(_edited(edit))


def test_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(EncodingError):
        decode_module("builtin.module {}")
