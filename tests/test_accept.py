"""``memolab accept``: a code change the user says gives the same results (docs/cache-rules.md,
"Accepted code changes"). Real scripts in fresh processes, edited between runs; the body counts
its own runs in a file, and its result carries the pid of the process that computed it, so a
hit is told from a recomputation by value, never by timing."""
from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys

import pytest

from conftest import SRC, read_terminal

SCRIPT = '''
import json, os, sys
import memolab

@memolab.memo
def train(n):
    with open("body.log", "a") as f:
        f.write(f"train {n}\\n")
    print("training", n)  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")  # the user stops the recomputation they did not want
    return {"n": n, "pid": os.getpid()}

if os.environ.get("EXPLAIN"):
    print(json.dumps(str(train.explain(int(sys.argv[1])))))
    sys.exit(0)
print(json.dumps(train(int(sys.argv[1]))))
'''


def body_runs(project) -> int:
    p = project.root / "body.log"
    return len(p.read_text().splitlines()) if p.exists() else 0


def env(project, **kw):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(project.root)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["MEMOLAB_STORE"] = str(project.store)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.pop("MEMOLAB_HMAC_KEY", None)
    e.update(kw)
    return e


def memolab(project, *args, check=True, input=None, **kw):
    cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=project.root, input=input, text=True,
                        capture_output=True, timeout=120, env=env(project, **kw),
                        stdin=subprocess.DEVNULL if input is None else None)
    if check and cp.returncode != 0:
        raise AssertionError(f"{args} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return cp


def value(project, n=3, **kw):
    return project.run_json("job.py", str(n), env={"MEMOLAB_HMAC_KEY": "", **kw})


def stopped(project, n=3, **kw):
    """Run the (edited) job and stop its recomputation: a miss that stores nothing."""
    cp = project.run("job.py", str(n), env={"STOP": "1", "MEMOLAB_HMAC_KEY": "", **kw}, check=False)
    assert cp.returncode != 0 and "stopped by hand" in cp.stderr, cp.stderr
    return cp


def edit(project, line: str, script: str = SCRIPT) -> None:
    project.write("job.py", script.replace('print("training", n)  # LOG', line))


def test_log_line_edit_accept_hit_edit_again_miss_undo_miss(project):
    """The issue's scenario, each step in a fresh process."""
    project.write("job.py", SCRIPT)
    first = value(project)
    assert body_runs(project) == 1 and first["n"] == 3

    edit(project, 'print("training", n, "on", os.cpu_count(), "cpus")  # LOG')  # a log line
    stopped(project)  # a miss: the body ran (and was stopped)
    assert body_runs(project) == 2

    # without a terminal and without --yes: refused, nothing recorded
    cp = memolab(project, "accept", "train", check=False)
    assert cp.returncode == 2 and "without a terminal" in cp.stderr and "--yes" in cp.stderr
    assert "+    print(\"training\", n, \"on\", os.cpu_count(), \"cpus\")" in cp.stdout  # it showed the diff
    assert json.loads(memolab(project, "accept", "train", "--list", "--json").stdout)["accepts"] == []
    stopped(project)
    assert body_runs(project) == 3

    cp = memolab(project, "accept", "train", "--yes")
    assert "diff of __main__:train" in cp.stdout and "accepted: accept #1" in cp.stdout
    # the function as `ls --json` prints it (its label), not its symbol (issue 53 §1)
    assert "job.py:train: miss" in cp.stdout and "__main__:train: miss" not in cp.stdout, cp.stdout
    assert "calls of job.py:train with this code" in cp.stdout
    assert value(project) == first  # the old value (the first process's pid), and no body run
    assert body_runs(project) == 3
    assert value(project, 4)["n"] == 4 and body_runs(project) == 4  # new arguments: computed as always

    edit(project, 'print("training", n, "again")  # LOG')  # another edit: not covered
    stopped(project)
    assert body_runs(project) == 5
    why = json.loads(memolab(project, "why", "train", "--json").stdout)["miss"]
    assert why["diffs"] and "__main__:train" in why["diffs"] and why["change"]["code"] != why["change"]["stored"]

    edit(project, 'print("training", n, "on", os.cpu_count(), "cpus")  # LOG')  # back to the accepted code
    assert value(project) == first and body_runs(project) == 5

    cp = memolab(project, "accept", "train", "--undo")
    assert "taken back: accept #1" in cp.stdout
    assert value(project)["pid"] != first["pid"]  # a miss again: computed
    assert body_runs(project) == 6


def test_what_an_accept_records_and_where_it_is_shown(project):
    project.write("job.py", SCRIPT)
    first = value(project)
    edit(project, 'print("step", n)  # LOG')
    stopped(project)
    got = json.loads(memolab(project, "accept", "train", "--yes", "--json").stdout)
    a = got["accepted"]
    assert got["new"] is True and a["fn"] == "__main__:train" and a["new_code"] != a["old_code"]
    assert a["user"] and a["host"] and a["time"] > 0 and a["undone"] is None and a["evaluation"] == 1
    assert set(a["deps_before"]) == set(a["deps_after"]) and "__main__:train" in a["deps_before"]
    assert a["deps_before"]["__main__:train"] != a["deps_after"]["__main__:train"]
    assert "print(\"step\", n)" in a["diffs"]["__main__:train"]
    # accepting again records nothing new
    again = json.loads(memolab(project, "accept", "train", "--yes", "--json").stdout)
    assert again["new"] is False and again["accepted"]["id"] == a["id"]

    show = memolab(project, "show", "1").stdout
    assert "accepted changes" in show and "accept #1" in show
    show_json = json.loads(memolab(project, "show", "1", "--json").stdout)
    assert [x["id"] for x in show_json["accepts"]] == [a["id"]]
    why = memolab(project, "why", "train").stdout
    assert "accepted since" in why and "accept #1" in why
    assert json.loads(memolab(project, "why", "train", "--json").stdout)["accepts"][0]["id"] == a["id"]
    runs = memolab(project, "runs", "train").stdout
    assert "accepted" in runs and "accept #1" in runs
    runs_json = json.loads(memolab(project, "runs", "train", "--json").stdout)["runs"]
    assert any(r["accepted"] for r in runs_json)
    assert value(project) == first
    # the hit through the accept is explained as such
    out = project.run_json("job.py", "3", env={"EXPLAIN": "1", "MEMOLAB_HMAC_KEY": ""})
    assert out.startswith("job.py:train: hit") and "accept #1" in out

    memolab(project, "accept", "train", "--undo")
    listed = json.loads(memolab(project, "accept", "train", "--list", "--all", "--json").stdout)["accepts"]
    assert listed[0]["undone"] is not None and listed[0]["undone_by"]
    stopped(project)
    why = memolab(project, "why", "train").stdout
    assert "taken back" in why


def test_accept_on_a_terminal_asks_and_declining_records_nothing(project):
    project.write("job.py", SCRIPT)
    value(project)
    edit(project, 'print("hello", n)  # LOG')
    stopped(project)

    def on_terminal(answer: bytes) -> str:
        main, sub = pty.openpty()
        try:
            p = subprocess.Popen([sys.executable, "-m", "memolab", "accept", "train"], cwd=project.root,
                                 env=env(project), stdin=sub, stdout=sub, stderr=sub)
            os.close(sub)
            os.write(main, answer)
            chunks = [read_terminal(main, p)]
            p.wait(timeout=60)
            return b"".join(chunks).decode()
        finally:
            os.close(main)

    out = on_terminal(b"n\n")
    assert "accept this change" in out and "not accepted" in out
    assert json.loads(memolab(project, "accept", "train", "--list", "--json").stdout)["accepts"] == []
    out = on_terminal(b"y\n")
    assert "accepted: accept #1" in out
    assert json.loads(memolab(project, "accept", "train", "--list", "--json").stdout)["accepts"][0]["id"] == 1


def test_nothing_to_accept_without_a_miss_caused_by_code_alone(project):
    project.write("job.py", SCRIPT)
    value(project)
    cp = memolab(project, "accept", "train", "--yes", check=False)  # its first miss: nothing stored before
    assert cp.returncode == 1 and "not caused by code alone" in cp.stderr and "no stored evaluation" in cp.stderr
    value(project, 5)  # a miss of new arguments
    cp = memolab(project, "accept", "train", "--yes", check=False)
    assert cp.returncode == 1 and "not caused by code alone" in cp.stderr and "new arguments" in cp.stderr
    # a version= bump says results changed on purpose
    project.write("job.py", SCRIPT.replace("@memolab.memo\n", "@memolab.memo(version=2)\n"))
    value(project)
    project.write("job.py", SCRIPT.replace("@memolab.memo\n", "@memolab.memo(version=3)\n"))
    stopped(project)
    cp = memolab(project, "accept", "train", "--yes", check=False)
    assert cp.returncode == 1 and "version= salt changed" in cp.stderr
    assert json.loads(memolab(project, "accept", "train", "--list", "--all", "--json").stdout)["accepts"] == []


CHAIN = '''
import json, os, sys
import memolab

@memolab.memo
def train(n):
    with open("body.log", "a") as f:
        f.write(f"train {n}\\n")
    print("v", 1)  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return {"n": n, "pid": os.getpid()}

print(json.dumps(train(int(sys.argv[1]))))
'''


def test_a_chain_of_accepts_reaches_every_code_it_names(project):
    """A (n=3 stored) -> B accepted; n=4 stored under B; C accepted as B: C reaches both."""
    project.write("job.py", CHAIN)
    a3 = value(project, 3)
    edit(project, 'print("v", 2)  # LOG', CHAIN.replace('print("v", 1)  # LOG', 'print("training", n)  # LOG'))
    stopped(project, 3)
    memolab(project, "accept", "train", "--yes")
    b4 = value(project, 4)  # stored under B
    edit(project, 'print("v", 3)  # LOG', CHAIN.replace('print("v", 1)  # LOG', 'print("training", n)  # LOG'))
    stopped(project, 4)  # compared with n=4's evaluation, under B
    cp = memolab(project, "accept", "train", "--yes")
    assert "accept #2" in cp.stdout
    n = body_runs(project)
    assert value(project, 4) == b4 and value(project, 3) == a3  # C -> B, and C -> B -> A
    assert body_runs(project) == n
    # taking back the first link cuts what lies behind it
    memolab(project, "accept", "train", "--undo", "--id", "1")
    assert value(project, 4) == b4 and value(project, 3)["pid"] != a3["pid"]


TWO = '''
import json, os, sys
import memolab

def helper(n):
    print("helping", n)  # LOG
    return n + 1

@memolab.memo
def f(n):
    with open("body.log", "a") as fh:
        fh.write(f"f {n}\\n")
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return {"f": helper(n), "pid": os.getpid()}

@memolab.memo
def g(n):
    with open("body.log", "a") as fh:
        fh.write(f"g {n}\\n")
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return {"g": helper(n), "pid": os.getpid()}

print(json.dumps([f(int(sys.argv[1])), g(int(sys.argv[1])) if not os.environ.get("ONLY_F") else None]))
'''


def test_an_accept_covers_one_function_and_every_dependency_it_showed(project):
    project.write("job.py", TWO)
    first = value(project)
    edit(project, 'print("helping with", n)  # LOG', TWO.replace('print("helping", n)  # LOG',
                                                                 'print("training", n)  # LOG'))
    stopped(project, ONLY_F="1")
    cp = memolab(project, "accept", "f", "--yes")
    assert "diff of __main__:helper" in cp.stdout  # the dependency's change, shown and covered
    n = body_runs(project)
    got = value(project)
    assert got[0] == first[0]  # f: through the accept
    assert got[1]["pid"] != first[1]["pid"]  # g depends on the same helper: its own digest, its own miss
    assert body_runs(project) == n + 1


RNG = '''
import json, os, random, sys
import memolab

@memolab.memo
def sample(n):
    with open("body.log", "a") as f:
        f.write(f"sample {n}\\n")
    print("sampling")  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return [random.random() for _ in range(n)]

random.seed(int(os.environ.get("SEED", "0")))
print(json.dumps(sample(int(sys.argv[1]))))
'''


def test_a_hit_through_an_accept_still_checks_the_global_generator_states(project):
    project.write("job.py", RNG)
    s0 = value(project, 3, SEED="0")
    s1 = value(project, 3, SEED="1")
    assert s0 != s1 and body_runs(project) == 2
    edit(project, 'print("sampling now")  # LOG', RNG.replace('print("sampling")  # LOG', 'print("training", n)  # LOG'))
    stopped(project, 3, SEED="0")
    memolab(project, "accept", "sample", "--yes")
    n = body_runs(project)
    assert value(project, 3, SEED="0") == s0 and value(project, 3, SEED="1") == s1  # each seed its own row
    assert body_runs(project) == n
    s2 = value(project, 3, SEED="2")  # a seed never computed: computed
    assert body_runs(project) == n + 1 and s2 not in (s0, s1)


REFS = '''
import json, os, sys
import memolab

class Model:
    def predict(self, x):
        return x * 2  # MODEL

@memolab.memo
def fit(n):
    with open("body.log", "a") as f:
        f.write(f"fit {n}\\n")
    print("fitting")  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    m = Model()
    m.pid = os.getpid()
    return m

m = fit(int(sys.argv[1]))
print(json.dumps({"pid": m.pid, "y": m.predict(10)}))
'''


def test_a_hit_through_an_accept_still_checks_the_code_its_result_refers_to(project):
    """The result is an instance of user code; accepting a change that edits that class too does
    not let the stored instance be rebuilt with the new class: the stored code reference is
    checked on load, as on any hit, and the call computes."""
    project.write("job.py", REFS)
    first = value(project)
    edited = REFS.replace('print("fitting")  # LOG', 'print("fitting now")  # LOG').replace(
        "return x * 2  # MODEL", "return x * 3  # MODEL")
    project.write("job.py", edited)
    stopped(project)
    cp = memolab(project, "accept", "fit", "--yes")
    assert "diff of __main__:Model" in cp.stdout
    got = value(project)
    assert got["y"] == 30 and got["pid"] != first["pid"]  # computed: the stored instance's class changed


def test_python_api_accept_and_undo(project):
    api = SCRIPT.replace("print(json.dumps(train(int(sys.argv[1]))))", '''
mode = sys.argv[1]
if mode == "value":
    print(json.dumps(train(3)))
elif mode == "refuse":
    try:
        train.accept(3)
    except memolab.errors.NotAccepted as e:
        print(json.dumps({"refused": str(e)}))
elif mode == "accept":
    a = train.accept(3, yes=True)
    print(json.dumps({"id": a["id"], "old": a["old_code"], "new": a["new_code"], "now": train.code_digest()}))
elif mode == "hit":
    print(json.dumps({"explain": str(train.explain(3)), "value": train(3)}))
elif mode == "new-args":
    try:
        train.accept(5, yes=True)
    except memolab.errors.NotAccepted as e:
        print(json.dumps({"refused": str(e)}))
elif mode == "undo":
    print(json.dumps({"undone": [a["id"] for a in train.undo_accept()]}))
''')
    run = lambda mode: project.run_json("api.py", mode, env={"MEMOLAB_HMAC_KEY": ""})  # noqa: E731
    project.write("api.py", api)
    first = run("value")
    project.write("api.py", api.replace('print("training", n)  # LOG', 'print("python api", n)  # LOG'))
    assert "without a terminal" in run("refuse")["refused"]
    got = run("accept")
    assert got["new"] == got["now"] and got["old"] != got["new"]
    hit = run("hit")
    assert hit["value"] == first and "hit" in hit["explain"] and "accept #1" in hit["explain"]
    assert body_runs(project) == 1  # the python api never ran the body to accept
    # arguments never computed: explain(5) is a miss for its arguments, not for the code alone
    refused = run("new-args")["refused"]
    assert "not caused by code alone" in refused, refused
    assert run("undo")["undone"] == [1]
    assert run("value")["pid"] != first["pid"]


def test_an_unsigned_or_forged_accept_is_not_followed_where_results_are_signed(project):
    key = {"MEMOLAB_HMAC_KEY": "team-secret-0123456789"}
    project.write("job.py", SCRIPT)
    first = project.run_json("job.py", "3", env=key)
    edit(project, 'print("signed", n)  # LOG')
    cp = project.run("job.py", "3", env={"STOP": "1", **key}, check=False)
    assert "stopped by hand" in cp.stderr
    memolab(project, "accept", "train", "--yes")  # recorded without the key: unsigned
    n = body_runs(project)
    cp = project.run("job.py", "3", env={"STOP": "1", **key}, check=False)
    assert "is not followed" in cp.stderr and "unsigned" in cp.stderr and body_runs(project) == n + 1
    memolab(project, "accept", "train", "--undo")
    memolab(project, "accept", "train", "--yes", **key)  # signed
    assert project.run_json("job.py", "3", env=key) == first
    # a forged one (its old code changed in the index by hand) is refused
    with sqlite3.connect(project.store / "index.sqlite") as c:
        c.execute("UPDATE accepts SET old_code = 'x' || old_code WHERE undone IS NULL")
    cp = project.run("job.py", "3", env={"STOP": "1", **key}, check=False)
    assert "does not match" in cp.stderr


def test_code_version_mode_keys_by_version_alone(project):
    script = SCRIPT.replace("@memolab.memo\n", '@memolab.memo(code="version", version="1")\n')
    project.write("job.py", script)
    first = value(project)
    project.write("job.py", script.replace("return {\"n\": n,", "return {\"n\": n * 10,"))  # a real change!
    assert value(project) == first  # ignored: what code="version" gives up
    project.write("job.py", script.replace('version="1"', 'version="2"'))
    assert value(project)["pid"] != first["pid"]
    cp = memolab(project, "accept", "train", "--yes", check=False)
    assert cp.returncode == 1  # a version bump is never accepted


def test_code_version_mode_needs_a_version():
    import memolab

    with pytest.raises(ValueError, match="needs version="):
        memolab.memo(code="version")(lambda x: x)
    with pytest.raises(ValueError, match="must be one of"):
        memolab.memo(code="source")(lambda x: x)


def test_resolve_follows_chains_nearest_first_and_stops_at_cycles():
    from memolab.store.accepts import MAX_LINKS, resolve

    acc = [dict(id=1, new_code="B", old_code="A", time=1.0), dict(id=2, new_code="C", old_code="B", time=2.0),
           dict(id=3, new_code="A", old_code="C", time=3.0), dict(id=4, new_code="C", old_code="D", time=4.0)]
    got = [(old, [a["id"] for a in chain]) for old, chain in resolve(acc, "C")]
    assert got == [("D", [4]), ("B", [2]), ("A", [2, 1])]  # newest first among equals; C itself never
    line = [dict(id=i, new_code=f"c{i}", old_code=f"c{i - 1}", time=float(i)) for i in range(1, 30)]
    assert len(resolve(line, "c29")) == MAX_LINKS


def test_clear_takes_back_the_functions_accepts(project):
    project.write("job.py", SCRIPT)
    value(project)
    edit(project, 'print("cleared", n)  # LOG')
    stopped(project)
    memolab(project, "accept", "train", "--yes")
    assert json.loads(memolab(project, "accept", "train", "--list", "--json").stdout)["accepts"]
    memolab(project, "clear", "train", "--yes")
    with sqlite3.connect(project.store / "index.sqlite") as c:
        assert c.execute("SELECT COUNT(*) FROM accepts").fetchone()[0] == 0
