"""A memoized ``fit`` around Lightning's own DDP launcher (issue 42; docs/lightning.md, "Under DDP").

``python fit.py`` with ``Trainer(strategy="ddp", devices=2)`` on CPU: Lightning starts rank 1
itself, from inside ``fit``, by running the script again, and initialises the group only
then. Each job runs in its own session with a deadline past which its process group is
killed (tests/launchers.py): the old deadlock (rank 1 waiting for rank 0's lease on the call
while rank 0 waits for rank 1 in ``fit``) fails fast. Bodies run are counted per rank.
"""
from __future__ import annotations

import textwrap

import pytest

from conftest import require, skip_or_fail

require("lightning")
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    skip_or_fail("torch.distributed is not available", allow_module_level=True)

from launchers import marks, results, run_script  # noqa: E402

FIT = """
import json, os
import torch
import lightning as L
import memolab
from memolab.distributed import DistributedError
from memolab.lightning import MemolabLogger

class Reg(L.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

class Data(L.LightningDataModule):
    def train_dataloader(self):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(64, 4, generator=g)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)

def fit(lr: float, epochs: int):
    with open("fit.marks", "a") as f:
        f.write(os.environ.get("LOCAL_RANK", "0") + "\\n")
    L.seed_everything(0, verbose=False)
    model = Reg(lr)
    trainer = L.Trainer(strategy=os.environ["STRATEGY"], accelerator="cpu", devices=2, max_epochs=epochs,
                        logger=MemolabLogger(), log_every_n_steps=1, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, Data())
    return {k: v.detach().clone() for k, v in model.state_dict().items()}

memo_fit = memolab.memo(fit)

if __name__ == "__main__":
    rank = os.environ.get("LOCAL_RANK", "0")   # (rank 0: set by Lightning's launcher during fit)
    lr = 0.05 + (0.01 if os.environ.get("SKEW") and rank != "0" else 0)  # a call keyed apart on rank 1
    out = {}
    try:
        sd = (fit if os.environ.get("PLAIN") else memo_fit)(lr, 2)
        out["bits"] = {k: v.numpy().tobytes().hex() for k, v in sd.items()}
    except DistributedError as e:
        out["error"] = str(e)
    out["evaluations"] = len(memo_fit.evaluations())
    with open(f"fit.{os.environ.get('LOCAL_RANK', '0')}.json", "w") as f:
        json.dump(out, f)
"""

DEADLINE = 240  # a job is a few seconds idle; Lightning's imports on a loaded 2-core machine are slow
#: fit.py imports torch and lightning before memolab and checks no module list: its first process
#: (rank 0, or ddp_spawn's main) forks from a server that imported them (tests/zygote.py); the
#: processes Lightning starts (rank 1, the spawned workers) are real starts
PRELOAD = ("torch", "numpy", "lightning")


def _points(root):
    """{tag: points} logged in the runs of the stored evaluations of ``fit``."""
    from memolab.store import Store
    from memolab.tracking import query

    store = Store(root / "store")
    try:
        runs = [r for r in query.runs(store.index) if r["fn"].endswith(":fit")]
        # a fit longer than the system-metrics interval (10 s: under load) has sys/ tags as well
        return [{t: len(v) for t, v in query.all_scalars(store.index, r["id"]).items() if not t.startswith("sys/")}
                for r in runs]
    finally:
        store.close()


@pytest.fixture(scope="module")
def plain_bits(tmp_path_factory):
    """The un-memoized fit's parameters, bitwise, from one plain ``ddp`` job: ``ddp_spawn``'s
    plain fit gives the same bits (same seeds, data and reduction; checked when this fixture
    replaced a plain job per strategy), so both strategies' memoized fits compare with it."""
    root = tmp_path_factory.mktemp("plain")
    (root / "fit.py").write_text(textwrap.dedent(FIT))
    run_script(root, "fit.py", env={"STRATEGY": "ddp", "PLAIN": "1"}, deadline=DEADLINE, preload=PRELOAD)
    plain = results(root, "fit", (0, 1))
    assert marks(root / "fit.marks") == ["0", "1"] and plain[0]["bits"] == plain[1]["bits"]
    return plain[0]["bits"]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_a_memoized_fit_around_lightnings_ddp_runs_once_equals_the_plain_fit_and_hits(tmp_path, strategy,
                                                                                     plain_bits):
    """ddp: rank 1 is the script run again by Lightning, inside rank 0's computation: it runs the
    body with it (no wait for rank 0's lease), both train together, rank 0 stores once after the
    ranks agree. ddp_spawn: the body runs in this process only; Lightning's spawned workers train."""
    (tmp_path / "fit.py").write_text(textwrap.dedent(FIT))
    env = {"STRATEGY": strategy}
    ranks = (0, 1) if strategy == "ddp" else (0,)

    run_script(tmp_path, "fit.py", env=env, deadline=DEADLINE, preload=PRELOAD)  # the miss: once per rank
    assert marks(tmp_path / "fit.marks") == [str(r) for r in ranks]
    first = results(tmp_path, "fit", ranks)
    assert first[0]["evaluations"] == 1
    for r in ranks:
        assert first[r]["bits"] == plain_bits  # equal to the un-memoized fit
    if strategy == "ddp":  # rank 0's self.log points are the evaluation's (ddp_spawn: docs/lightning.md)
        assert _points(tmp_path) == [{"train_loss": 8, "epoch": 8}]

    for r in ranks:
        (tmp_path / f"fit.{r}.json").unlink()
    run_script(tmp_path, "fit.py", env=env, deadline=DEADLINE, preload=PRELOAD)  # the next job: a hit, no rank started
    assert marks(tmp_path / "fit.marks") == [str(r) for r in ranks]
    assert not (tmp_path / "fit.1.json").exists()
    assert results(tmp_path, "fit", (0,))[0] == first[0]


def test_a_rank_lightning_started_with_other_arguments_is_refused_on_every_rank(tmp_path):
    """Rank 1 runs the script again and makes the call with another ``lr``: not its parent's call,
    so it computes under its own lease; once the group exists the ranks compare (as a collective
    call does) and both raise ``DistributedError``; nothing is stored."""
    (tmp_path / "fit.py").write_text(textwrap.dedent(FIT))
    run_script(tmp_path, "fit.py", env={"STRATEGY": "ddp", "SKEW": "1"}, deadline=DEADLINE, preload=PRELOAD)
    out = results(tmp_path, "fit")
    for r in (0, 1):
        assert "made another memoized call than rank 0" in out[r]["error"], out[r]
        assert out[r]["evaluations"] == 0
