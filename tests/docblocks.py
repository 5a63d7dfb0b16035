"""The docs' Python blocks as tests (issue 53 §4): every ```python block of README.md and docs/*.md
runs, each file's blocks in order in ONE fresh process with a store of its own, unless an HTML
comment right above the block (invisible on GitHub) says why it does not:

    <!-- docs-test: skip needs a GPU and two ranks (torchrun) -->

and what a block leaves to the reader (``...``, a model defined elsewhere) is made explicit by
hidden set-up code that runs right before it, in the same process:

    <!-- docs-test: setup
    cfg = {"steps": 3}
    -->

No docs-testing library (sybil, pytest-examples, pytest-markdown-docs) is installed in the
project's environment, so this is the small collector instead: ``blocks`` reads a file,
``script`` makes the program that runs its blocks, ``run`` runs it (tests/test_docs_blocks.py).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(\s*)```python\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(skip|setup)\b(.*)$")
#: what a block prints before it runs: a failure names the block it was in
MARK = "docs-test: running "


@dataclass
class Block:
    path: str  #: relative to the repository (``README.md``)
    line: int  #: the fence's line, 1-based
    code: str
    setup: str = ""
    skip: str | None = None  #: why it does not run (None: it runs)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files() -> list[Path]:
    return [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if "```python" in p.read_text()]


def blocks(path: Path) -> list[Block]:
    """The ```python blocks of ``path``, each with the directives right above it."""
    lines = path.read_text().splitlines()
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    out: list[Block] = []
    skip: str | None = None
    setup: list[str] = []
    i = 0
    while i < len(lines):
        d = DIRECTIVE.match(lines[i])
        if d and d.group(1) == "skip":
            reason = d.group(2).split("-->")[0].strip()
            if not reason:
                raise ValueError(f"{rel}:{i + 1}: a docs-test skip must say why")
            skip = reason
        elif d:  # setup: the code up to the closing -->
            i += 1
            while i < len(lines) and lines[i].strip() != "-->":
                setup.append(lines[i])
                i += 1
        m = FENCE.match(lines[i]) if i < len(lines) else None
        if m:
            start, body = i, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][len(m.group(1)):] if lines[i].startswith(m.group(1)) else lines[i])
                i += 1
            out.append(Block(rel, start + 1, "\n".join(body) + "\n", textwrap.dedent("\n".join(setup)), skip))
            skip, setup = None, []
        elif lines[i].strip() and not d and not lines[i].lstrip().startswith("<!--"):
            skip, setup = None, []  # a directive binds the block right below it only
        i += 1
    return out


def script(bs: list[Block]) -> str:
    """One program running the blocks that run, in order (each block's set-up first)."""
    parts = ["import sys\n"]
    for b in bs:
        if b.skip is None:
            parts.append(f"print({MARK + b.where!r}, file=sys.stderr, flush=True)\n")
            parts.append(f"# ---- {b.where} (set-up)\n{b.setup}\n" if b.setup.strip() else "")
            parts.append(f"# ---- {b.where}\n{b.code}\n")
    return "".join(parts)


def run(bs: list[Block], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``bs`` (one file's blocks) in a fresh process in ``tmp``, with its own store."""
    prog = tmp / "doc_blocks.py"
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
