"""The docs run (issue 53 §4): every ```python block of README.md and docs/*.md is run, each file's
blocks in order in one fresh process with a store of its own, or says why it is not
(``<!-- docs-test: skip REASON -->`` above it); see tests/docblocks.py."""
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


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_docs_python_blocks_run(path, tmp_path):
    bs = docblocks.blocks(path)
    cp = docblocks.run(bs, tmp_path)
    assert cp.returncode == 0, (f"{docblocks.failed_block(cp.stderr)} failed:\n{cp.stderr[-4000:]}\n"
                                f"stdout:\n{cp.stdout[-2000:]}")


def test_the_collector_reads_directives_and_runs_blocks_in_order(tmp_path):
    """skip needs a reason and binds the next block only; set-up code runs right before its
    block, in the same process as the file's other blocks; a failure names its block."""
    doc = tmp_path / "sample.md"
    doc.write_text("""# sample

<!-- docs-test: setup
x = 41
-->
```python
x += 1
```

<!-- docs-test: skip needs a GPU -->

```python
import not_installed_anywhere
```

text

```python
assert x == 42
print("ran", x)
raise SystemExit(3)
```
""")
    bs = docblocks.blocks(doc)
    assert [(b.line, b.skip, b.setup.strip()) for b in bs] == [
        (6, None, "x = 41"), (12, "needs a GPU", ""), (18, None, "")]
    cp = docblocks.run(bs, tmp_path)
    assert cp.returncode == 3 and "ran 42" in cp.stdout, cp.stderr
    assert docblocks.failed_block(cp.stderr) == "sample.md:18"
    doc.write_text("<!-- docs-test: skip -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="must say why"):
        docblocks.blocks(doc)
