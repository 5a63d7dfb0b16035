"""Issue 53 §2: arguments summarised in every text face by one summarizer (memolab/calls/summary.py),
the arguments that vary between a sweep's rows first in ``ls`` and ``runs``, and ``ls``'s STATUS."""
from __future__ import annotations

import json
import re

from memolab.calls import summary

SWEEP = """
import contextlib, io, json, logging, sys
import torch
import memolab
from memolab import memo
from memolab.cli import main


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(20, 2)


@memo
def train(ds, model, optimizer, lr, seed, epochs=3):
    return {"loss": lr * seed, "weights": torch.ones(64, 64)}


torch.manual_seed(0)
ds = {"Xtr": torch.randn(3000, 20), "ytr": torch.zeros(3000, dtype=torch.long)}
model = Net()
lines = []
handler = logging.Handler()
handler.emit = lambda rec: lines.append(rec.getMessage())
logging.getLogger("memolab").addHandler(handler)
logging.getLogger("memolab").setLevel(logging.INFO)
for opt in ("adam", "sgd"):
    for lr in (0.1, 0.01):
        train(ds, model, opt, lr, seed=1)
train(ds, model, "adam", 0.1, seed=1)  # a hit
out = {"miss": lines}
for cmd in (["ls", "train"], ["runs", "train"], ["show", "1"], ["why", "train"]):
    with contextlib.redirect_stdout(io.StringIO()) as o:
        assert main(cmd) == 0, cmd
    out[cmd[0]] = o.getvalue()
out["html"] = memolab.runs(train)._repr_html_()
print(json.dumps(out))
"""


def test_every_face_shows_typed_summaries_and_a_sweep_s_varying_arguments_first(project):
    project.write("sweep.py", SWEEP)
    out = project.run_json("sweep.py", env={"MEMOLAB_VERBOSE": "2", "COLUMNS": "100"})
    misses = [ln for ln in out["miss"] if " miss " in ln]
    assert len(misses) == 4, out["miss"]
    for line, (opt, lr) in zip(misses, [("adam", 0.1), ("adam", 0.01), ("sgd", 0.1), ("sgd", 0.01)], strict=True):
        # the arguments that tell a sweep's calls apart are within the line's first 100 characters
        head = line[:100]
        assert f"optimizer='{opt}'" in head and f"lr={lr}" in head and "seed=1" in head, line
        assert "tensor([[" not in line and "Net(" in line, line
    ls = out["ls"]
    # the arguments all rows share, once above the table: typed, never a tensor's values
    assert "same in all 4: ds={'Xtr': tensor(float32, 3000×20), " in ls, ls
    assert "model=Net(42 params)" in ls and "seed=1" in ls.split("ID")[0], ls
    rows = [ln for ln in ls.splitlines() if re.match(r"\s*\d+ ", ln)]
    assert len(rows) == 4, ls
    for r in rows:  # each row: its varying arguments only, and a STATUS
        assert re.search(r"optimizer='(adam|sgd)', lr=0\.0?1\b", r) and "ds=" not in r and "seed" not in r, r
        assert re.search(r"\b(hit|stored)\b", r), r
    assert sum(" hit " in r for r in rows) == 1, ls
    runs = out["runs"]
    assert "same in all 4: " in runs and "epochs=3" in runs, runs
    assert re.search(r"optimizer=adam lr=0\.01", runs), runs
    assert "tensor(float32, 3000×20)" in out["show"] and "Net(42 params)" in out["show"], out["show"]
    assert "'weights': tensor(float32, 64×64)" in out["show"], out["show"]  # the result too
    assert "tensor([[" not in out["show"] + out["why"]
    assert "tensor(float32, 3000×20)" in out["html"] and "Net(42 params)" in out["html"]


def test_the_summarizer_dispatches_by_type_and_elides_alike():
    class Point(tuple):  # a subclass finds its base's summarizer
        pass

    assert summary.text(list(range(100))) == "[0, 1, 2, 3, … 96 more]"
    assert summary.text({"a": 1, "b": [1, [2, [3]]], "c": 3, "d": 4, "e": 5}) == \
        "{'a': 1, 'b': [1, […]], 'c': 3, 'd': 4, … 1 more}"
    assert summary.text(Point((1, 2))) == "Point((1, 2))"
    assert summary.text("x" * 100) == repr("x" * 40) + "…"
    assert summary.text({"api_key": "sk-123", "lr": 0.1}) == "{'api_key': '<masked>', 'lr': 0.1}"
    assert summary.text(b"abc") == "bytes(3 B)"

    class Frame:  # a library's class, registered by its qualified name (the library is never imported)
        shape = (8000, 2)

    Frame.__module__, Frame.__qualname__, Frame.__name__ = "pandas", "DataFrame", "DataFrame"
    assert summary.text(Frame()) == "DataFrame(8,000×2)"

    class Odd:
        pass

    summary.register(Odd, lambda x, depth: "odd one")
    try:
        assert summary.text([Odd()]) == "[odd one]"
    finally:
        summary._BY_TYPE.pop(Odd)
        summary._resolved.clear()
    # a line too long: its longest text is cut first, the short ones stay
    assert summary.fit([("ds", "{" + "x" * 80 + "}"), ("lr", "0.1"), ("seed", "3")], 40) == \
        "ds={" + "x" * 19 + "…, lr=0.1, seed=3"
    assert json.dumps(summary.text(None)) == '"None"'
