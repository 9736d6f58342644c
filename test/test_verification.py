"""Verification after every pass, in forked processes (llmopt.verification)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32
from xdsl.utils.exceptions import VerifyException

from llmopt.api import parse
from llmopt.verification import SLOW, PassVerifier, verifying

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

TEXT = """
func.func @f(%x: index) -> index {
  %c = arith.constant 4 : index
  %y = arith.addi %x, %c : index
  func.return %y : index
}
"""


def _module() -> ModuleOp:
    return parse(TEXT)


def _break(module: ModuleOp) -> None:
    """An ``index`` constant holding an ``i32`` value: the verifier rejects it."""
    constant = next(op for op in module.walk() if op.name == "arith.constant")
    constant.properties["value"] = IntegerAttr(4, i32)


def _inline_error(module: ModuleOp) -> str:
    with pytest.raises(VerifyException) as info:
        module.verify()
    return str(info.value)


@pytest.mark.parametrize("background", [True, False])
def test_a_valid_module_passes(background: bool) -> None:
    verifier = PassVerifier(background=background)
    module = _module()
    for name in ("first", "second", "third", "fourth", "fifth"):
        verifier.after(name, module)
    verifier.finish()
    verifier.close()


@pytest.mark.parametrize("background", [True, False])
def test_an_invalid_module_raises_the_verifier_error(background: bool) -> None:
    module = _module()
    _break(module)
    want = _inline_error(module)
    verifier = PassVerifier(background=background)
    with pytest.raises(VerifyException) as info:
        verifier.after("broken", module)
        verifier.finish()
    verifier.close()
    assert str(info.value) == want


def test_the_child_sees_the_module_as_the_pass_left_it() -> None:
    """Each verification is a snapshot: breaking the module after one was started does
    not fail it, and the next one sees the broken module."""
    verifier = PassVerifier(background=True)
    module = _module()
    verifier.after("valid", module)
    _break(module)
    with pytest.raises(VerifyException):
        verifier.after("broken", module)
        verifier.finish()
    verifier.close()


def test_errors_come_in_the_order_of_the_passes() -> None:
    """Passes 2 to 4 leave the module invalid (as the check sees it): pass 2 is named,
    whichever verification ends first."""
    verifier = PassVerifier(check=_fails_from(2), background=True, in_flight=4)
    module = _module()
    with pytest.raises(VerifyException, match="pass 2$"):
        for n in range(1, 5):
            module.attributes[_N] = IntegerAttr(n, i32)
            verifier.after(f"pass {n}", module)
        verifier.finish()
    verifier.close()


def test_a_later_pass_error_gives_way_to_the_verification_error() -> None:
    """A pass that fails on IR an earlier pass left invalid reports the invalid IR."""
    module = _module()
    _break(module)
    with pytest.raises(VerifyException), verifying(background=True) as verifier:
        verifier.after("broken", module)
        raise RuntimeError("the next pass trips over the broken IR")


def test_without_a_failed_verification_the_pass_error_stands() -> None:
    with pytest.raises(RuntimeError), verifying(background=True) as verifier:
        verifier.after("valid", _module())
        raise RuntimeError("a pass failure of its own")


def test_verifications_move_to_children_once_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module()
    fast = PassVerifier()
    fast.after("fast", module)
    assert not fast._forks(module)  # a handful of ops: verified in place
    slow = PassVerifier(check=lambda _: time.sleep(SLOW))
    slow.after("slow", module)
    assert slow._forks(module)
    slow.close()
    monkeypatch.setenv("LLMOPT_VERIFY_INLINE", "1")
    assert not PassVerifier(background=True)._forks(module)


_N = "llmopt.test.n"


def _fails_from(first_bad: int) -> Callable[[ModuleOp], None]:
    """A check that rejects the module from pass ``first_bad`` on (the number the test
    stores in the module before each pass's verification)."""

    def check(module: ModuleOp) -> None:
        attr = module.attributes[_N]
        assert isinstance(attr, IntegerAttr)
        n = attr.value.data
        if n >= first_bad:
            raise VerifyException(f"pass {n}")

    return check
