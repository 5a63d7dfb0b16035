"""pandas and polars DataFrames and scikit-learn estimators, as arguments and as results (issue 35).

Each value keys the same: built in two fresh processes with different
PYTHONHASHSEEDs, after it was used (printed, described, grouped, predicted with),
as the result a memoized function computed, and loaded from the store in the next
process. Before: a datetime column raised a raw ``ValueError`` (numpy), and a
time-series frame keyed differently once printed (pandas fills ``_cache`` as an
object is used), so a result keyed one way where it was computed and another
once loaded.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from typing import Any

import pytest

from conftest import SRC, Calls, Project, require

for _lib in ("numpy", "pandas", "polars", "sklearn"):
    if importlib.util.find_spec(_lib) is None:
        require(_lib)  # the skip (a failure under CI) of a library that is not installed

from memolab import File, hashing, memo  # noqa: E402
from memolab.errors import HashError  # noqa: E402

# imported when this file's first test runs, not at import: every pytest worker imports every
# test file to collect it, and pandas, polars and scikit-learn cost ~2 CPU-s where none runs here
np: Any = None
pd: Any = None
pl: Any = None


@pytest.fixture(scope="module", autouse=True)
def _libraries():
    global np, pd, pl
    np, pd, pl = require("numpy"), require("pandas"), require("polars")

VALUES = r'''
import io
import os

import numpy as np
import pandas as pd
import polars as pl

import memolab
from memolab import memo


def frame(name):
    rng = np.random.default_rng(0)
    n = 48
    t = pd.date_range("2024-01-01", periods=n, freq="h")
    if name == "pd_datetime":
        return pd.DataFrame({"t": t, "x": rng.standard_normal(n)})
    if name == "pd_tz_index":
        return pd.DataFrame({"x": np.arange(n)}, index=t.tz_localize("Europe/Paris"))
    if name == "pd_categorical":
        return pd.DataFrame({"c": pd.Categorical(rng.choice(["a", "b", "c"], n)), "s": [f"r{i}" for i in range(n)]})
    if name == "pd_ordered_categorical":
        return pd.Series(pd.Categorical(["lo", "hi", "lo"], categories=["lo", "hi"], ordered=True), name="level")
    if name == "pd_every_dtype":
        df = pd.DataFrame({"i": np.arange(n)})
        df["f"] = rng.standard_normal(n)
        df["t"] = t
        df["ns"] = t.as_unit("ns")
        df["td"] = t - t[0]
        df["s"] = [f"s{i % 5}" for i in range(n)]
        df["o"] = [None, 1, "a", 2.5] * (n // 4)
        df["Int64"] = pd.array(range(n), dtype="Int64")
        df["boolean"] = pd.array([True, None] * (n // 2), dtype="boolean")
        df["period"] = pd.period_range("2024-01", periods=n, freq="M")
        df["interval"] = pd.interval_range(0, n)
        df["arrow"] = pd.array(range(n), dtype="int64[pyarrow]")
        return df
    if name == "pd_multiindex":
        idx = pd.MultiIndex.from_product([["a", "b"], pd.date_range("2024-01-01", periods=5)], names=["k", "day"])
        return pd.DataFrame({"v": np.arange(10.0)}, index=idx)
    if name == "pd_series_time":
        return pd.Series(rng.standard_normal(n), index=t, name="y")
    if name == "pl_frame":
        return pl.DataFrame({
            "t": pl.datetime_range(pl.datetime(2024, 1, 1), pl.datetime(2024, 1, 2, 23), "1h", eager=True),
            "d": pl.Series([1.5] * n).cast(pl.Duration("ms")),
            "c": pl.Series(["a", "b", "c"] * (n // 3), dtype=pl.Categorical),
            "e": pl.Series(["lo", "hi"] * (n // 2), dtype=pl.Enum(["lo", "hi"])),
            "x": np.arange(n, dtype=np.float64), "s": [f"r{i}" for i in range(n)]})
    if name == "pl_series":
        return pl.Series("x", [1, 2, None])
    return estimator(name)


def data():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 3))
    return X, (X[:, 0] > 0).astype(int)


def estimator(name):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    X, y = data()
    if name == "sk_unfitted":
        return make_pipeline(StandardScaler(), LogisticRegression(C=0.5))
    if name == "sk_fitted":
        return make_pipeline(StandardScaler(), LogisticRegression(C=0.5)).fit(X, y)
    if name == "sk_forest":
        return RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    if name == "sk_random_state":
        return RandomForestClassifier(n_estimators=3, random_state=np.random.RandomState(0))
    if name == "sk_on_frame":
        return OneHotEncoder().fit(pd.DataFrame({"c": ["a", "b", "a"], "t": pd.date_range("2024", periods=3)}))
    raise KeyError(name)


def use(x):
    """What a notebook does to a value between two calls: print it, look at it, compute from it."""
    repr(x)
    str(x)
    if isinstance(x, pd.DataFrame):
        x.describe(include="all")
        x.info(buf=io.StringIO())
        x.memory_usage(deep=True)
        for c in x.columns:
            s = x[c]
            s.is_unique, s.is_monotonic_increasing, s.nunique(), s.value_counts()
            if s.dtype.kind == "M":
                s.dt.day
            if isinstance(s.dtype, pd.CategoricalDtype):
                s.cat.codes
        x.index.is_unique, x.index.inferred_type, x.index.get_loc(x.index[0])
    elif isinstance(x, pd.Series):
        x.is_unique, x.index.is_unique, x.index.inferred_type, x.value_counts()
        if isinstance(x.index, pd.DatetimeIndex):
            x.index.inferred_freq, x.resample("2h").mean()
    elif isinstance(x, pl.DataFrame):
        x.describe(), x.sort(x.columns[0]), x.to_arrow(), x.to_pandas(), x.is_duplicated(), x.estimated_size()
    elif isinstance(x, pl.Series):
        x.to_numpy(), x.n_unique()
    else:
        X, y = data()
        if hasattr(x, "n_features_in_") or hasattr(x, "steps") and hasattr(x.steps[-1][1], "coef_"):
            x.predict(X) if not hasattr(x, "categories_") else x.transform(pd.DataFrame(
                {"c": ["a"], "t": pd.to_datetime(["2024-01-01"])}))
        x.get_params()
        x._repr_html_()


class Built(list):
    pass


memolab.register_opaque(Built)
BUILT = Built()


@memo
def make(name):
    BUILT.append(name)
    return frame(name)


@memo
def take(x):
    return 0
'''

NAMES = ["pd_datetime", "pd_tz_index", "pd_categorical", "pd_ordered_categorical", "pd_every_dtype", "pd_multiindex",
         "pd_series_time", "pl_frame", "pl_series", "sk_unfitted", "sk_fitted", "sk_forest", "sk_random_state",
         "sk_on_frame"]

KEYS = r'''
import json, sys
import warnings

warnings.simplefilter("ignore")
from memolab.hashing import identity
import values


def key(x):
    identity.enabled = False
    try:
        return values.take.key(x)[2]
    finally:
        identity.enabled = True


out = {}
for name in sys.argv[1].split(","):
    fresh = values.frame(name)
    row = {"fresh": key(fresh)}
    values.use(fresh)
    row["used"] = key(fresh)
    x = values.make(name)
    row["memoized"] = key(x)
    values.use(x)
    row["memoized_used"] = key(x)
    out[name] = row
print(json.dumps({"built": list(values.BUILT), "keys": out}))
'''


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    proj = Project(tmp_path_factory.mktemp("frames") / "proj")
    proj.write("values.py", VALUES)
    proj.write("keys.py", KEYS)
    names = ",".join(NAMES)
    computed = proj.run_json("keys.py", names, env={"PYTHONHASHSEED": "1"}, timeout=300)
    loaded = proj.run_json("keys.py", names, env={"PYTHONHASHSEED": "2"}, timeout=300)
    assert computed["built"] == NAMES
    assert loaded["built"] == [], "the second process must load every value"
    return computed["keys"], loaded["keys"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_frame_or_estimator_keys_alike_built_used_computed_and_loaded(keyed, name):
    computed, loaded = keyed
    keys = {f"{where}:{k}": v for where, rows in (("computed", computed), ("loaded", loaded))
            for k, v in rows[name].items()}
    assert len(set(keys.values())) == 1, keys


def test_a_datetime_or_categorical_change_changes_the_key():
    H = hashing.hash_value
    t = pd.date_range("2024-01-01", periods=4, freq="h")
    df = pd.DataFrame({"t": t, "c": pd.Categorical(["a", "b", "a", "b"])})
    key = H(df)
    assert H(pd.DataFrame({"t": t + pd.Timedelta("1s"), "c": df.c})) != key
    assert H(pd.DataFrame({"t": t.as_unit("ns"), "c": df.c})) != key  # another unit
    assert H(pd.DataFrame({"t": t.tz_localize("UTC"), "c": df.c})) != key
    assert H(pd.DataFrame({"t": t, "c": pd.Categorical(["a", "b", "a", "b"], categories=["b", "a"])})) != key
    assert H(pd.DataFrame({"t": t, "c": pd.Categorical(["a", "b", "a", "b"], ordered=True)})) != key
    assert H(pd.DataFrame({"t": t, "c": ["a", "b", "a", "b"]})) != key
    repr(df), df.describe(include="all"), df.t.dt.hour, df.c.cat.codes
    assert H(df) == key  # used, not changed


def test_what_pandas_caches_as_it_is_used_is_left_out():
    """The mechanism: a DatetimeArray's ``_cache`` filled by repr; a dtype's filled by a property."""
    H = hashing.hash_value
    s = pd.Series(np.arange(3.0), index=pd.date_range("2024-01-01", periods=3, freq="D"))
    key = H(s)
    repr(s)
    assert s.index._data._cache and H(s) == key
    d = pd.BooleanDtype()
    dk = H(d)
    _ = d.index_class  # read for what it caches
    assert d._cache and H(d) == dk


def test_a_polars_lazy_frame_is_refused_and_a_file_is_the_way(tmp_path, tmp_store):
    p = tmp_path / "rows.csv"
    p.write_text("a\n1\n2\n")
    calls = Calls()

    @memo
    def total(q):
        calls.append(1)
        return q.collect()["a"].sum()

    with pytest.raises(HashError) as ei:
        total(pl.scan_csv(p))
    assert ei.value.path == "args['q']" and "a polars LazyFrame is a live handle" in str(ei.value)
    assert "lf.collect()" in str(ei.value) and "memolab.File(path)" in str(ei.value)

    @memo
    def total_of(f):
        calls.append(1)
        return pl.scan_csv(os.fspath(f)).collect()["a"].sum()

    assert total_of(File(p)) == 3 and total_of(File(p)) == 3 and len(calls) == 1
    p.write_text("a\n5\n6\n")  # before: the plan named the path, so the query hit with the old rows
    assert total_of(File(p)) == 11 and len(calls) == 2
    assert hashing.hash_value(pl.read_csv(p)) != hashing.hash_value(pl.DataFrame({"a": [1, 2]}))


def test_import_memolab_imports_none_of_the_integrated_libraries():
    libs = ("omegaconf", "hydra", "transformers", "tokenizers", "optuna", "pandas", "polars", "sklearn", "sqlalchemy",
            "psycopg", "numpy", "torch")
    code = ("import sys, memolab, memolab.omegaconf.keys, memolab.pandas.keys, memolab.handles.optuna, "
            "memolab.handles.databases, memolab.handles.polars, memolab.transformers\n"
            f"print(sorted(m for m in {libs!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "[]"
