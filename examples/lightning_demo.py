"""Lightning with memolab: a memoized fit whose ``self.log`` curves are stored with its result.

    python examples/lightning_demo.py    # 1st run: fits (a miss), the curves go with the evaluation
    python examples/lightning_demo.py    # 2nd run, a new process: a hit, the same module and curves
    memolab ui                           # the curves, next to the evaluation that made them

The Trainer is built inside the memoized function from plain settings (the
arguments are the key); ``MemolabLogger`` files every ``self.log(...)`` under the
evaluation being computed. The function returns the module: on a hit it comes back
detached from any Trainer, so the script validates it with a Trainer of its own.
"""
from __future__ import annotations

import logging
import os
import sys
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split

import memolab
from memolab.lightning import MemolabLogger

warnings.filterwarnings("ignore")  # Lightning's advice on num_workers and the like
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
OUT = os.environ.get("LIGHTNING_DEMO_OUT", "lightning_out")  # the Trainers' default_root_dir


class Data(L.LightningDataModule):
    def __init__(self, n: int = 256, batch_size: int = 32, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(self.hparams.seed)
        x = torch.randn(self.hparams.n, 8, generator=g)
        y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(self.hparams.n, 1, generator=g)
        self.train_set, self.val_set = random_split(TensorDataset(x, y), [0.75, 0.25], generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(self.hparams.seed))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=64)


class Regressor(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()  # recorded with the run, beside the memoized function's arguments
        self.net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def trainer(**kw) -> L.Trainer:
    return L.Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, default_root_dir=OUT, **kw)


@memolab.memo
def fit(hidden: int = 16, lr: float = 0.01, epochs: int = 4) -> Regressor:
    torch.manual_seed(0)
    model = Regressor(hidden, lr)
    trainer(max_epochs=epochs, logger=MemolabLogger(), log_every_n_steps=1).fit(model, Data())
    return model


def curves() -> str:
    """What the stored evaluation's run holds (what `memolab ui` draws)."""
    from memolab.store import get_store
    from memolab.tracking import query

    idx = get_store().index
    run = next(r for r in query.runs(idx, fit.symbol) if isinstance(r["id"], int))
    tags = query.tags(idx, [run["id"]])["scalar"]
    parts = []
    for tag in tags:
        s = query.scalars(idx, run["id"], tag)
        parts.append(f"{tag}: {len(s['step'])} points, last {s['value'][-1]:.4f} at step {s['step'][-1]}")
    return f"run {run['id']} (evaluation #{run['eval_id']}, hparams {run['hparams']}):\n  " + "\n  ".join(parts)


if __name__ == "__main__":
    print(str(fit.explain()).splitlines()[0])  # before the call: will it hit?
    model = fit()
    try:
        _ = model.trainer  # read for its error alone
        attached = True
    except RuntimeError:  # Lightning's answer for a module no Trainer holds
        attached = False
    print(f"returned module attached to a Trainer: {attached}")
    val = trainer(logger=False).validate(model, Data(), verbose=False)[0]["val/loss"]
    print(f"val/loss = {val:.6f}")
    print(curves())
    sys.stdout.flush()
