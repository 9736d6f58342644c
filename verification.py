"""Verifying a module after every pass of a pipeline, in forked processes once it is slow.

The IR is verified after every pass. For a whole model that is a walk over tens of thousands
of ops after each of some thirty passes, as long again as lowering itself, and nothing in
it changes the IR: :class:`PassVerifier` verifies such a module in a child process forked
right after the pass (the child sees the module exactly as the pass left it, copy on write)
while the parent goes on with the next pass. Verifications run in place until one takes a
while (:data:`SLOW`): a lit test's modules never do, and a fork would cost more than it
saves. Everything is verified in place where ``os.fork`` does not exist or
``LLMOPT_VERIFY_INLINE=1`` is set.

A verification that fails raises its error (the same exception, or a
:class:`~xdsl.utils.exceptions.VerifyException` with its text when it does not pickle) in
the parent: at the next pass boundary, at :meth:`PassVerifier.finish`, or instead of the
error of a later pass that ran on the invalid IR (:meth:`PassVerifier.failure`). A few
children may run at once (:data:`IN_FLIGHT`); errors are reported in the order of the passes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import VerifyException

__all__ = ["IN_FLIGHT", "PassVerifier", "SLOW", "preferring_failures",
           "verifying"]

SLOW = 0.05
"""Seconds: once a verification in place takes this long, the following ones of the
pipeline run in child processes (forking costs a few milliseconds). A lit test's modules
verify far faster; a whole model's, or any model's Kernel and CUDA IR (a kernel per length
bucket), far slower."""


IN_FLIGHT = 3
"""How many verifications may run at once. Passes that take less than a verification
(most Tile-IR passes) would otherwise wait for the previous one; more children than cores
only share them, each holding its own copies of the pages it touches."""

Check = Callable[[ModuleOp], None]


def _verify(module: ModuleOp) -> None:
    module.verify()


@dataclass
class _Child:
    """A running verification: the child's pid, the read end of its pipe, and what it
    verifies (for the message of a failure)."""

    pid: int
    pipe: int
    what: str


class PassVerifier:
    """Runs ``check`` (default: ``module.verify()``) on a module after each pass, in a
    forked child once verifying has proved slow (see the module docstring).

    Call :meth:`after` with the module after each pass, :meth:`finish` once the pipeline
    is done; on an exception from the pipeline call :meth:`failure` first (it waits for the
    verifications in flight and returns the first error, if any) and :meth:`close` in any
    case. Errors are reported in the order of the passes.
    """

    def __init__(self, check: Check = _verify, *, background: bool | None = None,
                 in_flight: int | None = None) -> None:
        """``background``: ``None`` forks once a verification in place was slow (see
        :data:`SLOW`), ``False`` never, ``True`` whenever ``os.fork`` exists (tests).
        ``in_flight``: how many verifications may run at once (default :data:`IN_FLIGHT`);
        one more waits for the oldest."""
        self.check = check
        inline = os.environ.get("LLMOPT_VERIFY_INLINE", "") not in ("", "0")
        self.background = background if not inline and hasattr(os, "fork") else False
        self.in_flight = max(1, IN_FLIGHT if in_flight is None else in_flight)
        self._children: deque[_Child] = deque()

    def after(self, what: str, module: ModuleOp) -> None:
        """Verify ``module`` as ``what`` (a pass name) left it. Raises the error of an
        earlier background verification that failed, or of this one when run in place."""
        self._collect(wait=False)
        if not self._forks(module):
            self._collect(wait=True)  # earlier passes' errors first
            began = time.perf_counter()
            self.check(module)
            if self.background is None and time.perf_counter() - began >= SLOW:
                self.background = True
            return
        while len(self._children) >= self.in_flight:
            self._collect_oldest()
        self._children.append(self._fork(what, module))

    def finish(self) -> None:
        """Wait for the verifications in flight; raise the first error."""
        self._collect(wait=True)

    def failure(self) -> BaseException | None:
        """The first error of the verifications in flight, waited for (``None`` if they
        passed or none runs): what a pass that failed after them was really given."""
        try:
            self._collect(wait=True)
        except Exception as err:  # the verification's own error, handed back
            return err
        return None

    def close(self) -> None:
        """Stop the verifications still in flight (nothing is reported)."""
        while self._children:
            child = self._children.popleft()
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.close(child.pipe)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(child.pid, 0)

    # --- internals -----------------------------------------------------------------------

    def _forks(self, module: ModuleOp) -> bool:
        """Whether to verify in a child: in automatic mode, once a verification in place
        was slow (modules grow from pass to pass more than they shrink)."""
        return bool(self.background)

    def _fork(self, what: str, module: ModuleOp) -> _Child:
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: verify, report, leave without running any cleanup
            status = 0
            try:
                os.close(read)
                gc.disable()  # a collection would touch (copy) every page of the parent
                with contextlib.suppress(OSError):  # the passes come first
                    os.nice(10)
                payload = b""
                try:
                    self.check(module)
                except Exception as err:
                    payload = _pickled(err)
                view = memoryview(payload)
                while view:
                    view = view[os.write(write, view):]
                os.close(write)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(write)
        return _Child(pid, read, what)

    def _collect(self, wait: bool) -> None:
        """Collect the verifications in flight, oldest first: all of them (``wait``) or
        those that are done up to the first still running. Raises the first error."""
        while self._children:
            if not wait:
                ready, _, _ = select.select([self._children[0].pipe], [], [], 0)
                if not ready:
                    return
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        """Wait for the oldest verification in flight; raise its error if it failed."""
        child = self._children.popleft()
        chunks = []
        try:
            while chunk := os.read(child.pipe, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(child.pipe)
        _, status = os.waitpid(child.pid, 0)
        payload = b"".join(chunks)
        if payload:
            raise _unpickled(payload)
        if status != 0:
            raise VerifyException(f"verifying the IR after {child.what} failed: the "
                                  f"verifying process ended with status {status}")


def _pickled(err: Exception) -> bytes:
    """``err`` pickled, or a :class:`VerifyException` with its text when it does not."""
    try:
        return pickle.dumps(err)
    except Exception:
        return pickle.dumps(VerifyException(str(err)))


def _unpickled(payload: bytes) -> Exception:
    error = pickle.loads(payload)
    assert isinstance(error, Exception)
    return error


@contextlib.contextmanager
def preferring_failures(verifier: PassVerifier) -> Iterator[None]:
    """On an exception in the ``with`` block, raise instead the first error of the
    verifications ``verifier`` has in flight, when one fails: the pass that failed was
    given invalid IR."""
    try:
        yield
    except Exception:
        earlier = verifier.failure()
        if earlier is not None:
            raise earlier from None
        raise


@contextlib.contextmanager
def verifying(check: Check = _verify, *, background: bool | None = None
              ) -> Iterator[PassVerifier]:
    """A :class:`PassVerifier` for the ``with`` block: on leaving it normally the
    verifications in flight are waited for (an error raised); on an exception, see
    :func:`preferring_failures`; a child left running is stopped."""
    verifier = PassVerifier(check, background=background)
    try:
        with preferring_failures(verifier):
            yield verifier
            verifier.finish()
    finally:
        verifier.close()
