"""Optuna: a ``Trial``, a ``Study`` and a storage are live handles (refused); a ``FixedTrial`` is its params.

A ``Trial`` passed to a memoized function was keyed by its state: its number and
id in the study, the time it started, its storage. So each trial had a key of its
own and nothing was ever a hit (one stored result per trial, silently). The
values it suggests are what a computation depends on: suggest them outside, and
memoize a function of them::

    def objective(trial):
        return train(lr=trial.suggest_float("lr", 1e-4, 1e-1, log=True))   # train is @memo

A ``FixedTrial`` (Optuna's stand-in to rerun an objective with given params) keys by
its params, number and attributes; the time it was made (``_datetime_start``) and
the suggestions it has recorded (filled as it is used) are left out.
"""
from __future__ import annotations

import sys
from typing import Any

from .. import hashing
from ..hashing import Encoder
from . import refuse_live

LEAD = b"\x1c"  # a library object keyed by its integration's own rule (docs/hashing.md)


def encode_fixed_trial(enc: Encoder, t: Any) -> None:
    enc.write(LEAD)
    enc.write_str("optuna.FixedTrial")
    enc.encode_class(type(t))
    # ``_params``: the values its suggest_* calls return (``params`` is the ones suggested so far)
    enc.encode_child({"params": t._params, "number": t.number, "user_attrs": t.user_attrs,
                      "system_attrs": t.system_attrs}, "")


def register() -> None:
    """The ``optuna`` hashing hook (``memolab/settings/hooks.py``)."""
    optuna = sys.modules["optuna"]
    hashing.register_handler(optuna.trial.Trial, refuse_live(
        "an Optuna Trial", "its number, start time and storage belong to one run of one study, so every "
        "trial would be a key of its own and never a hit", "the values it suggests (call trial.suggest_* "
        "outside the memoized function and pass them, e.g. trial.params)"))
    hashing.register_handler(optuna.study.Study, refuse_live(
        "an Optuna Study", "its trials change as it runs, in a storage outside it", "what the function reads "
        "from it (study.best_params, study.trials_dataframe(), [t.params for t in study.trials])"))
    hashing.register_handler(optuna.storages.BaseStorage, refuse_live(
        "an Optuna storage", "its rows change under it", "the rows the function reads (study.trials_dataframe())"))
    hashing.register_handler(optuna.trial.FixedTrial, encode_fixed_trial)
