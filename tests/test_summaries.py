"""Typed summaries of arguments and results (memolab/calls/summary.py): what a model, a dataset, a loader,
a frame is, shown wherever a computation's arguments are (its run's hyperparameters, its
evaluation's arguments: the dashboard, ``memolab ls``/``show``/``runs``, ``why``)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, TensorDataset

import memolab
from memolab import memo
from memolab.calls.summary import summarize, text
from memolab.store import get_store


class Net(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, width)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(width, 2)


def test_typed_summaries_of_models_datasets_loaders_frames_and_big_arrays():
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(8000, 16), torch.randint(0, 2, (8000,)))
    assert text(Net()) == "Net(1.2 K params)"  # 16*64+64 + 64*2+2 = 1,218
    assert text(Net(width=100_000)) == "Net(1.9 M params)"
    assert text(ds) == "TensorDataset(8,000×16, 2 tensors)"
    assert text(DataLoader(ds, batch_size=32)) == "DataLoader(250 batches of 32)"
    assert text(torch.optim.Adam(Net().parameters(), lr=1e-3)) == "Adam(lr=0.001)"
    assert text(pd.DataFrame({"a": range(8000), "b": 0.0})) == "DataFrame(8,000×2)"
    assert text(np.zeros((100, 3), np.float32)) == "ndarray(float32, 100×3)"
    assert text(torch.zeros(3, 224, 224)) == "tensor(float32, 3×224×224)"
    # a short array or tensor: its values tell calls apart; a number, a string, a small config: their repr
    assert text(np.zeros(3)) == "ndarray([0, 0, 0], float64)" and text(torch.tensor([0.1, 2])) == "tensor([0.1, 2], float32)"
    for small in (0.1, "adam", {"lr": 0.1}, [1, 2]):
        assert text(small) == repr(small)
    # results: the same summaries, with the bytes an array holds
    assert summarize(Net()) == "Net(1.2 K params)"
    assert summarize(Net().state_dict()) == "state_dict(4 tensors, 4.9 KB)"
    assert summarize(np.zeros((100, 3), np.float32)) == "ndarray(float32, 100×3), 1.2 KB"


def test_a_computations_arguments_show_as_typed_summaries(tmp_store):
    """The run's hyperparameters and the evaluation's arguments say ``TensorDataset(8,000×16, 2 tensors)``,
    not ``<torch.utils.data.dataset.TensorDataset object>``; its label tells runs apart by them."""
    @memo
    def fit(model, data, lr=0.1):
        memolab.log.scalar("loss", lr)
        return model.state_dict()

    torch.manual_seed(0)
    fit(Net(), TensorDataset(torch.randn(8000, 16), torch.zeros(8000)))
    fit(Net(), TensorDataset(torch.randn(4000, 16), torch.zeros(4000)), lr=0.2)
    runs = memolab.runs(fit)
    assert sorted(r.hparams["data"] for r in runs) == ["TensorDataset(4,000×16, 2 tensors)",
                                                      "TensorDataset(8,000×16, 2 tensors)"]
    assert {r.hparams["model"] for r in runs} == {"Net(1.2 K params)"}
    assert {r.evaluation.result for r in runs} == {"state_dict(4 tensors, 4.9 KB)"}
    # labels: the arguments that differ, each value cut at 24 characters
    assert sorted(r.name for r in runs) == ["data=TensorDataset(4,000×16,… lr=0.2", "data=TensorDataset(8,000×16,… lr=0.1"]
    snap = json.loads(get_store().index.evaluations(fit.symbol)[0]["snapshot"])
    assert snap["args"]["model"][1] == "Net(1.2 K params)"
    assert snap["args"]["data"][1].startswith("TensorDataset(")


def test_a_result_whose_size_cannot_be_read_is_summarized_without_it():
    """A sparse tensor has no ``nbytes`` (torch raises RuntimeError): the summary of a result is for
    the faces and never fails the call that stores it (test_key_roundtrip's t_sparse did)."""
    from conftest import require

    torch = require("torch")
    from memolab.calls.summary import summarize

    s = summarize(torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2)))
    assert isinstance(s, str) and s

    class Odd:  # an array-like whose size raises something else
        shape, dtype = (2,), "float32"

        @property
        def nbytes(self):
            raise ValueError("no size")

    assert isinstance(summarize(Odd()), str)
