"""Lightning, first class (docs/lightning.md): keys of Trainer-touched objects, and MemolabLogger.

In this process: one real ``Trainer.fit`` (module fixture) whose loaders, module and
datamodule are keyed against plain twins. In fresh processes, as users work: a loader
made in ``train_dataloader()`` under ``Trainer.fit`` hits on the plain loader's stored
result, a datamodule (and module) a Trainer used hits in the next process, and
``self.log`` metrics logged through ``MemolabLogger`` are stored with the evaluation and
read back after a hit, point for point as Lightning's own ``CSVLogger`` wrote them.
"""
from __future__ import annotations

import csv
import subprocess
import sys
import warnings
from argparse import Namespace
from pathlib import Path

import pytest

from conftest import require

require("lightning")
import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset  # noqa: E402

import memolab  # noqa: E402
from conftest import SRC, Calls  # noqa: E402, require
from memolab import HashError, hashing, memo  # noqa: E402
from memolab.lightning import MemolabLogger  # noqa: E402
from memolab.store import get_store  # noqa: E402
from memolab.tracking import query  # noqa: E402

PATCH_ATTRS = {"__pl_saved_args", "__pl_saved_kwargs", "__pl_inside_init"}
#: the loaders DM made under Trainer.fit, by name (kept outside the datamodule, whose attributes are
#: keyed, in an opaque list: a global the methods read is keyed by value)
MADE = Calls()


def trainer(root, **kw):
    kw.setdefault("logger", False)
    return L.Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, max_epochs=1, default_root_dir=str(root), **kw)


def data(n=24):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, x.sum(1, keepdim=True)


class DM(L.LightningDataModule):
    def __init__(self, n: int = 24, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.x, self.y = data(n)

    def train_dataloader(self):
        # pin_memory is left out of loader keys: under the patch it also lands in __pl_saved_kwargs
        dl = DataLoader(TensorDataset(self.x, self.y), batch_size=self.hparams.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(1), pin_memory=True)
        MADE.append(("train", dl))
        return dl

    def val_dataloader(self):
        dl = DataLoader(TensorDataset(self.x, self.y),
                        batch_sampler=BatchSampler(SequentialSampler(range(len(self.x))), 6, False))
        MADE.append(("val", dl))
        return dl


class Reg(L.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, i):
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def on_train_end(self):
        # keyed while the Trainer runs it: _trainer set, _current_fx_name "on_train_end"
        MADE.append(("on_train_end", hashing.hash_value(self)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    torch.manual_seed(0)
    dm, m = DM(), Reg()
    before = hashing.hash_value(dm)
    t = trainer(tmp_path_factory.mktemp("fit"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.fit(m, dm)
    return Namespace(dm=dm, m=m, trainer=t, dm_before=before)


def test_a_loader_made_under_lightnings_patch_keys_like_the_plain_one(fitted):
    train_dl, val_dl = dict(MADE)["train"], dict(MADE)["val"]
    # what makes the test able to fail: Lightning's patch did record its copy of the arguments
    assert PATCH_ATTRS <= set(vars(train_dl)) and PATCH_ATTRS <= set(vars(train_dl.batch_sampler))
    assert vars(train_dl)["__pl_saved_kwargs"]["pin_memory"] is True
    assert PATCH_ATTRS <= set(vars(val_dl.batch_sampler))
    x, y = fitted.dm.x, fitted.dm.y
    plain = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert hashing.hash_value(train_dl) == hashing.hash_value(plain)
    plain_val = DataLoader(TensorDataset(x, y), batch_sampler=BatchSampler(SequentialSampler(range(len(x))), 6, False))
    assert hashing.hash_value(val_dl) == hashing.hash_value(plain_val)
    # the configuration still counts
    other = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert hashing.hash_value(train_dl) != hashing.hash_value(other)


def test_a_datamodule_keys_by_content_not_by_the_trainer_that_used_it(fitted):
    dm = fitted.dm
    assert dm.trainer is fitted.trainer  # the link that made its key change in every process
    assert hashing.hash_value(dm) == fitted.dm_before
    assert hashing.hash_value(dm) != hashing.hash_value(DM(batch_size=4))  # hparams count
    changed = DM()
    changed.x = changed.x + 1
    assert hashing.hash_value(dm) != hashing.hash_value(changed)  # the datasets count, by content


def test_a_module_keys_by_content_not_by_the_run_around_it(fitted):
    m = fitted.m
    assert m.trainer is fitted.trainer
    # keyed inside the fit (trainer attached, a hook running) as after it
    assert dict(MADE)["on_train_end"] == hashing.hash_value(m)
    m._current_fx_name, m._param_requires_grad_state = "training_step", {"net.weight": True}
    try:
        assert hashing.hash_value(m) == dict(MADE)["on_train_end"]
    finally:
        m._current_fx_name, m._param_requires_grad_state = None, {}
    untrained = Reg()
    untrained.load_state_dict(m.state_dict())
    assert hashing.hash_value(untrained) == hashing.hash_value(m)  # same weights, hparams, code: same key
    with torch.no_grad():
        untrained.net.bias += 1
    assert hashing.hash_value(untrained) != hashing.hash_value(m)
    assert hashing.hash_value(Reg(lr=0.2)) != hashing.hash_value(Reg(lr=0.1))


def test_a_trainer_or_fabric_argument_is_refused_naming_its_path(fitted, tmp_store):
    @memo
    def fit(cfg, trainer):
        return cfg

    with pytest.raises(HashError) as ei:
        fit({"lr": 0.1}, fitted.trainer)
    assert ei.value.path == "args['trainer']" and "Lightning Trainer is not part of a key" in str(ei.value)
    with pytest.raises(HashError) as ei:
        fit({"lr": 0.1, "run": {"trainer": fitted.trainer}}, None)
    assert ei.value.path == "args['cfg']['run']['trainer']"
    with pytest.raises(HashError, match="Lightning Fabric is not part of a key"):
        hashing.hash_value(L.Fabric(accelerator="cpu", devices=1))


def test_the_standalone_pytorch_lightning_package_registers_the_same_rules():
    ptl = require("pytorch_lightning")

    class D(ptl.LightningDataModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.x = torch.arange(4)

    dm = D()
    before = hashing.hash_value(dm)
    t = ptl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, enable_checkpointing=False)
    dm.trainer = t
    assert hashing.hash_value(dm) == before
    with pytest.raises(HashError, match="Lightning Trainer is not part of a key") as ei:
        hashing.hash_value({"t": t})
    assert ei.value.path == "['t']"


def test_loggers_are_left_out_of_keys(tmp_path):
    assert hashing.hash_value(CSVLogger(str(tmp_path / "a"))) == hashing.hash_value(CSVLogger(str(tmp_path / "b")))
    assert hashing.hash_value(MemolabLogger(prefix="a")) == hashing.hash_value(MemolabLogger())


def test_memolab_logger_outside_a_memoized_call_logs_to_the_process_run(tmp_store):
    lg = MemolabLogger()
    lg.log_metrics({"train_loss_step": 0.5, "epoch": 0}, step=3)
    lg.log_metrics({"train_loss_step": 0.25, "epoch": 1}, step=7)
    lg.log_hyperparams(Namespace(lr=0.1, opt={"name": "sgd", "momentum": 0.9}))
    lg.finalize("success")
    run = memolab.log.current_run()
    assert lg.version == run  # checkpoint folders are named after the run
    idx = get_store().index

    def pts(tag):
        s = query.scalars(idx, run, tag)
        return list(zip(s["step"], s["value"], strict=False))

    assert pts("train_loss_step") == [(3, 0.5), (7, 0.25)] and pts("epoch") == [(3, 0.0), (7, 1.0)]
    (r,) = query.runs(idx, ids=[run])
    assert r["fn"].startswith("<process:") and r["eval_id"] is None
    assert {k: r["hparams"][k] for k in ("lr", "opt/name", "opt/momentum")} == {"lr": 0.1, "opt/name": "sgd",
                                                                                 "opt/momentum": 0.9}
    assert isinstance(lg.experiment, memolab.SummaryWriter)

    # the same logger used inside a memoized call: the points go to that evaluation's run
    @memo
    def evaluate(x):
        lg.log_metrics({"inside": x}, step=0)
        return x

    evaluate(2.0)
    (ev_run,) = [r for r in query.runs(idx, evaluate.symbol) if isinstance(r["id"], int)]
    s = query.scalars(idx, ev_run["id"], "inside")
    assert list(zip(s["step"], s["value"], strict=False)) == [(0, 2.0)] and ev_run["eval_id"] is not None
    assert "inside" not in query.tags(idx, [run])["scalar"]


def test_memolab_lightning_imports_no_lightning():
    # the package and the hashing hook's module (which only torch, imported by Lightning anyway)
    code = ("import sys, memolab, memolab.lightning\n"
            "top = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'pytorch_lightning', 'torch'})\n"
            "print(top())\n"
            "import memolab.lightning.keys\n"
            "print(top())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}).stdout
    assert out.split("\n")[:2] == ["[]", "['torch']"]


# -- fresh processes ---------------------------------------------------------------------

WORK = '''
import json, os, warnings
warnings.filterwarnings("ignore")
import torch
import memolab
from torch.utils.data import DataLoader, TensorDataset


def bump(name):
    with open("counts.txt", "a") as f:
        f.write(name + "\\n")


def counts():
    if not os.path.exists("counts.txt"):
        return {}
    names = open("counts.txt").read().split()
    return {n: names.count(n) for n in sorted(set(names))}


def data(n=24):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, x.sum(1, keepdim=True)


def loader(x, y, pin_memory):
    return DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1),
                      pin_memory=pin_memory)


@memolab.memo
def summarize(loader):
    bump("summarize")
    return [round(float(b[0].sum()), 5) for b in loader]


@memolab.memo
def describe(dm):
    bump("describe")
    return [dm.hparams.batch_size, round(float(dm.x.sum()), 5)]


@memolab.memo
def weights(model):
    bump("weights")
    return round(float(sum(p.sum() for p in model.parameters())), 5)
'''

LIT = '''
import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

import memolab
from memolab.lightning import MemolabLogger
from work import bump, data, loader, summarize


class DM(L.LightningDataModule):
    def __init__(self, n=24, batch_size=8):
        super().__init__()
        self.save_hyperparameters()
        self.x, self.y = data(n)

    def train_dataloader(self):
        dl = loader(self.x, self.y, pin_memory=True)
        assert hasattr(dl, "__pl_saved_args")  # made under Lightning's patch
        self.sums = summarize(dl)
        return dl

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(self.x, self.y), batch_size=12)


class Reg(L.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, i):
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def trainer(**kw):
    kw.setdefault("logger", False)
    return L.Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, default_root_dir="out", **kw)


@memolab.memo
def train(lr, epochs=2):
    bump("train")
    torch.manual_seed(0)
    model, dm = Reg(lr), DM()
    t = trainer(max_epochs=epochs, log_every_n_steps=1,
                logger=[MemolabLogger(), CSVLogger("csv", name="lit", version=0)])
    t.fit(model, dm)
    return model
'''

PLAIN = '''
import json, sys
from work import counts, data, loader, summarize
x, y = data()
sums = summarize(loader(x, y, pin_memory=False))
assert not any(m.split(".")[0] in ("lightning", "pytorch_lightning") for m in sys.modules)
print(json.dumps({"counts": counts(), "sums": sums}))
'''

FIT = '''
import json
import torch
from lit import DM, Reg, trainer
from work import counts, describe, weights
torch.manual_seed(0)
dm, model = DM(), Reg()
trainer(max_epochs=1).fit(model, dm)
assert dm.trainer is not None and model.trainer is not None
print(json.dumps({"describe": describe(dm), "weights": weights(model), "sums": dm.sums, "counts": counts()}))
'''

TRAIN = '''
import json
from lit import train
from memolab.store import get_store
from memolab.tracking import query
from work import counts, weights
model = train(0.05)
w = weights(model)  # the module trained here (miss), then the one loaded from the store (hit): one key
idx = get_store().index
(run,) = [r for r in query.runs(idx, train.symbol) if isinstance(r["id"], int)]
tags = query.tags(idx, [run["id"]])["scalar"]
points = {t: [list(p) for p in zip(query.scalars(idx, run["id"], t)["step"], query.scalars(idx, run["id"], t)["value"])]
          for t in tags}
print(json.dumps({"counts": counts(), "run": {k: run[k] for k in ("status", "eval_id", "hparams")},
                  "points": points, "weights": w, "attached": model._trainer is not None}))
'''


#: the scripts that use Lightning import it (through lit.py, or the demo itself) before memolab, and check
#: no module list: they fork from a server that imported it (tests/zygote.py), as test_lightning_ddp's do;
#: a real start would spend its ~5 s of CPU importing Lightning in each of these six runs
LIGHTNING = ("torch", "numpy", "lightning")


@pytest.fixture
def lit_project(project):
    # plain.py checks that lightning is not imported: its run forks from a server of torch alone
    project.preload = ("torch", "numpy")
    project.write("work.py", WORK)
    project.write("lit.py", LIT)
    return project


ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def test_a_trainer_used_datamodule_and_a_lightning_made_loader_hit_in_the_next_process(lit_project):
    p = lit_project
    p.write("plain.py", PLAIN)
    p.write("fit.py", FIT)
    plain = p.run_json("plain.py", env=ENV)
    assert plain["counts"] == {"summarize": 1}
    p.preload = LIGHTNING
    first = p.run_json("fit.py", env=ENV)
    # the loader made in train_dataloader() under Trainer.fit hit on the plain loader's stored result
    assert first["counts"] == {"describe": 1, "summarize": 1, "weights": 1}
    assert first["sums"] == plain["sums"]
    second = p.run_json("fit.py", env=ENV)
    # a datamodule and a module a Trainer used: keyed alike in the next process, so they hit
    assert second["counts"] == first["counts"]
    assert second["describe"] == first["describe"] and second["weights"] == first["weights"]


def test_self_log_metrics_are_stored_with_the_evaluation_and_survive_a_hit(lit_project):
    p = lit_project
    p.write("train.py", TRAIN)
    p.preload = LIGHTNING
    miss = p.run_json("train.py", env=ENV)
    hit = p.run_json("train.py", env=ENV)
    # (DM.train_dataloader summarizes); weights() of the loaded module hit on the trained one's result
    assert miss["counts"] == hit["counts"] == {"summarize": 1, "train": 1, "weights": 1}
    assert hit["weights"] == miss["weights"]
    assert miss["attached"] and not hit["attached"]  # a hit's module is detached from any Trainer
    assert miss["run"]["status"] == "done" and miss["run"]["eval_id"] is not None
    assert hit["run"] == miss["run"] and hit["points"] == miss["points"]
    # hparams: the memoized function's arguments, then the module's and datamodule's save_hyperparameters()
    hp = miss["run"]["hparams"]
    assert {k: hp[k] for k in ("lr", "epochs", "n", "batch_size")} == {"lr": 0.05, "epochs": 2, "n": 24,
                                                                         "batch_size": 8}
    # point for point what Lightning's own CSVLogger wrote beside it: tags, steps (the global step), epochs
    with open(p.root / "csv" / "lit" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    want = {}
    for row in rows:
        for tag, v in row.items():
            if tag != "step" and v != "":
                want.setdefault(tag, []).append([int(row["step"]), float(v)])
    assert set(want) == {"epoch", "train_loss_step", "train_loss_epoch", "val_loss"}
    got = {t: sorted(v) for t, v in hit["points"].items()}
    assert got == {t: sorted(v) for t, v in want.items()}
    assert [s for s, _ in got["train_loss_step"]] == list(range(6))  # 3 batches x 2 epochs, every step
    assert got["train_loss_epoch"][1][0] == 5 and got["val_loss"][0][0] == 2


def test_the_lightning_demo_misses_then_hits_in_a_new_process(project):
    demo = Path(__file__).resolve().parents[1] / "examples" / "lightning_demo.py"
    project.write("lightning_demo.py", demo.read_text())
    project.preload = LIGHTNING  # the demo imports lightning and torch before memolab
    first = project.run("lightning_demo.py", env=ENV).stdout.splitlines()
    second = project.run("lightning_demo.py", env=ENV).stdout.splitlines()
    assert first[:2] == ["lightning_demo.py:fit: miss", "returned module attached to a Trainer: True"]
    assert second[:2] == ["lightning_demo.py:fit: hit", "returned module attached to a Trainer: False"]
    assert first[2:] == second[2:]  # the same module (validated by a Trainer of the script's own), the same curves
    assert first[2].startswith("val/loss = ")
    assert any(ln.strip().startswith("train/loss_step: 24 points") for ln in second)
