"""The pages under docs/ do what they say.

Each page's ```python blocks run in order in one fresh namespace per page, compiled with the
page's path and the page's line numbers (a traceback points into the .md file, and
``@rj.kernel`` reads a kernel's source from it). A ```text block that directly follows a
python block (only blank lines between) is that block's printed output and must match what
it prints; other ```text blocks are not checked. The relative links resolve, and
docs/README.md links every page.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md"))
REQUIRED = ["symbolic-dims.md", "ir-and-passes.md", "kernels-and-library-calls.md", "cache.md",
            "testing.md", "backends.md", "transformations.md"]

# a fenced block: an opening fence with its info string, the body, the closing fence
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def code_blocks(page: pathlib.Path) -> list[tuple[str, str | None, int]]:
    """(code, expected output or None, first line) per python block, in order; ``code`` has
    as many newlines in front as the page has lines before the block, so that line numbers
    in tracebacks and in the messages relaxjax prints are the page's own."""
    text = page.read_text()
    fences = list(_FENCE.finditer(text))
    out = []
    for i, m in enumerate(fences):
        if m.group(1) != "python":
            continue
        expected = None
        if i + 1 < len(fences):
            nxt = fences[i + 1]
            if nxt.group(1) == "text" and not text[m.end():nxt.start()].strip():
                expected = nxt.group(2)
        before = text.count("\n", 0, m.start(2))
        out.append(("\n" * before + m.group(2), expected, before + 1))
    return out


def run_page(page: pathlib.Path) -> list[tuple[int, str, str | None]]:
    """Run a page's python blocks; (first line, printed output, expected output) per block.
    ``os.environ`` is restored afterwards (the cache page points the cache elsewhere)."""
    ns = {"__name__": "docs_" + page.stem.replace("-", "_")}
    env = dict(os.environ)
    results = []
    try:
        for code, expected, line in code_blocks(page):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(code, str(page), "exec"), ns)
            results.append((line, buf.getvalue(), expected))
    finally:
        os.environ.clear()
        os.environ.update(env)
    return results


def _without_code(text: str) -> str:
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def links(page: pathlib.Path) -> list[str]:
    return _LINK.findall(_without_code(page.read_text()))


def test_the_pages_exist():
    names = {p.name for p in PAGES}
    missing = [n for n in REQUIRED + ["README.md"] if n not in names]
    assert not missing, f"docs/ lacks {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_run_and_print_what_is_shown(page):
    for line, printed, expected in run_page(page):
        if expected is not None and printed != expected:
            diff = "\n".join(difflib.unified_diff(expected.splitlines(), printed.splitlines(),
                                                  "shown", "printed", lineterm=""))
            pytest.fail(f"{page.name}: the block at line {line} prints something other than "
                        f"the text block after it shows:\n{diff}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue                      # a URL or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to missing files: {broken}"


def test_the_index_links_every_page():
    index = DOCS / "README.md"
    linked = {(DOCS / t.split("#", 1)[0]).resolve() for t in links(index)}
    unlinked = [p.name for p in PAGES if p.name != "README.md" and p.resolve() not in linked]
    assert not unlinked, f"docs/README.md does not link {unlinked}"
