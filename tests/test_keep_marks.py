"""Keep marks (issue 55 §2): ``@memo(keep=True)`` and ``memolab keep``/``unkeep`` mark evaluations
that ``gc`` (by size and by age) never drops, nor their blobs; ``ls`` shows the mark; gc says what
it kept; an older store (schema 5, no keeps table) is read by ``ls`` and ``gc --dry-run`` without
being migrated. End to end, in fresh processes."""
from __future__ import annotations

import json
import sqlite3

JOB = """
import json, os, sys
import memolab
from memolab import memo

@memo(keep=True)
def experiment(n):
    print("RAN experiment", n, file=sys.stderr)
    return os.urandom(300_000)


@memo
def step(n):
    print("RAN step", n, file=sys.stderr)
    return os.urandom(300_000)


out = {}
for n in range(int(sys.argv[1])):
    out[f"experiment{n}"] = experiment(n).hex()[:16]
    out[f"step{n}"] = step(n).hex()[:16]
print(json.dumps(out))
"""


def job(project, n):
    cp = project.run("job.py", str(n))
    ran = [tuple(x.split()[1:]) for x in cp.stderr.splitlines() if x.startswith("RAN ")]
    return {"ran": [(a, int(b)) for a, b in ran], "values": json.loads(cp.stdout.strip().splitlines()[-1])}


def cli(project, *args, check=True):
    return project.run("-m", "memolab", *args, check=check, env={"COLUMNS": "200"})


def evals(project, fn):
    return json.loads(cli(project, "ls", fn, "--json", "--limit", "100").stdout)["evaluations"]


def test_kept_rows_survive_gc_by_size_and_age_and_ls_shows_them(project):
    project.write("job.py", JOB)
    first = job(project, 3)
    assert len(first["ran"]) == 6
    exp, steps = evals(project, "experiment"), evals(project, "step")
    assert all(e["kept"] for e in exp) and not any(e["kept"] for e in steps)
    # one plain step kept by hand
    hand = min(e["id"] for e in steps)
    assert "kept" in cli(project, "keep", f"#{hand}").stdout
    assert [line.split()[0] for line in cli(project, "ls", "step").stdout.splitlines() if "kept" in line] == [str(hand)]

    # 6 results of 300 KB; the 4 kept ones alone exceed 1 MB: every other one goes, no kept one
    dry = json.loads(cli(project, "gc", "--max-size", "1MB", "--dry-run", "--json").stdout)
    assert dry["kept_evaluations"] == 4 and dry["kept_bytes"] >= 4 * 300_000
    out = cli(project, "gc", "--max-size", "1MB", "--yes").stdout
    assert "kept: 4 rows, 1.2 MB" in out
    left = {e["id"] for e in evals(project, "experiment") + evals(project, "step")}
    assert left == {e["id"] for e in exp} | {hand}
    # by age too: everything is older than 0 seconds, the kept rows stay
    cli(project, "gc", "--older-than", "0s", "--yes")
    assert {e["id"] for e in evals(project, "experiment") + evals(project, "step")} == left

    # their blobs stay too: a fresh process hits every kept result, recomputes only the dropped steps
    again = job(project, 3)
    assert sorted(again["ran"]) == [("step", 1), ("step", 2)]
    assert all(again["values"][f"experiment{n}"] == first["values"][f"experiment{n}"] for n in range(3))
    assert again["values"]["step0"] == first["values"]["step0"]

    # unkeep: gc may drop it again
    cli(project, "unkeep", f"#{hand}")
    cli(project, "gc", "--older-than", "0s", "--yes")
    assert {e["id"] for e in evals(project, "step")} == set()
    assert {e["id"] for e in evals(project, "experiment")} == {e["id"] for e in exp}
    # a run's id is refused by keep, naming it
    bad = cli(project, "keep", "#999999", check=False)
    assert bad.returncode != 0 and "no evaluation #999999" in bad.stderr


def test_an_older_store_without_keep_marks_is_read_without_migrating(project):
    project.write("job.py", JOB)
    job(project, 1)
    index = project.store / "index.sqlite"
    c = sqlite3.connect(index)
    c.executescript("DROP TABLE keeps; DROP TABLE local_only; PRAGMA user_version=5; "
                    "UPDATE meta SET value='5' WHERE key='schema_version';")
    c.close()
    assert not any(e["kept"] for e in evals(project, "experiment"))
    dry = json.loads(cli(project, "gc", "--older-than", "0s", "--dry-run", "--json").stdout)
    assert dry["evaluations"] == 2 and dry["kept_evaluations"] == 0
    c = sqlite3.connect(index)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 5
    assert c.execute("SELECT 1 FROM sqlite_master WHERE name='keeps'").fetchone() is None
    c.close()
    # a write migrates it (schema 6), and keep marks work from then on
    cli(project, "keep", "#1")
    c = sqlite3.connect(index)
    assert c.execute("PRAGMA user_version").fetchone()[0] >= 6
    assert c.execute("SELECT COUNT(*) FROM keeps").fetchone()[0] == 1


def test_the_dashboards_runs_list_shows_the_mark(project):
    project.write("job.py", JOB.replace("os.urandom(300_000)", "bytes([n])"))
    job(project, 2)
    cp = project.run("-c", "import json; from memolab.store.reading import open_for_reading; from memolab.ui import views;"
                           " s = open_for_reading(__import__('pathlib').Path('.memolab'));"
                           " print(json.dumps(sorted([r['fn'].rsplit(':', 1)[-1], r['kept']] for fn in ('experiment', 'step')"
                           " for r in views.runs_of(s.index, [f['fn'] for f in s.index.functions() if f['fn'].endswith(fn)][0],"
                           " None))))")
    assert json.loads(cp.stdout) == [["experiment", True], ["experiment", True], ["step", False], ["step", False]]
