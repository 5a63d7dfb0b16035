"""Arguments a memoized body changes (``memolab.inputs.mutations``, issue 48 §1): what a miss and a hit cost.

A ~100 MB module (one 5000 x 5000 ``Linear``) passed to two memoized functions:

* ``look``: a forward pass under ``no_grad`` (the body changes nothing). A miss now hashes the
  arguments again after the body (the identity cache proves the parameters unwritten: O(1)) and
  walks them for live iterators; a hit is the usual key + lookup + small load.
* ``train``: one SGD step (the body changes the module and the optimizer in place). A miss stores
  the module and the optimizer with the result (~100 MB through the blob store); a hit rehashes the
  restored module for its key (the caller's tensors were written by the restore), loads the stored
  state and copies it into the caller's parameters.

Each round uses a new argument ``i`` (a new key): a miss, then the module put back to where it
was, then the same call again (a hit). "body" is the un-memoized function on the same state;
"changed()" the after-body check alone. Cells are medians (min–max) over the rounds.

    python benchmarks/mutated_args.py [--rounds 3] [--size 5000]

The machine is usually shared: quote ratios, and the load average printed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
warnings.simplefilter("ignore")

import torch  # noqa: E402

import memolab  # noqa: E402
from memolab import hashing  # noqa: E402
from memolab.inputs import mutations  # noqa: E402


def look_body(model: torch.nn.Module, x: torch.Tensor, i: int) -> float:
    with torch.no_grad():
        return float(model(x).sum()) + i


def train_body(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, i: int) -> float:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss) + i


def cell(xs: list[float]) -> str:
    ms = [x * 1e3 for x in xs]
    return f"{statistics.median(ms):8.1f} ms ({min(ms):.1f}–{max(ms):.1f})"


def timed(fn: object, *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=5000)
    a = ap.parse_args()
    store = tempfile.mkdtemp(prefix="memolab-bench-mut-")
    os.environ["MEMOLAB_STORE"] = store
    look = memolab.memo(look_body)
    train = memolab.memo(train_body)
    torch.manual_seed(0)
    model = torch.nn.Linear(a.size, a.size)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, a.size)
    mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    start = {k: v.clone() for k, v in model.state_dict().items()}
    rows: dict[str, list[float]] = {k: [] for k in (
        "look body", "look miss", "look hit", "look changed()",
        "train body", "train miss", "train hit", "train changed()")}

    def reset() -> None:
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(start[k])

    look(model, x, -1)  # the first hash of the module and the identity cache's records: not measured
    for r in range(a.rounds):
        rows["look body"].append(timed(look_body, model, x, r))
        rows["look miss"].append(timed(look, model, x, r))
        rows["look hit"].append(timed(look, model, x, r))
        named = [("model", model), ("x", x), ("i", r)]
        _, per = hashing.hash_arguments(named)
        rows["look changed()"].append(timed(mutations.changed, named, per, mutations.live_parts(named)))

        reset()
        rows["train body"].append(timed(train_body, model, opt, x, r))
        reset()
        rows["train miss"].append(timed(train, model, opt, x, 1000 + r))
        reset()
        rows["train hit"].append(timed(train, model, opt, x, 1000 + r))
        reset()
        named = [("model", model), ("opt", opt), ("x", x), ("i", r)]
        _, per = hashing.hash_arguments(named)
        live = mutations.live_parts(named)
        train_body(model, opt, x, r)
        rows["train changed()"].append(timed(mutations.changed, named, per, live))
    print(f"mutated arguments: a {mib:.0f} MiB module, {a.rounds} rounds, load average "
          f"{os.getloadavg()[0]:.1f}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'':18} {'median (min–max)':>28}  vs body")
    for k, v in rows.items():
        body = statistics.median(rows[k.split()[0] + " body"])
        print(f"{k:18} {cell(v):>28}  {statistics.median(v) / body:6.2f}x")


if __name__ == "__main__":
    main()
