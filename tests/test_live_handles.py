"""Live handles are refused with what to pass instead (issue 35).

An Optuna ``Trial`` passed to a memoized function was keyed by its state (number,
start time, storage): one stored result per trial, never a hit, silently. It is
refused now, with a ``HashError`` naming its path and saying to pass the values
it suggests, as Lightning's ``Trainer`` is; so are the other live handles users
pass the same way: an Optuna ``Study`` and storage, database connections and
cursors (sqlite3, psycopg, SQLAlchemy engines, connections and sessions).
"""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from conftest import SRC, Calls, require
from memolab import hashing, memo
from memolab.errors import HashError

optuna = require("optuna")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_an_optuna_trial_argument_is_refused_naming_its_path_and_what_to_pass(tmp_store):
    calls = Calls()

    @memo
    def objective_body(trial, scale):
        calls.append(1)
        return trial.suggest_float("x", 0, 1) * scale

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    with pytest.raises(HashError) as ei:
        study.optimize(lambda t: objective_body(t, 2.0), n_trials=1)
    assert ei.value.path == "args['trial']"
    assert "an Optuna Trial is a live handle" in str(ei.value) and "trial.params" in str(ei.value)
    assert not calls  # refused before it ran: before, each trial computed and stored its own row
    with pytest.raises(HashError) as ei:
        hashing.hash_value({"run": [study]})
    assert ei.value.path == "['run'][0]" and "an Optuna Study is a live handle" in str(ei.value)
    with pytest.raises(HashError, match="an Optuna storage is a live handle"):
        hashing.hash_value(optuna.storages.InMemoryStorage())


def test_what_to_pass_instead_hits_across_trials(tmp_store):
    calls = Calls()

    @memo
    def train(lr, layers):
        calls.append(1)
        return lr * layers

    def objective(trial):
        return train(**trial.params) if trial.params else train(trial.suggest_float("lr", 0.1, 0.2, step=0.1),
                                                                 trial.suggest_int("layers", 1, 2))

    grid = {"lr": [0.1, 0.2], "layers": [1, 2]}
    for _ in range(2):
        study = optuna.create_study(sampler=optuna.samplers.GridSampler(grid, seed=0))
        study.optimize(objective, n_trials=4)
    assert len(calls) == 4  # the second study hit each of the four points


def test_a_fixed_trial_keys_by_its_params_not_when_it_was_made():
    a = optuna.trial.FixedTrial({"x": 0.5, "n": 3})
    key = hashing.hash_value(a)
    b = optuna.trial.FixedTrial({"n": 3, "x": 0.5})
    assert hashing.hash_value(b) == key
    a.suggest_float("x", 0, 1)  # records the suggestion: filled as it is used, not content
    assert hashing.hash_value(a) == key
    assert hashing.hash_value(optuna.trial.FixedTrial({"x": 0.6, "n": 3})) != key
    assert hashing.hash_value(optuna.trial.FixedTrial({"x": 0.5, "n": 3}, number=1)) != key
    # and across processes: before, its start time (datetime.now()) was in the key
    code = ("import optuna, time; from memolab import hashing; time.sleep(0.01); "
            "print(hashing.hash_value(optuna.trial.FixedTrial({'x': 0.5, 'n': 3})))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}
    assert outs == {key}


def test_database_handles_are_refused_naming_their_path(tmp_path):
    con = sqlite3.connect(tmp_path / "db.sqlite")
    for handle, what in ((con, "a sqlite3 Connection"), (con.cursor(), "a sqlite3 Cursor")):
        with pytest.raises(HashError) as ei:
            hashing.hash_value({"db": handle})
        assert ei.value.path == "['db']" and f"{what} is a live handle" in str(ei.value)
        assert "memolab.File(path)" in str(ei.value)
    con.execute("CREATE TABLE t (b BLOB)")
    con.execute("INSERT INTO t VALUES (zeroblob(4))")
    with con.blobopen("t", "b", 1) as blob:
        with pytest.raises(HashError, match="a sqlite3 Blob is a live handle"):
            hashing.hash_value(blob)
    con.close()
    sqlalchemy = require("sqlalchemy")
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'db2.sqlite'}")
    with pytest.raises(HashError, match="an SQLAlchemy Engine is a live handle"):
        hashing.hash_value(engine)
    with engine.connect() as c:
        with pytest.raises(HashError, match="an SQLAlchemy Connection is a live handle"):
            hashing.hash_value(c)
    from sqlalchemy.orm import Session

    with Session(engine) as s:
        with pytest.raises(HashError, match="an SQLAlchemy Session is a live handle"):
            hashing.hash_value([s])
    engine.dispose()


def test_a_psycopg_connection_is_refused(postgres_dsn):
    psycopg = require("psycopg")
    with psycopg.connect(postgres_dsn) as con:
        with pytest.raises(HashError) as ei:
            hashing.hash_value({"con": con})
        assert ei.value.path == "['con']" and "a psycopg connection is a live handle" in str(ei.value)
        with con.cursor() as cur:
            with pytest.raises(HashError, match="a psycopg Cursor is a live handle"):
                hashing.hash_value(cur)


def test_registering_the_handles_imports_nothing_the_user_did_not():
    code = ("import sys, sqlite3, memolab, memolab.handles.optuna, memolab.handles.databases\n"
            "from memolab import hashing\n"
            "try:\n    hashing.hash_value(sqlite3.connect(':memory:'))\nexcept Exception as e:\n    print(type(e).__name__)\n"
            "print(sorted(m for m in ('optuna', 'sqlalchemy', 'psycopg') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}).stdout
    assert out.split() == ["HashError", "[]"]
