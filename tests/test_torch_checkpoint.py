"""memolab.checkpoint: a training run killed mid-way resumes to the uninterrupted result, bitwise.

Every run is a fresh interpreter; the crash is a real SIGKILL (no atexit, no
flush), in the middle of an epoch, three steps after the last checkpoint.
"""
from __future__ import annotations

import json
import signal
import sqlite3

import pytest

from conftest import require

require("torch")

pytestmark = pytest.mark.preload("torch", "numpy")  # the runs fork from a server (tests/zygote.py)

TRAIN = """
import json, os, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
import memolab
from memolab import memo
from memolab.torch import resumable


class Noisy(Dataset):
    def __init__(self, n):
        self.x = torch.linspace(-1, 1, n).unsqueeze(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        # random augmentation drawn from the global generator
        return self.x[i] + 0.05 * torch.randn(1), 3 * self.x[i] + 0.5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.drop, self.l2 = nn.Linear(1, 16), nn.Dropout(0.2), nn.Linear(16, 1)

    def forward(self, x):
        return self.l2(self.drop(torch.tanh(self.l1(x))))


@memo
def train(n, epochs):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    loader = resumable(DataLoader(Noisy(n), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1)))
    ck = memolab.checkpoint(model=model, optimizer=opt, scheduler=sched, loader=loader, every=5)
    state = ck.restore(epoch=0, seen=0)
    print("RESUMED", ck.resumed_from, flush=True)
    crash = int(os.environ.get("CRASH_AT", "-1"))
    seen = state["seen"]
    for epoch in range(state["epoch"], epochs):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(x)
            memolab.log.scalar("loss", loss.item())
            ck.step(epoch=epoch, seen=seen)
            if ck.steps == crash:
                os.kill(os.getpid(), 9)
        sched.step()
        memolab.log.scalar("lr", sched.get_last_lr()[0], step=epoch)
        memolab.log.histogram("l1.weight", model.l1.weight.detach(), step=epoch)
    return {"weights": {k: v.clone() for k, v in model.state_dict().items()}, "seen": seen}


if __name__ == "__main__":
    out = train(48, 4)
    print(json.dumps({"seen": out["seen"],
                      "weights": {k: v.numpy().tobytes().hex() for k, v in out["weights"].items()}}))
"""


def _curves(store) -> dict:
    c = sqlite3.connect(str(store / "index.sqlite"))
    run = c.execute("SELECT r.id FROM runs r JOIN evaluations e ON r.eval_id = e.id WHERE e.fn LIKE '%train'").fetchone()[0]
    # the training's own curves: a run longer than the system-metrics interval (10 s: under load)
    # has sys/ tags as well, sampled at other moments in each run
    mine = "tag NOT LIKE 'sys/%'"
    points = c.execute(f"SELECT tag, step, seq, value FROM scalars WHERE run=? AND {mine} ORDER BY tag, seq",
                       (run,)).fetchall()
    tags = c.execute("SELECT tag, n, last_step, last_value, first_step, ordered FROM scalar_tags "
                     f"WHERE run=? AND {mine} ORDER BY tag", (run,)).fetchall()
    blocks = c.execute("SELECT tag, block, n, step_min, step_max, value_sum, vmin, vmax FROM scalar_blocks "
                       f"WHERE run=? AND {mine} ORDER BY tag, block", (run,)).fetchall()
    events = c.execute("SELECT kind, tag, step, meta, data FROM log_events WHERE run=? ORDER BY id", (run,)).fetchall()
    assert events  # the histograms are compared too
    return {"points": points, "tags": tags, "blocks": blocks, "events": events}


def _checkpoints(store) -> list:
    if not (store / "index.sqlite").exists():
        return []
    c = sqlite3.connect(str(store / "index.sqlite"))
    try:
        return c.execute("SELECT fn, step FROM checkpoints").fetchall()
    except sqlite3.OperationalError:
        return []


def _result(cp) -> dict:
    return json.loads(cp.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sigkill_then_rerun_equals_an_uninterrupted_run(project, tmp_path):
    project.write("train.py", TRAIN)
    clean = project.run("train.py", env={"MEMOLAB_STORE": str(tmp_path / "clean")})
    assert "RESUMED None" in clean.stdout

    crashed = project.run("train.py", env={"CRASH_AT": "13"}, check=False)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert _checkpoints(project.store) != []  # the step-10 checkpoint survived the kill

    resumed = project.run("train.py")
    assert "RESUMED 10" in resumed.stdout  # not from the start, not from step 13
    assert _result(resumed) == _result(clean)  # every weight, bitwise
    assert _curves(project.store) == _curves(tmp_path / "clean")  # the logged curves too
    assert _checkpoints(project.store) == []  # dropped once the result is stored


# -- in-process rules (no torch needed: anything with state_dict/load_state_dict) -----------------

class Counter:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, s: dict) -> None:
        self.n = s["n"]


def _count(crash_at, keep=False):
    import memolab

    c = Counter()
    ck = memolab.checkpoint(counter=c, every=3, keep=keep)
    state = ck.restore(total=0)
    total = state["total"]
    while c.n < 10:
        c.n += 1
        total += c.n
        ck.step(total=total)
        if c.n == crash_at:
            raise KeyboardInterrupt  # a crash that leaves the process alive
    return total, ck.resumed_from


def test_checkpoint_outside_a_memoized_call_does_nothing(tmp_store):
    assert _count(None) == (55, None)
    assert _checkpoints(tmp_store) == []


def test_checkpoint_blobs_survive_gc_and_clear_removes_them(tmp_store):
    from conftest import Calls
    from memolab import memo
    from memolab.store import get_store

    calls = Calls()

    @memo
    def count(crash_at_first: int):
        calls.append(1)
        return _count(crash_at_first if len(calls) == 1 else None)

    with pytest.raises(KeyboardInterrupt):
        count(7)
    assert [s for _, s in _checkpoints(tmp_store)] == [6]
    get_store().collect_garbage()  # no lease is live: only the checkpoint's reference keeps its blobs
    assert count(7) == (55, 6)  # resumed from step 6, same total as an uninterrupted count
    assert _checkpoints(tmp_store) == []

    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        count(5)
    assert _checkpoints(tmp_store) != []
    count.clear()
    assert _checkpoints(tmp_store) == []


def test_points_logged_before_restore_follow_the_continued_logs(tmp_store):
    """A resumed run may hold points of a tag before ``restore`` gives it the old run's (the
    system metrics sampled during a slow start did; so does a program that logs first): the
    copied points come first, the run's own after them, and logging goes on. The copy used to
    skip the points whose numbers were taken while the sink counted on from its own, so the
    next flush failed on the store's unique key and the resumed training raised."""
    import memolab
    from conftest import Calls
    from memolab import memo

    calls = Calls()

    @memo
    def count(tag: str):
        calls.append(1)
        memolab.log.scalar("loss", -1.0)  # before restore: this run's own first point
        c = Counter()
        ck = memolab.checkpoint(counter=c, every=1)
        ck.restore()
        while c.n < 4:
            c.n += 1
            memolab.log.scalar("loss", float(c.n))
            ck.step()
            if c.n == 2 and len(calls) == 1:
                raise KeyboardInterrupt  # after the step-2 checkpoint
        memolab.log.scalar("loss", 100.0)
        return c.n

    with pytest.raises(KeyboardInterrupt):
        count("a")
    assert count("a") == 4
    c = sqlite3.connect(str(tmp_store / "index.sqlite"))
    run = c.execute("SELECT r.id FROM runs r JOIN evaluations e ON r.eval_id = e.id").fetchone()[0]
    points = c.execute("SELECT seq, value FROM scalars WHERE run=? AND tag='loss' ORDER BY seq", (run,)).fetchall()
    assert points == list(enumerate([-1.0, 1.0, 2.0, -1.0, 3.0, 4.0, 100.0]))
    n, last = c.execute("SELECT n, last_value FROM scalar_tags WHERE run=? AND tag='loss'", (run,)).fetchone()
    assert (n, last) == (7, 100.0)
    assert c.execute("SELECT SUM(n), SUM(value_sum) FROM scalar_blocks WHERE run=? AND tag='loss'",
                     (run,)).fetchone() == (7, 108.0)


def test_fresh_starts_over_and_keep_keeps_the_checkpoint(tmp_store):
    from memolab import memo

    state = {"crash": 7, "keep": False}

    @memo
    def count(tag: str):
        return _count(state["crash"], keep=state["keep"])

    with pytest.raises(KeyboardInterrupt):
        count("a")
    state["crash"] = None
    assert count.fresh("a") == (55, None)  # fresh(): not resumed...
    assert _checkpoints(tmp_store) == []  # ...and the old checkpoint is gone

    state.update(crash=None, keep=True)
    assert count("b") == (55, None)
    assert [s for _, s in _checkpoints(tmp_store)] == [9]  # keep=True: the last one stays


def test_checkpoint_refuses_objects_without_state():
    import memolab

    with pytest.raises(TypeError, match="state_dict"):
        memolab.checkpoint(model=object())
    with pytest.raises(ValueError):
        memolab.checkpoint(every=0)


def test_a_checkpoint_that_cannot_be_saved_warns_and_training_goes_on(tmp_store):
    import threading

    import memolab
    from memolab import MemolabWarning, memo

    @memo
    def count_with_lock():
        c = Counter()
        ck = memolab.checkpoint(counter=c, every=2)
        ck.restore()
        while c.n < 4:
            c.n += 1
            ck.step(lock=threading.Lock())  # an extra that cannot be stored
        return c.n

    with pytest.warns(MemolabWarning, match="checkpoint not saved"):
        assert count_with_lock() == 4


def test_a_code_edit_between_crash_and_rerun_ignores_the_checkpoint(tmp_store):
    from conftest import Calls
    from memolab import memo

    def make(step_size: int):
        # the same function, edited: another code digest, so another key
        if step_size == 1:
            def count(tag: str, crash: Calls):  # Calls is opaque: not in the key
                return _count(crash[0] if crash else None)
        else:
            def count(tag: str, crash: Calls):
                return _count(crash[0] if crash else None) if step_size else None
        return memo(count)

    with pytest.raises(KeyboardInterrupt):
        make(1)("a", Calls([7]))
    assert [s for _, s in _checkpoints(tmp_store)] == [6]
    assert make(2)("a", Calls()) == (55, None)  # the edited code does not resume from the old code's checkpoint
    assert _checkpoints(tmp_store) == []  # which its own first checkpoint superseded; its own went on success


def test_seconds_and_signed_checkpoints(tmp_store, monkeypatch):
    import memolab
    from conftest import Calls
    from memolab import MemolabWarning, memo

    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "k1")

    @memo
    def timed(crash: Calls):  # opaque: the same key whether it crashes or not
        c = Counter()
        ck = memolab.checkpoint(counter=c, seconds=1e-9)  # due at every step
        ck.restore()
        while c.n < 5:
            c.n += 1
            ck.step()
            if crash and c.n == 4:
                raise KeyboardInterrupt
        return ck.resumed_from

    with pytest.raises(KeyboardInterrupt):
        timed(Calls([1]))
    assert [s for _, s in _checkpoints(tmp_store)] == [4]
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "another key")  # a row signed with another key is refused...
    with pytest.raises(KeyboardInterrupt), pytest.warns(MemolabWarning, match="signature"):
        timed(Calls([1]))
    sqlite3.connect(str(tmp_store / "index.sqlite")).execute(
        "UPDATE checkpoints SET payload_size=payload_size+1").connection.commit()
    with pytest.warns(MemolabWarning, match="signature"):
        assert timed(Calls()) is None  # ...and so is a row edited under the right key


def test_async_memoized_functions_checkpoint_too(tmp_store):
    import asyncio

    from conftest import Calls
    from memolab import memo

    @memo
    async def count(crash: Calls):
        await asyncio.sleep(0)
        return _count(crash[0] if crash else None)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(count(Calls([8])))
    assert asyncio.run(count(Calls())) == (55, 6)
    assert _checkpoints(tmp_store) == []
