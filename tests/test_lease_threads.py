"""Threads of one process claiming one key compute it once, however long the claim takes
(issue 49, item 2: once, 32 threads computed one leased key 4 times in one process).

The window: a claimer's lease row committed, but the claimer not yet recorded as holding it.
POSIX record locks do not tell threads apart, so a sibling thread gets the key's lock too and
asks the process's own record of what it holds; not recorded yet, the lease looked released and
the sibling took it over and computed the key again. The test widens that window (a pause after
the claim's transaction, hooked in the worker, not the library) in a fresh process."""
from __future__ import annotations

SCRIPT = """
import json, os, threading, time
import memolab
from memolab.store import sqlite

real = sqlite.Index._claim

def slow_claim(self, *a, **kw):
    out = real(self, *a, **kw)
    if out[0] == "owner":
        time.sleep(0.3)  # the window: the lease row is committed, the claim has not returned
    return out

sqlite.Index._claim = slow_claim

@memolab.memo
def f(x):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{threading.get_ident()}\\n")
    time.sleep(0.3)
    return x

n = 6
barrier = threading.Barrier(n)
got = []

def call():
    barrier.wait()
    got.append(f(7))

threads = [threading.Thread(target=call) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
print(json.dumps({"values": got, "computed": len(open(os.environ["CALLS"]).read().split())}))
"""


def test_sibling_threads_never_take_a_lease_whose_claim_is_still_returning(project):
    project.write("threads.py", SCRIPT)
    out = project.run_json("threads.py", env={"CALLS": str(project.root / "calls"), "MEMOLAB_LEASE_FREE_BELOW": "0"})
    assert out["values"] == [7] * 6
    assert out["computed"] == 1, f"one key computed {out['computed']} times by threads of one process"
