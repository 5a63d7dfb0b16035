"""Issue 53: one name per function, accepted everywhere; misses and errors that say what to do."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SRC


def memolab(project, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, MEMOLAB_STORE=str(project.store), PYTHONPATH=SRC)
    cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=project.root, env=env, capture_output=True,
                        text=True, timeout=120)
    if check and cp.returncode != 0:
        raise AssertionError(f"memolab {' '.join(args)} -> {cp.returncode}\n{cp.stdout}\n{cp.stderr}")
    return cp


SWEEP = """\
from memolab import memo

@memo
def train(n):
    return n * 3

if __name__ == "__main__":
    train(1)
"""


def test_every_printed_name_is_accepted_back(project):
    project.write("sweep.py", SWEEP)
    project.write("other.py", "from memolab import memo\n@memo\ndef train(n):\n    return n * 2\ntrain(1)\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/prep.py", "from memolab import memo\n@memo\ndef load(n):\n    return n\n")
    project.write("lib_user.py", "from pkg.prep import load\nload(1)\n")
    # a notebook importing the script: sweep:train, another function (its note below)
    project.write("nb.py", "import sweep\nsweep.train(1)\n")
    for s in ("sweep.py", "other.py", "lib_user.py"):
        project.run(s)
    project.run("nb.py")
    listing = json.loads(memolab(project, "ls", "--json").stdout)
    names = [f.get("label") or f["fn"] for f in listing["functions"]]
    assert {"sweep.py:train", "other.py:train", "pkg.prep:load", "sweep:train"} <= set(names), names
    import memolab as ml

    every = names + ["__main__:train", "load", "prep:load", "pkg.prep.load"]
    # every command in one process (the CLI's own entry point): each must exit 0
    project.write("roundtrip.py", f"""
        import contextlib, io, json, sys
        from memolab.cli import main
        codes = {{}}
        for name in {every!r}:
            for cmd in (["why", name], ["ls", name], ["runs", name, "--all"], ["clear", name, "--dry-run"]):
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                    codes[" ".join(cmd)] = [main(cmd), err.getvalue()]
        print(json.dumps(codes))
    """)
    codes = project.run_json("roundtrip.py")
    refused = {c: v for c, v in codes.items() if v[0] != 0 and not c.startswith("clear sweep.py:train")
               and not c.startswith("clear other.py:train")}
    assert not refused, refused
    for name in every:
        assert len(ml.runs(name, store=str(project.store))) >= 1, name
    # one script's share of a symbol two scripts ran: clear acts on whole symbols only, and says so
    cp = memolab(project, "clear", "sweep.py:train", "--dry-run", check=False)
    assert cp.returncode == 2 and "give __main__:train" in cp.stderr, cp.stderr
    assert "would clear __main__:train" in memolab(project, "clear", "__main__:train", "--dry-run").stdout
    assert "would clear pkg.prep:load" in memolab(project, "clear", "load", "--dry-run").stdout
    # `train` names three functions: ambiguous alike in the CLI and in Python, candidates as printed
    cp = memolab(project, "why", "train", check=False)
    assert cp.returncode == 2 and "other.py:train, sweep.py:train, sweep:train" in cp.stderr, cp.stderr
    with pytest.raises(LookupError, match="other.py:train, sweep.py:train, sweep:train"):
        ml.runs("train", store=str(project.store))
    sweep_only = ml.runs("sweep.py:train", store=str(project.store))
    assert {r.script for r in sweep_only} == {str(project.root / "sweep.py")}
    cp = memolab(project, "why", "trian", check=False)
    assert cp.returncode == 1 and "did you mean" in cp.stderr and "train" in cp.stderr, cp.stderr
    # the import's miss says the same code ran as the script, and that it is another function
    why = memolab(project, "why", "sweep:train").stdout
    assert ("no stored evaluation of this function yet; the same code ran as `sweep.py` (`__main__:train`, "
            "1 result); as `sweep:train` it is another function") in why, why


# -- §3: misses and errors that say what to do -----------------------------------------------------
def test_an_unhashable_argument_names_its_remedies_at_the_callers_line(tmp_store):
    import threading
    import traceback

    import memolab
    from memolab.errors import HashError

    @memolab.memo
    def f(x):
        return 1

    with pytest.raises(HashError) as info:
        f(threading.Lock())
    text = str(info.value)
    assert text.startswith("args['x']: cannot hash a lock\n"), text
    assert "@memo(ignore=['x'])" in text and "memolab.register_opaque(_thread.lock)" in text, text
    frames = traceback.extract_tb(info.value.__traceback__)
    inside = [fr for fr in frames if f"{os.sep}memolab{os.sep}" in fr.filename]
    assert len(inside) == 1 and inside[0].name == "__call__", frames  # the memoized function's frame alone
    assert frames[0].filename == __file__
    internal = traceback.extract_tb(info.value.internal_traceback)  # memolab's frames, kept for debugging
    assert any(fr.name == "hash_arguments" for fr in internal), internal
    # a second memoized call around it: the user's body frames are not trimmed away
    @memolab.memo
    def outer(n):
        return f(threading.Lock())

    with pytest.raises(HashError) as info:
        outer(1)
    names = [fr.name for fr in traceback.extract_tb(info.value.__traceback__)]
    assert names[-2:] == ["outer", "__call__"], names  # the body's line, then the inner call's frame alone


def test_an_unpicklable_result_warns_at_the_callers_line(tmp_store):
    import threading
    import warnings

    import memolab

    @memolab.memo
    def lock(n):
        return threading.Lock()

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        lock(1)
    (w,) = [w for w in seen if "result not stored" in str(w.message)]
    assert (w.filename, w.lineno) == (__file__, line), (w.filename, w.lineno)


def test_a_misspelt_option_is_named():
    import memolab

    with pytest.raises(TypeError, match=r"unexpected keyword argument 'ignor' \(did you mean ignore\?\)"):
        memolab.memo(ignor=["x"])
    with pytest.raises(TypeError, match="did you mean global_rng"):
        memolab.memo(lambda: 1, global_rgn=False)


def test_an_unseeded_generator_miss_says_what_to_do(tmp_store):
    import random

    import memolab

    @memolab.memo
    def init(n):
        return [random.random() for _ in range(n)]

    init(2)
    text = str(init.explain(2))
    assert "the global random generator random was in another state" in text, text
    assert "random.seed(0)" in text and "@memo(global_rng=False)" in text, text


def test_ctrl_c_during_a_miss_says_one_line_with_its_logs(tmp_store, caplog):
    import logging

    import memolab

    @memolab.memo
    def train(n):
        memolab.log.scalar("loss", 1.0, step=0)
        raise KeyboardInterrupt

    with caplog.at_level(logging.INFO, logger="memolab"), pytest.raises(KeyboardInterrupt):
        train(1)
    (line,) = [r.getMessage() for r in caplog.records if "interrupted" in r.getMessage()]
    assert re.fullmatch(r".*train interrupted after [\d.]+ (µs|ms|s); its logs are kept \(memolab show \d+\)", line)
    (run,) = memolab.runs(train, store=str(tmp_store))
    assert str(run.id) in line and run.status == "interrupted"


def test_one_unit_system_and_one_age_formatter():
    from memolab.cli import common
    from memolab.settings import text

    assert text.human_bytes(1_300_000_000) == common.human_bytes(1_300_000_000) == "1.3 GB"
    assert text.human_bytes(12010) == "12.0 KB" and text.human_bytes(999) == "999 B"
    assert common.human_age is text.human_age
    js = (Path(SRC) / "memolab" / "ui" / "static" / "app.js").read_text()
    assert "function fmtBytes" in js and '"KB", "MB", "GB"' in js  # the page's mirror of human_bytes
    page = (Path(SRC) / "memolab" / "ui" / "static" / "runpage.js").read_text()
    assert " bytes`" not in page and "fmtBytes(d.size)" in page


@pytest.mark.parametrize("seconds, shown", [
    (None, "-"), (-5, "0 µs"), (0.00035, "350 µs"), (0.012, "12 ms"), (4.24, "4.2 s"), (60, "1m"), (90, "1m 30s"),
    (125, "2m 05s"), (3600, "1h"), (3 * 3600 + 120, "3h 02m"), (86400, "1d"), (2 * 86400 + 3600, "2d 01h"),
])
def test_one_duration_formatter(seconds, shown):
    """issue 56: durations (the log, the CLI, notebooks, ``max_age`` messages) have one formatter."""
    from memolab.cli import common
    from memolab.inputs import expiry
    from memolab.settings import text

    assert text.human_seconds(seconds) == shown
    assert common.human_seconds is text.human_seconds and not hasattr(expiry, "human")
