"""Files a memoized body reads by path, and what nested memoized calls consumed, reach the key's
hits (docs/cache-rules.md, "Files read by path"; ``memolab/inputs/reads.py``).

Each test runs one script in fresh processes several times, changing files (or the script's own
source) between the runs, and checks which bodies ran and that every value equals the
un-memoized function's (``f.fn``) in the same process. Every case here was answered stale by
memolab before ``reads`` (a hit with the old rows)."""
from __future__ import annotations

import json
import os
import time

import numpy as np

from conftest import require

READS = """
import concurrent.futures, json, os, sys
import numpy as np
import pandas as pd
import memolab
from memolab import memo

class Ran(list):   # a log of runs, kept out of keys
    pass

memolab.register_opaque(Ran)
RAN = Ran()

@memo
def lines(path):                     # builtins.open, a path relative to the working directory
    RAN.append("lines")
    with open(path) as f:
        return f.read().splitlines()

@memo
def array(path):                     # numpy
    RAN.append("array")
    return np.load(path).tolist()

@memo
def frame(path):                     # pandas
    RAN.append("frame")
    return pd.read_csv(path)["x"].tolist()

@memo
def parquet(path):                   # pyarrow opens it natively: noted by memolab.arrow.reads
    RAN.append("parquet")
    return pd.read_parquet(path)["x"].tolist()

@memo
def listing(folder):                 # a folder listed: a file added to it
    RAN.append("listing")
    return sorted(os.listdir(folder))

@memo
def optional(path):                  # a file looked for and absent
    RAN.append("optional")
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None

@memo
def low(path):                       # os.open
    RAN.append("low")
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1000).decode()
    finally:
        os.close(fd)

@memo
def threaded(paths):                 # read by threads the body started
    RAN.append("threaded")
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        return list(ex.map(lambda p: open(p).read(), paths))

@memo
def own_output(path, n):             # a file the body writes, then reads back: not an input
    RAN.append("own_output")
    with open(path, "w") as f:
        f.write("x" * n)
    with open(path) as f:
        return len(f.read())

calls = [(lines, ("data/rows.csv",)), (array, ("data/a.npy",)), (frame, ("data/t.csv",)), (parquet, ("data/p.pq",)),
         (listing, ("data/folder",)), (optional, ("data/opt.txt",)), (low, ("data/low.txt",)),
         (threaded, (["data/t1.txt", "data/t2.txt"],)), (own_output, ("out/o.txt", 3))]
out, ran = {}, []
for f, args in calls:
    n = len(RAN)
    got = f(*args)
    ran += RAN[n:]
    truth = f.fn(*args)  # the un-memoized function, now
    assert got == truth, (f.__name__, got, truth)
    out[f.__name__] = got
print(json.dumps({"ran": ran, "out": out}))
"""


def _setup(root):
    d = root / "data"
    (d / "folder").mkdir(parents=True)
    (root / "out").mkdir()
    (d / "rows.csv").write_text("x\n1\n2\n")
    np.save(d / "a.npy", np.arange(3))
    (d / "t.csv").write_text("x\n1\n")
    import pandas as pd

    pd.DataFrame({"x": [1, 2]}).to_parquet(d / "p.pq")
    (d / "folder" / "one").write_text("1")
    (d / "low.txt").write_text("low")
    (d / "t1.txt").write_text("t1")
    (d / "t2.txt").write_text("t2")


def _run(project, cwd=None):
    if cwd is None:
        cp = project.run("reads.py")
    else:
        import subprocess
        import sys

        from conftest import SRC

        env = dict(os.environ, PYTHONPATH=SRC, MEMOLAB_STORE=str(project.store), PYTHONDONTWRITEBYTECODE="1")
        cp = subprocess.run([sys.executable, str(project.root / "reads.py")], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.strip().splitlines()[-1])


def _later(p):
    """Rewrite ``p``'s bytes in place, its mtime moved past the racy window of its first stamp."""
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_files_read_by_path_are_stamped_and_checked_on_every_hit(project):
    project.write("reads.py", READS)
    root = project.root
    _setup(root)
    first = _run(project)
    assert sorted(first["ran"]) == sorted(["lines", "array", "frame", "parquet", "listing", "optional", "low",
                                           "threaded", "own_output"])
    assert first["out"]["optional"] is None and first["out"]["lines"] == ["x", "1", "2"]
    assert _run(project)["ran"] == []  # nothing changed: every call a hit, its own output no input

    d = root / "data"
    with open(d / "rows.csv", "a") as f:  # the trap of the HF example: an appended row
        f.write("3\n")
    np.save(d / "a.npy", np.arange(4))
    (d / "folder" / "two").write_text("2")
    (d / "opt.txt").write_text("now here")
    (d / "t2.txt").write_text("t2, changed")
    import pandas as pd

    pd.DataFrame({"x": [3]}).to_parquet(d / "p.pq")
    # the same bytes written again (a checkout, a copy): its stamp moves, its content does not
    (d / "low.txt").write_text("low")
    _later(d / "low.txt")
    third = _run(project)
    assert sorted(third["ran"]) == sorted(["lines", "array", "parquet", "listing", "optional", "threaded"])
    assert third["out"]["lines"] == ["x", "1", "2", "3"] and third["out"]["optional"] == "now here"

    why = project.run("-m", "memolab", "why", "lines").stdout
    assert "data/rows.csv changed" in why, why

    (d / "folder" / "one").unlink()  # a listed folder loses a file; a read file is deleted
    (d / "t.csv").unlink()
    (d / "t.csv").write_text("x\n5\n")  # (recreated: another inode, other rows)
    fourth = _run(project)
    assert sorted(fourth["ran"]) == ["frame", "listing"] and fourth["out"]["frame"] == [5]

    # Another working directory: "data/rows.csv" names another file there, the body would read it
    other = root / "elsewhere"
    _setup(other)
    (other / "data" / "rows.csv").write_text("x\n9\n")
    fifth = _run(project, cwd=other)
    assert "lines" in fifth["ran"] and fifth["out"]["lines"] == ["x", "9"]
    # and back: one row per key, so the first directory's rows are computed again (the script
    # checks every value against the un-memoized function's)
    back = _run(project)
    assert "lines" in back["ran"] and back["out"]["lines"] == ["x", "1", "2", "3"]


NESTED = """
import json, os, subprocess, sys
import memolab
from memolab import memo
from memolab.inputs import expiry

class Ran(list):   # a log of runs, kept out of keys
    pass

memolab.register_opaque(Ran)
RAN = Ran()
SKEW = float(os.environ.get("SKEW", "0"))
expiry.set_clock(lambda: __import__("time").time() + SKEW)

@memo
def inner(f):
    RAN.append("inner")
    return open(f).read()

@memo
def outer(v):                      # inner(File) inside: the File lives only in the hit it skips
    RAN.append("outer")
    return inner(memolab.File("x.csv")) + v

@memo
def top(v):                        # two levels up
    RAN.append("top")
    return outer(v) + "!"

@memo(version="1")
def versioned(v):
    RAN.append("versioned")
    return v * 2

@memo
def uses_versioned(v):             # the inner version= bump must reach it
    RAN.append("uses_versioned")
    return versioned(v) + 1

@memo(max_age="1h")
def fetch(v):
    RAN.append("fetch")
    return v + 100

@memo
def uses_fetch(v):                 # no max_age of its own: fetch's must reach it
    RAN.append("uses_fetch")
    return fetch(v) + 1

@memo
def shell(d):                      # reads its Dir in another process: nothing opened here
    RAN.append("shell")
    return subprocess.run(["cat", os.path.join(d, "y.txt")], capture_output=True, text=True).stdout

@memo
def uses_shell(v):
    RAN.append("uses_shell")
    return shell(memolab.Dir("ydir")) + v

out = [top("a"), uses_versioned(2), uses_fetch(3), uses_shell("!")]
if os.environ.get("IN_PROCESS"):
    # the same process: its in-memory copies are checked too
    open("x.csv", "w").write("changed in process")
    out.append(top("a"))
print(json.dumps({"ran": RAN, "out": out}))
"""


def _nested(project, **env):
    cp = project.run("nested.py", env={k: str(v) for k, v in env.items()})
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_what_nested_calls_consumed_reaches_their_callers(project):
    project.write("nested.py", NESTED)
    (project.root / "x.csv").write_text("x1")
    (project.root / "ydir").mkdir()
    (project.root / "ydir" / "y.txt").write_text("y1")
    r = _nested(project)
    assert r["out"] == ["x1a!", 5, 104, "y1!"] and len(r["ran"]) == 9
    assert _nested(project)["ran"] == []

    (project.root / "ydir" / "y.txt").write_text("y2")  # a Dir argument of a call made inside
    r = _nested(project)
    assert r["out"][3] == "y2!" and sorted(r["ran"]) == ["shell", "uses_shell"], r

    (project.root / "x.csv").write_text("x2")  # the file inner's File argument names
    r = _nested(project)
    assert r["out"][0] == "x2a!" and sorted(r["ran"]) == ["inner", "outer", "top"]
    why = project.run("-m", "memolab", "why", "top").stdout
    assert "x.csv changed" in why, why

    project.write("nested.py", NESTED.replace('@memo(version="1")', '@memo(version="2")'))
    r = _nested(project)
    assert sorted(r["ran"]) == ["uses_versioned", "versioned"] and r["out"][1] == 5
    why = project.run("-m", "memolab", "why", "uses_versioned").stdout
    assert "version of `versioned`" in why and "'1' -> '2'" in why, why

    r = _nested(project, SKEW=2 * 3600)  # two hours later: fetch's result has expired
    assert sorted(r["ran"]) == ["fetch", "uses_fetch"], r
    why = project.run("-m", "memolab", "why", "uses_fetch").stdout
    assert "`fetch` it used expired" in why, why
    assert _nested(project, SKEW=2 * 3600)["ran"] == []

    r = _nested(project, IN_PROCESS=1)
    assert r["out"][4] == "changed in processa!" and r["ran"] == ["top", "outer", "inner"], r
    (project.root / "x.csv").write_text("x2")


CHANGING = """
import json, subprocess, sys, warnings
import memolab
from memolab import memo

class Ran(list):   # a log of runs, kept out of keys
    pass

memolab.register_opaque(Ran)
RAN = Ran()

@memo
def racing(path):
    RAN.append(1)  # noqa
    with open(path) as f:
        text = f.read()
    subprocess.run([sys.executable, "-c", f"open({path!r}, 'a').write('more')"], check=True)  # another writer
    return text

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    racing("r.txt")
print(json.dumps({"ran": len(RAN), "warned": [str(x.message) for x in w]}))
"""


def test_a_file_changed_while_the_body_ran_is_not_stored(project):
    project.write("changing.py", CHANGING)
    (project.root / "r.txt").write_text("r")
    for _ in range(2):
        r = json.loads(project.run("changing.py").stdout.strip().splitlines()[-1])
        assert r["ran"] == 1 and any("r.txt changed while the function ran" in m for m in r["warned"]), r


def test_a_body_that_reads_nothing_records_nothing(tmp_store):
    import memolab
    from memolab.inputs import reads

    @memolab.memo
    def plain(x):
        return x + 1

    assert plain(1) == 2 and plain(1) == 2
    row = plain.evaluations()[0]
    assert '"reads"' not in (row["snapshot"] or "")
    assert not reads.active()


HF_EXAMPLE = """
import json, os, sys

import datasets
import memolab
from memolab import memo


def double(batch):
    return {"y": [v * 2 for v in batch["x"]]}


@memo
def prepare(csv: memolab.File):           # docs/hf.md's example: the CSV by content
    ds = datasets.load_dataset("csv", data_files=os.fspath(csv), split="train")
    return ds.map(double, batched=True)


@memo
def by_path(path):                        # the example as it was: the CSV's path as text
    ds = datasets.load_dataset("csv", data_files=path, split="train")
    return ds.map(double, batched=True)


# by_path runs second: HF's cache of the CSV is warm, so HF never opens the CSV in its body
print(json.dumps([list(prepare(memolab.File("rows.csv"))["y"]), list(by_path("rows.csv")["y"])]))
"""


def test_the_hf_example_never_returns_the_old_rows(project, tmp_path):
    require("datasets")
    project.write("hf_example.py", HF_EXAMPLE)
    project.write("rows.csv", "x\n1\n2\n")
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    assert project.run_json("hf_example.py", env=env) == [[2, 4], [2, 4]]
    with open(project.root / "rows.csv", "a") as f:
        f.write("3\n")  # an appended row: once answered with the old dataset, silently
    assert project.run_json("hf_example.py", env=env) == [[2, 4, 6], [2, 4, 6]]
    # (by_path's first body found HF's cache warm and never opened the CSV: it was recorded still)
    assert "rows.csv changed" in project.run("-m", "memolab", "why", "by_path").stdout


BIG = """
import json, os
import memolab
from memolab import memo

class Ran(list):
    pass

memolab.register_opaque(Ran)
RAN = Ran()

@memo
def size(f: memolab.File):
    RAN.append(1)
    with open(f, "rb") as fh:
        return len(fh.read())

n = size(memolab.File("big.bin"))
print(json.dumps({"ran": len(RAN), "size": n}))
"""


def test_a_file_argument_is_keyed_by_content_not_checked_by_stamp(project):
    """A call's own ``memolab.File`` arguments are in its key by content: its body opening them
    records nothing to check (a file over ``DIGEST_MAX`` has no digest: its stamp would make a
    copy with the same bytes, or a teammate's file, a miss)."""
    project.write("big.py", BIG)
    big = project.root / "big.bin"
    big.write_bytes(b"b" * (17 << 20))
    # at rest: past the racy window (2 s), in which even a large file is digested
    while time.time_ns() < big.stat().st_ctime_ns + 2_100_000_000:
        time.sleep(0.1)
    assert json.loads(project.run("big.py").stdout.splitlines()[-1]) == {"ran": 1, "size": 17 << 20}
    copy = project.root / "copy.bin"
    copy.write_bytes(big.read_bytes())
    os.replace(copy, big)  # the same bytes, another inode and mtime
    assert json.loads(project.run("big.py").stdout.splitlines()[-1]) == {"ran": 0, "size": 17 << 20}


def test_memolabs_own_layers_are_named_by_modules_that_exist_and_matched_at_a_dot():
    """The frames whose reads are memolab's own (``reads.OWN``) are named by dotted module names:
    each must name a module that exists (a module moved or renamed without this list following it
    made its reads the body's, or the body's its), and a name matches at a dot only: ``memolab.call``
    once claimed ``memolab.calls.lifecycle``, the driver that runs the body, and a changed file read
    by a body was then a stale hit."""
    import importlib.util

    from memolab.inputs import reads

    assert [m for m in reads.OWN if importlib.util.find_spec(m) is None] == []
    assert reads.is_own("memolab.store.sqlite") and reads.is_own("memolab.calls.call")
    assert not reads.is_own("memolab.calls.lifecycle")  # the driver: what the body reads is the body's
    assert not reads.is_own("memolab.callsx") and not reads.is_own("memolab.storex.y")
    assert not any(reads.is_own(f"memolab.{x}") for x in ("torch.iteration", "hf.cache", "lightning", "inputs.reads"))
