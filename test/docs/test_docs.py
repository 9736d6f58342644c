"""The documentation cannot drift: every generated block is what the tools print today, and
every relative link points at a file (and heading) that exists.

``python -m llmopt.tools.docs --update`` regenerates the blocks after a change.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmopt.tools import docs

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [
    ROOT / "README.md", ROOT / "examples" / "llmopt-example-plugin" / "README.md",
]


def test_generated_blocks_are_up_to_date() -> None:
    """``python -m llmopt.tools.docs --check`` finds nothing stale."""
    result = subprocess.run(
        [sys.executable, "-m", "llmopt.tools.docs", "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, (
        "the docs are out of date; run `python -m llmopt.tools.docs --update` and review the "
        f"diff:\n{result.stdout}{result.stderr}"
    )


def test_rms_example_is_the_captured_module() -> None:
    """``docs/examples/rms.mlir`` is what ``capture_rms.py`` prints, as architecture.md shows
    (that block is checked against a fresh capture by the test above)."""
    page = ROOT / "docs" / "architecture.md"
    lines = page.read_text().split("\n")
    (directive,) = [d for d in docs.find_directives(page, lines)
                    if d.argument == "python docs/examples/capture_rms.py"]
    block = lines[directive.start + 2 : directive.end - 1]  # fence, command, ..., fence
    assert "\n".join(block) + "\n" == (ROOT / "docs" / "examples" / "rms.mlir").read_text()


def test_every_level_has_a_page_with_its_ops() -> None:
    """One page per level, each holding the op table of its dialect."""
    pages = sorted((ROOT / "docs" / "levels").glob("*.md"))
    dialects = ["torch", "prim", "loop", "tile", "kernel", "cuda"]
    assert [p.name.split("-", 1)[0] for p in pages] == [str(k) for k in range(1, 7)]
    for page, dialect in zip(pages, dialects, strict=True):
        assert f"<!-- llmopt:ops {dialect} -->" in page.read_text(), page


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page (outside code blocks)."""
    anchors: set[str] = set()
    fenced = False
    for line in page.read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link names an existing file, and an existing heading if it has one."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken: list[str] = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading '#{anchor}'")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


# --- the generator itself -----------------------------------------------------------------------

IR = """builtin.module {
  func.func @f(%a: f32) -> f32 {
    %0 = arith.addf %a, %a : f32
    %1 = loop.reduce add %r = 0 to 4 : f32 {
      loop.yield %0 : f32
    }
    %2 = loop.reduce add %s = 0 to 8 : f32 {
      loop.yield %1 : f32
    }
    func.return %2 : f32
  }
}"""


def test_extract_op_takes_the_kth_op_with_its_region() -> None:
    """``op=NAME#K`` keeps the K-th op called NAME, its region, dedented."""
    lines = IR.split("\n")
    assert docs.extract_op(lines, "loop.reduce#2") == [
        "%2 = loop.reduce add %s = 0 to 8 : f32 {",
        "  loop.yield %1 : f32",
        "}",
    ]
    assert docs.extract_op(lines, "arith.addf") == ["%0 = arith.addf %a, %a : f32"]
    with pytest.raises(docs.DocsError, match="no op 'loop.for'"):
        docs.extract_op(lines, "loop.for")


def test_between_and_masks(tmp_path: Path) -> None:
    """``from``/``to`` cut a range; ``mask`` hides what varies, keeping columns aligned."""
    assert docs.between(IR.split("\n"), "%1 = ", "loop.yield") == [
        "%1 = loop.reduce add %r = 0 to 4 : f32 {", "  loop.yield %0 : f32",
    ]
    directive = docs.parse_directive(tmp_path / "x.md", 1, "run",
                                     r"mask='\s+\d+\.\d(?= ms)' mask='0x\w+' $ true")
    assert docs.apply_filters("pass   12.5 ms at 0xdead", directive) == ["pass      … ms at …"]


def _page(tmp_path: Path, body: str) -> Path:
    """A Markdown file holding ``body``."""
    page = tmp_path / "page.md"
    page.write_text(body)
    return page


def test_check_fails_on_a_stale_block_and_update_fixes_it(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """``--check`` exits 1 with a diff on a stale block; ``--update`` rewrites it."""
    page = _page(tmp_path, "Text.\n\n<!-- llmopt:run $ echo hello -->\n```text\nstale\n```\n"
                           "<!-- llmopt:end -->\n")
    assert docs.main(["--check", str(page)]) == 1
    assert "+hello" in capsys.readouterr().out
    assert docs.main(["--update", str(page)]) == 0
    assert "```text\n$ echo hello\nhello\n```\n<!-- llmopt:end -->" in page.read_text()
    assert docs.main(["--check", str(page)]) == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<!-- llmopt:run $ echo hi -->\n", "has no <!-- llmopt:end -->"),
        ("<!-- llmopt:run $ exit 3 -->\n<!-- llmopt:end -->\n", "exited with status 3"),
        ("<!-- llmopt:run echo hi -->\n<!-- llmopt:end -->\n", "needs '$ COMMAND'"),
        ("<!-- llmopt:run max=1 $ printf 'a\\nb\\n' -->\n<!-- llmopt:end -->\n", "more than max=1"),
        ("<!-- llmopt:ops nosuch -->\n<!-- llmopt:end -->\n", "no dialect 'nosuch'"),
        ("<!-- llmopt:bogus -->\n<!-- llmopt:end -->\n", "unknown directive llmopt:bogus"),
    ],
)
def test_errors_name_the_directive(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   body: str, message: str) -> None:
    """A bad directive or a failing command is an error (status 2) naming file and line."""
    page = _page(tmp_path, "# Title\n\n" + body)
    assert docs.main(["--check", str(page)]) == 2
    err = capsys.readouterr().err
    assert f"{page}:3:" in err and message in err, err
