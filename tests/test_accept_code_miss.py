"""``memolab accept FUNC`` finds the miss caused by code alone (issue 49, item 2).

On a cluster every worker's call with new arguments records a miss after the code-only miss the
user wants to accept: ``accept`` took the newest miss and refused ("the miss was not caused by
code alone"). Fresh processes on one store, the script edited between them."""
from __future__ import annotations

from test_accept import SCRIPT, body_runs, edit, memolab, stopped, value


def test_accept_finds_the_code_only_miss_behind_newer_misses_of_new_arguments(project):
    project.write("job.py", SCRIPT)
    first = value(project, 3)
    edit(project, 'print("training!", n)  # LOG')
    stopped(project, 3)  # a miss caused by code alone; the user stops the recomputation
    for n in (4, 5):  # other workers: new arguments, recorded after it
        value(project, n)
    assert body_runs(project) == 4
    cp = memolab(project, "accept", "train", "--yes", "--json")
    assert '"new": true' in cp.stdout, cp.stdout + cp.stderr
    again = value(project, 3)
    assert again["pid"] == first["pid"], "the accepted old code's result was not used"
    assert body_runs(project) == 4
