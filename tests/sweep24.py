"""A daily sweep as issue 54 tried it: 3 optimizers x 4 learning rates x 2 seeds of ``train``
(prepare -> train -> evaluate), constant tensor summaries among the arguments, cpu/memory sampled
under ``sys/``, and one code edit (ReLU -> GELU) after the first 20 runs. Written through the
tracking sink (no process per run): a browser test's fixture, and benchmarks/dashboard.py's."""
from __future__ import annotations

import math
import os
import socket

from memolab.tracking import sink as S

OPTIMIZERS = ("adam", "rmsprop", "sgd")
LRS = (0.1, 0.03, 0.01, 0.003)
SEEDS = (0, 1)
TRAIN, PREPARE, EVALUATE = "sweep:train", "sweep:prepare", "sweep:evaluate"
CODE_RELU, CODE_GELU = "57c78d0" + "a" * 33, "9e1f2b3" + "b" * 33
CONSTANT = {"batch": 64, "ds.x": "Tensor[60000, 784] float32 μ=0.1307 σ=0.3081", "ds.y": "Tensor[60000] int64",
            "val.x": "Tensor[10000, 784] float32 μ=0.1325 σ=0.3105", "val.y": "Tensor[10000] int64"}
STEPS = 300


def build(index, steps: int = STEPS) -> dict[str, list[int]]:
    """The runs written: {"train": ids (oldest first), "prepare": [...], "evaluate": [...]}. Every
    train run's logs end before any evaluate run starts: evaluate starts last and logs no scalar."""
    sk = S.Sink(index)
    out: dict[str, list[int]] = {"prepare": [], "train": [], "evaluate": []}
    base = 1.7e9
    host = socket.gethostname()

    def start(rid, fn, started, hparams, code, name=None):
        fields = {"fn": fn, "started": started, "pid": os.getpid(), "host": host, "hparams": hparams, "code": code}
        if name:
            fields["name"] = name
        sk.q.append((S.START, rid, fields))

    start(10, PREPARE, base, {"n": 60000}, "c0" * 20)
    sk.q.append((S.END, 10, "done", base + 1, None))
    out["prepare"].append(10)
    i = 0
    for opt in OPTIMIZERS:
        for lr in LRS:
            for seed in SEEDS:
                rid, t0 = 100 + i, base + 10 + i * 10
                code = CODE_RELU if i < 20 else CODE_GELU
                start(rid, TRAIN, t0, {**CONSTANT, "lr": lr, "optimizer": opt, "seed": seed}, code)
                k = {"adam": 1.0, "rmsprop": 0.8, "sgd": 0.5}[opt] * (1 + 3 * lr) * (1.05 if code == CODE_GELU else 1)
                for s in range(steps):
                    loss = 2.3 * math.exp(-k * s / 80) + 0.05 + 0.01 * seed
                    sk.q.append((S.SCALAR, rid, "train/loss", s, t0 + s * 0.01, loss))
                    if s % 10 == 9:
                        sk.q.append((S.SCALAR, rid, "val/loss", s, t0 + s * 0.01, loss * 1.1))
                        sk.q.append((S.SCALAR, rid, "val/acc", s, t0 + s * 0.01, 1 - loss / 2.5))
                    if s % 50 == 0:
                        sk.q.append((S.SCALAR, rid, "sys/cpu", s, t0 + s * 0.01, 50.0 + seed))
                        sk.q.append((S.SCALAR, rid, "sys/memory", s, t0 + s * 0.01, 1e9))
                sk.q.append((S.END, rid, "done", t0 + 5, None))
                out["train"].append(rid)
                i += 1
                sk.flush()
    for j in range(len(out["train"])):
        rid = 500 + j
        start(rid, EVALUATE, base + 1000 + j, {"split": "test", "model": f"train#{out['train'][j]}"}, "e0" * 20)
        sk.q.append((S.END, rid, "done", base + 1001 + j, None))
        out["evaluate"].append(rid)
    sk.flush()
    return out
