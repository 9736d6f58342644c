"""Look for reads of warpgroup accumulators still in flight in the SASS of bf16 products
(CPU: NVRTC and ``nvdisasm``, no GPU).

Usage::

    python bench/sass_hazards.py [--pipeline P] [--option 'warp-specialize{pending=1}'] \\
        [tinyllama:512:q_proj qwen2.5-7b:512:o_proj ...]

Each case (``model:seq:op`` of the op suite, in bf16; by default the five bare projections
of ``bench/results/ops-bfloat16-h100.md`` that came out wrong) is lowered with the pipeline
(default ``lower-to-cuda{arch=sm_90a}``, with ``--option``\\ s set), compiled to SASS for
sm_90a and disassembled. The scan follows each kernel's instructions in address order:
an ``HGMMA`` writes its accumulator registers asynchronously; after ``WARPGROUP.DEPBAR.LE
gsb0, 0x1`` the registers of the newest group (the ``HGMMA`` ops since the one before it
that ends a group, ``gsb0``) are still being written, and after ``0x0`` none is. Any other
instruction that reads such a register in between is reported. The scan ignores branches
(it reads the code in layout order), so it is a diagnostic, not a proof: it found the
epilogue of ``warp-specialize{pending=1}`` converting the last group's accumulators before
the final wait when that wait followed the K loop.

``nvdisasm`` is taken from ``PATH``, else from the ``nvidia-cuda-nvdisasm`` or ``triton``
packages. Exit status 1 when a case has such reads.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

from llmopt import api, registry  # noqa: E402
from llmopt.codegen.nvrtc import compile_cuda  # noqa: E402

DEFAULT_CASES = ("tinyllama:128:gate_proj", "tinyllama:128:up_proj", "tinyllama:512:q_proj",
                 "tinyllama:512:o_proj", "qwen2.5-7b:512:o_proj")
"""The bare projections outside tolerance in the H100 op-suite run at a3c90c7."""

_HGMMA = re.compile(r"HGMMA\.\d+x(\d+)x\d+\S*\s+R(\d+)")
_WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)")
_REGISTER = re.compile(r"\bR(\d+)\b")


def nvdisasm() -> str:
    """The path of ``nvdisasm``: on ``PATH``, else in an installed package."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    for package, parts in (("nvidia", ("cu13", "bin")), ("nvidia", ("cuda_nvdisasm", "bin")),
                           ("triton", ("backends", "nvidia", "bin"))):
        spec = find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = Path(root, *parts, "nvdisasm")
            if path.exists():
                return str(path)
    raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or put the CUDA "
                     "toolkit's bin on PATH)")


def kernels(sass: str) -> dict[str, list[str]]:
    """Each kernel's instructions (address comments and encodings dropped), in order."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in sass.splitlines():
        head = re.match(r"\s*\.text\.(\S+):", line)
        if head:
            current = out.setdefault(head.group(1), [])
        elif current is not None and re.search(r"/\*[0-9a-f]{4,}\*/", line):
            text = re.sub(r"/\*.*?\*/", " ", line).strip().rstrip(";").strip()
            if text:
                current.append(text)
    return out


def in_flight_reads(instructions: list[str]) -> list[str]:
    """The instructions that read an accumulator register a warpgroup product may still be
    writing (see the module docstring)."""
    group: set[int] = set()  # the registers of the group being issued
    newest: set[int] = set()  # the last complete group's registers
    flying: set[int] = set()
    found = []
    for text in instructions:
        product = _HGMMA.search(text)
        if product:
            width, base = int(product.group(1)), int(product.group(2))
            group |= set(range(base, base + width // 2))
            if "gsb0" in text:  # ends a group
                newest, group = group, set()
                flying |= newest
            continue
        wait = _WAIT.search(text)
        if wait:
            flying = set(newest) if int(wait.group(1), 16) else set()
            continue
        operands = text.split(None, 1)[1] if " " in text else ""
        sources = operands.split(",", 1)[1] if "," in operands else ""
        if any(int(r) in flying for r in _REGISTER.findall(sources)):
            found.append(text)
    return found


def check(case: str, pipeline: str, tool: str) -> int:
    """Print the case's findings; the number of reads found."""
    model, seq, op = case.split(":")
    made = suite.make_case(suite.MODELS[model], int(seq), op, dtype=torch.bfloat16)
    source = api.cuda_source(api.capture(made.module, made.inputs), pipeline)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp, "k.cubin")
        cubin.write_bytes(compile_cuda(source, arch="sm_90a"))
        sass = subprocess.run([tool, "-c", str(cubin)], check=True, capture_output=True,
                              text=True).stdout
    total = 0
    for name, instructions in kernels(sass).items():
        if not any(_HGMMA.search(t) for t in instructions):
            continue
        reads = in_flight_reads(instructions)
        total += len(reads)
        print(f"{case} {name}: {len(reads)} reads of accumulators in flight"
              + "".join(f"\n    {t}" for t in reads[:3]))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(DEFAULT_CASES))
    parser.add_argument("--pipeline", default="lower-to-cuda{arch=sm_90a}")
    parser.add_argument("--option", action="append", default=[],
                        help="a pass with options to set in the pipeline (repeatable)")
    args = parser.parse_args()
    pipeline = args.pipeline
    for option in args.option:
        pipeline = registry.with_options(pipeline, option)
    tool = nvdisasm()
    return 1 if sum(check(c, pipeline, tool) for c in args.cases) else 0


if __name__ == "__main__":
    raise SystemExit(main())
