"""The docs' Python blocks as tests (issue 53 §4), read by sybil (a pinned dev dependency): every
```python block of README.md and docs/*.md runs, each file's blocks in order in ONE fresh process
with a store of its own, unless sybil's skip comment right above it (invisible on GitHub) says why:

    <!-- skip: next "needs a GPU and two ranks (torchrun)" -->

(the reason is required here: a bare ``skip: next`` is an error; ``skip: start "why"`` …
``skip: end`` skips a run of blocks), and what a block leaves to the reader (``...``, a model
defined elsewhere) is made explicit by sybil's invisible code block, run right before it:

    <!-- invisible-code-block: python
    cfg = {"steps": 3}
    -->

sybil parses and applies its skips; the blocks do not run in sybil's shared in-process namespace
but are collected (``blocks``) and run as one script (``script``/``run``): memolab's point is a
hit in a NEW process, and an in-process namespace would share memolab's in-memory caches between
documents and with the test session. The script keeps each block on its own lines of the document,
so a traceback's line number is the document's, and the last block started is named on stderr.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import SkipTest

from conftest import require

require("sybil", "the docs' blocks are read by sybil")

from sybil import Document, Example, Sybil  # noqa: E402  (after the pinned-dependency check)
from sybil.parsers.markdown import CodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: what a block prints before it runs: a failure names the block it was in
MARK = "docs-test: running "
#: where the collecting evaluator puts a document's blocks (the document's sybil namespace)
KEY = "__docblocks__"


@dataclass
class Block:
    path: str  #: relative to the repository (``README.md``)
    line: int  #: the fence's line (an invisible block's comment line), 1-based
    first: int  #: the line of the code's first line
    code: str
    skip: str | None = None  #: why it does not run (None: it runs)
    hidden: bool = False  #: an invisible code block (set-up the reader does not see)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _rel(path: str | Path) -> str:
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else p.name


def _block(example: Example, skip: str | None) -> Block:
    region, source = example.region, example.parsed
    first = example.document.text.count("\n", 0, region.start + source.offset) + 1
    hidden = "directive" in region.lexemes  # an HTML comment's block, not a fence
    return Block(_rel(example.path), example.line, first, str(source), skip, hidden)


def _collect(example: Example) -> None:
    """sybil's evaluator for a python block: record it (it runs later, in the document's process)."""
    example.namespace[KEY].append(_block(example, None))


class ReasonedSkipParser(SkipParser):
    """sybil's Markdown skip, with a reason required for ``start`` and ``next``."""

    def __call__(self, document: Document) -> Any:
        for region in super().__call__(document):
            action, reason = region.parsed
            if action in ("start", "next") and not (reason or "").strip():
                raise ValueError(f'{_rel(document.path)}:{document.text.count(chr(10), 0, region.start) + 1}: '
                                 f'a docs skip must say why: <!-- skip: {action} "REASON" -->')
            yield region


SYBIL = Sybil(parsers=[CodeBlockParser("python", _collect), ReasonedSkipParser()], path=str(ROOT))


def doc_files() -> list[Path]:
    return [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if "```python" in p.read_text()]


def blocks(path: Path) -> list[Block]:
    """The python blocks of ``path`` in order (invisible ones included), each run or skipped with
    its reason as sybil's skip comments say."""
    document = SYBIL.parse(path)
    out: list[Block] = []
    document.namespace[KEY] = out
    for example in document:
        try:
            example.evaluate()
        except SkipTest as e:
            out.append(_block(example, str(e)))
    code = [r for _, r in document.regions if r.evaluator is _collect]
    if len(code) != len(out):  # a block sybil neither handed to us nor skipped with a reason
        lines = {document.text.count("\n", 0, r.start) + 1 for r in code} - {b.line for b in out}
        raise ValueError(f"{_rel(path)}: python block(s) at line(s) {sorted(lines)} neither run nor "
                         "skipped with a reason")
    return out


def script(bs: list[Block]) -> str:
    """One program running the blocks that run, in order, each at its own lines of the document."""
    lines: list[str] = []
    for b in bs:
        if b.skip is not None:
            continue
        lines += [""] * (b.line - 1 - len(lines))
        lines.append(f"print({MARK + b.where!r}, file=__import__('sys').stderr, flush=True)")
        lines += [""] * (b.first - 1 - len(lines))
        lines += b.code.splitlines()
    return "\n".join(lines) + "\n"


def script_name(bs: list[Block]) -> str:
    """``README_md.py`` for README.md's blocks: a traceback's file says which document."""
    return (Path(bs[0].path).name if bs else "doc").replace(".", "_") + ".py"


def run(bs: list[Block], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``bs`` (one file's blocks) in a fresh process in ``tmp``, with its own store."""
    prog = tmp / script_name(bs)
    prog.write_text(script(bs))
    env = dict(os.environ, MEMOLAB_STORE=str(tmp / "store"), PYTHONDONTWRITEBYTECODE="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",  # nothing downloaded at run time
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "examples")]))
    return subprocess.run([sys.executable, str(prog)], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=timeout)


def failed_block(stderr: str) -> str:
    """The block a failed run was in (the last one it started)."""
    started = [ln[len(MARK):] for ln in stderr.splitlines() if ln.startswith(MARK)]
    return started[-1] if started else "(before the first block)"
