"""The docs run (issue 53 §4): every ```python block of README.md and docs/*.md is run, each file's
blocks in order in one fresh process with a store of its own, or says why it is not
(sybil's ``<!-- skip: next "REASON" -->`` above it); see tests/docblocks.py."""
from __future__ import annotations

import pytest

import docblocks

#: the files with a block that runs (a file whose every block says why it does not is checked below)
FILES = [p for p in docblocks.doc_files() if any(b.skip is None for b in docblocks.blocks(p))]


def test_every_block_runs_or_says_why_not():
    every = [b for p in docblocks.doc_files() for b in docblocks.blocks(p)]  # (a skip without a reason raises)
    runs = [b.where for b in every if b.skip is None]
    # README's sketch, its runs loop and its hashing hooks; docs/hf.md, logging.md and torch.md: at least these
    assert {"README.md", "docs/hf.md", "docs/logging.md", "docs/torch.md"} <= {w.split(":")[0] for w in runs}, runs
    assert all(b.skip and len(b.skip) > 10 for b in every if b.skip is not None)
    # 7 of the 23 visible blocks run (the rest say why); the old `docs-test:` comments are gone (sybil ignores them)
    assert len([b for b in every if b.skip is None and not b.hidden]) >= 7
    assert not [p for p in docblocks.doc_files() if "<!-- docs-test:" in p.read_text()]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_docs_python_blocks_run(path, tmp_path):
    bs = docblocks.blocks(path)
    cp = docblocks.run(bs, tmp_path)
    assert cp.returncode == 0, (f"{docblocks.failed_block(cp.stderr)} failed (the traceback's line numbers are "
                                f"the document's):\n{cp.stderr[-4000:]}\n"
                                f"stdout:\n{cp.stdout[-2000:]}")


def test_the_collector_reads_sybil_s_comments_and_runs_blocks_in_order(tmp_path):
    """sybil's skip needs a reason here and binds the next block only (or a start … end run); an
    invisible block runs right before its block, in the same process as the file's other blocks; a
    failure names its block, and its traceback the document's line."""
    doc = tmp_path / "sample.md"
    doc.write_text("""# sample

<!-- invisible-code-block: python
x = 41
-->
```python
x += 1
```

<!-- skip: next "needs a GPU" -->

```python
import not_installed_anywhere
```

<!-- skip: start "outlines of a training loop" -->
```python
import not_installed_either
```
```python
import nor_this
```
<!-- skip: end -->

text

```python
assert x == 42
print("ran", x)
raise RuntimeError("boom")
```
""")
    bs = docblocks.blocks(doc)
    assert [(b.line, b.first, b.skip, b.hidden, b.code.strip().splitlines()[0]) for b in bs] == [
        (3, 4, None, True, "x = 41"), (6, 7, None, False, "x += 1"),
        (12, 13, "needs a GPU", False, "import not_installed_anywhere"),
        (17, 18, "outlines of a training loop", False, "import not_installed_either"),
        (20, 21, "outlines of a training loop", False, "import nor_this"),
        (27, 28, None, False, "assert x == 42")]
    cp = docblocks.run(bs, tmp_path)
    assert cp.returncode == 1 and "ran 42" in cp.stdout, cp.stderr
    assert docblocks.failed_block(cp.stderr) == "sample.md:27"
    assert 'sample_md.py", line 30' in cp.stderr and "RuntimeError: boom" in cp.stderr, cp.stderr
    for bare in ("next", "start"):
        doc.write_text(f"<!-- skip: {bare} -->\n```python\npass\n```\n")
        with pytest.raises(ValueError, match=f'sample.md:1: a docs skip must say why: <!-- skip: {bare} "REASON"'):
            docblocks.blocks(doc)
