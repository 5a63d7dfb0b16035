"""Resuming from a state taken before, within or between epochs, in a fresh process.

``resumable``'s contract (docs/torch.md, "Resumable iteration"): every later
epoch equals the uninterrupted loader's, bitwise, whichever of the three
places the state was taken at. Each stage below is a new interpreter that
seeds itself differently, rebuilds the loader from its configuration and
loads the state, the way a training script restarted after a crash does.
The loop draws from the global generator before each epoch and after each
batch (a training step does), so the random states a resumed loader leaves
behind are checked along with its batches.
"""
from __future__ import annotations

import signal
import sqlite3

import pytest

from conftest import require

require("torch")
require("numpy")

pytestmark = pytest.mark.preload("torch", "numpy")  # the runs fork from a server (tests/zygote.py)

POSITIONS = """
import json, pickle, random, sys
import numpy as np, torch
from torch.utils.data import DataLoader, Dataset
from memolab.torch import resumable

EPOCHS = 4


class Augmenting(Dataset):
    # random augmentation from all three global generators (in the workers with num_workers=2)
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor([float(i)]) + torch.rand(1) + random.random() + float(np.random.rand())


def seed(s):
    torch.manual_seed(s); random.seed(s); np.random.seed(s)


def make(gen, workers):
    return resumable(DataLoader(Augmenting(), batch_size=3, shuffle=True, num_workers=workers,
                                generator=torch.Generator().manual_seed(5) if gen else None))


def prepare(gen, workers):
    # a first process: seeded, and the generators moved on before any epoch
    seed(0)
    loader = make(gen, workers)
    torch.rand(2)
    if gen:
        torch.rand(2, generator=loader.loader.generator)
    return loader


def train(loader, start, stop=None):
    # a training script's loop from epoch `start`; stop=(epoch, k) leaves (break) after
    # k batches of that epoch, stop=(epoch, None) after the epoch
    out = []
    for epoch in range(start, EPOCHS):
        torch.rand(1)  # the epoch's preamble draws (re-run by a resumed process)
        for i, b in enumerate(loader):
            out.append([b.flatten().tolist(), torch.rand(1).item()])  # a step draws (dropout)
            if stop == [epoch, i + 1]:
                return out
        if stop == [epoch, None]:
            return out
    out.append(["after the last epoch", torch.rand(1).item(), random.random(), float(np.random.rand())])
    return out


def start_of(stop):
    # where a script restarted from a state taken at `stop` starts its loop
    if stop == "before":
        return 0
    epoch, k = stop
    return epoch if k is not None else epoch + 1


CASES = {
    "before the first epoch": ["before"],
    "within an epoch": [[1, 2]],
    "between epochs": [[1, None]],
    "all batches taken, loop left before StopIteration": [[1, 4]],
    "twice: within, then between": [[0, 1], [1, None]],
    "twice: between, then within": [[0, None], [2, 3]],
}
CONFIGS = [(gen, workers) for gen in (True, False) for workers in (0, 2)]

stage = int(sys.argv[1])
if stage == 0:
    runs = {}
    for gen, workers in CONFIGS:
        ref = train(prepare(gen, workers), 0)
        for name, stops in CASES.items():
            loader = prepare(gen, workers)
            got = [] if stops[0] == "before" else train(loader, 0, stops[0])
            runs[f"{name}, generator={gen}, num_workers={workers}"] = dict(
                gen=gen, workers=workers, ref=ref, got=got, stops=list(stops), state=loader.state_dict())
else:
    with open("runs.pkl", "rb") as f:
        runs = pickle.load(f)
    for run in runs.values():
        if not run["stops"]:
            continue
        seed(100 + stage)  # whatever the restarted process does first...
        loader = make(run["gen"], run["workers"])
        loader.load_state_dict(run["state"])  # ...the state decides what follows
        done = run["stops"].pop(0)
        stop = run["stops"][0] if run["stops"] else None
        run["got"] += train(loader, start_of(done), stop)
        run["state"] = loader.state_dict()
with open("runs.pkl", "wb") as f:
    pickle.dump(runs, f)
print(json.dumps({name: [run["got"], run["ref"]] for name, run in runs.items() if not run["stops"]}))
"""


@pytest.mark.slow
def test_resumable_resumes_exactly_from_before_within_and_between_epochs(project):
    project.write("positions.py", POSITIONS)
    project.run("positions.py", "0")
    finished = {}
    for stage in (1, 2):  # the two-resume cases need the second stage
        finished.update(project.run_json("positions.py", str(stage)))
    assert len(finished) == 6 * 4
    wrong = sorted(name for name, (got, ref) in finished.items() if got != ref)
    assert wrong == []


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
        return self.x[i] + 0.05 * torch.randn(1), 3 * self.x[i] + 0.5  # augmentation from the global generator


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
    loader = resumable(DataLoader(Noisy(n), batch_size=8, shuffle=True,
                                  generator=torch.Generator().manual_seed(1)))
    ck = memolab.checkpoint(model=model, optimizer=opt, scheduler=sched, loader=loader)
    state = ck.restore(epoch=0)
    print("RESUMED", state["epoch"], flush=True)
    for epoch in range(state["epoch"], epochs):
        jitter = 0.01 * torch.randn(1)  # the epoch's own draw, after the previous epoch's checkpoint
        for x, y in loader:
            loss = ((model(x) + jitter - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            memolab.log.scalar("loss", loss.item())
        sched.step()
        memolab.log.scalar("lr", sched.get_last_lr()[0], step=epoch)
        ck.save(epoch=epoch + 1)  # at the end of the epoch, the natural place
        if epoch + 1 == int(os.environ.get("CRASH_AFTER_EPOCH", "-1")):
            os.kill(os.getpid(), 9)
    return {k: v.clone() for k, v in model.state_dict().items()}


if __name__ == "__main__":
    out = train(32, 4)
    print(json.dumps({k: v.numpy().tobytes().hex() for k, v in out.items()}))
"""


def _curves(store) -> list:
    c = sqlite3.connect(str(store / "index.sqlite"))
    run = c.execute("SELECT r.id FROM runs r JOIN evaluations e ON r.eval_id = e.id "
                    "WHERE e.fn LIKE '%train'").fetchone()[0]
    # the body's own curves: the system metrics (``sys/*``) are sampled only once a run has taken
    # long enough, which a loaded machine decides (24 points instead of 20 under load)
    return c.execute("SELECT tag, step, seq, value FROM scalars WHERE run=? AND tag NOT LIKE 'sys/%' "
                     "ORDER BY tag, seq", (run,)).fetchall()


@pytest.mark.slow
def test_checkpoint_killed_after_an_epoch_end_save_resumes_to_the_uninterrupted_run(project, tmp_path):
    project.write("train.py", TRAIN)
    args = ("train.py",)
    clean = project.run(*args, env={"MEMOLAB_STORE": str(tmp_path / "clean")})
    crashed = project.run(*args, env={"CRASH_AFTER_EPOCH": "2"}, check=False)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    resumed = project.run(*args)
    assert "RESUMED 2" in resumed.stdout  # from the epoch-end checkpoint, not from the start
    assert resumed.stdout.strip().splitlines()[-1] == clean.stdout.strip().splitlines()[-1]  # every weight, bitwise
    curves = _curves(project.store)
    assert len(curves) == 4 * 4 + 4  # 4 epochs of 4 steps, and one lr point per epoch
    assert curves == _curves(tmp_path / "clean")


def test_persistent_workers_state_between_epochs_resumes_the_next_epoch():
    # a later epoch reuses the workers' iterator (no new base seed): the rebuilt
    # loader and the stored copy must do the same, though they start new workers
    import torch
    from torch.utils.data import DataLoader

    from memolab import pickling
    from memolab.torch import resumable

    def make():
        return resumable(DataLoader(list(range(12)), batch_size=2, shuffle=True, num_workers=2, persistent_workers=True,
                                    generator=torch.Generator().manual_seed(3)))

    r = make()
    ref = [b.tolist() for _ in range(4) for b in r]
    r = make()
    assert [b.tolist() for _ in range(2) for b in r] == ref[:12]
    state = r.state_dict()
    data, buffers = pickling.dumps(r)
    stored = pickling.loads(data, [bytes(b) for b in buffers])
    rebuilt = make()
    rebuilt.load_state_dict(state)
    assert [b.tolist() for _ in range(2) for b in rebuilt] == ref[12:]
    assert [b.tolist() for _ in range(2) for b in stored] == ref[12:]


def test_a_loader_stored_between_epochs_is_its_configuration_and_sets_no_random_state():
    # loading a result is not resuming a training: the stored copy draws its next
    # epoch from the loading process's global generator, as the live object does
    import torch
    from torch.utils.data import DataLoader

    from memolab import pickling
    from memolab.torch import resumable

    r = resumable(DataLoader(list(range(10)), batch_size=3, shuffle=True))
    torch.manual_seed(0)
    list(r)
    data, buffers = pickling.dumps(r)
    torch.manual_seed(7)
    stored = pickling.loads(data, [bytes(b) for b in buffers])
    assert torch.equal(torch.get_rng_state(), torch.manual_seed(7).get_state())
    got = [b.tolist() for b in stored]
    torch.manual_seed(7)
    assert got == [b.tolist() for b in r]
    before = torch.get_rng_state()
    r.load_state_dict({"position": None})  # what an older memolab saved between epochs
    assert torch.equal(torch.get_rng_state(), before)
