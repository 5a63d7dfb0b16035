"""A miss of code already stored, with no row for its key, is explained when asked.

The rule (docs/storage-format.md, "A common miss is explained when asked"):
such a miss records its key, argument snapshot and the newest evaluation id of
the moment; ``memolab why`` compares it then with the evaluations that existed
at the miss. The answer must be the one an explanation made at the miss would
have given.
"""
from __future__ import annotations

import json

import memolab
from memolab import memo
from memolab.calls.explain import last_miss
from memolab.store import get_store


def _raw(store, fn):
    return store.index.last_miss(fn)


def test_the_first_miss_of_code_is_explained_at_once_and_later_ones_when_asked(tmp_store):
    @memo
    def f(x, y=0):
        return x + y

    store = get_store()
    f(1)
    first = _raw(store, f.symbol)
    assert "pending" not in first and first["reasons"] == ["no stored evaluation of this function yet"]
    (first_id,), = store.index.conn().execute("SELECT id FROM evaluations").fetchall()

    stmts: list = []
    store.index.conn().set_trace_callback(stmts.append)
    f(2)
    store.index.conn().set_trace_callback(None)
    # nothing read to explain it (no nearest-evaluation query); only the newest id noted
    assert not [s for s in stmts if "UNION ALL" in s], stmts
    assert "SELECT max(id) FROM evaluations" in stmts
    raw = _raw(store, f.symbol)
    assert raw["pending"] and "reasons" not in raw
    # compared with f(1), the evaluation that existed at the miss, not with the one
    # the miss went on to store (same key: it would read "damaged or was removed")
    ex = last_miss(store, f.symbol)
    assert ex["reasons"] == ["new arguments: x 1 -> 2"] and ex["evaluation"] == first_id
    assert ex["hit"] is False and ex["time"] == raw["time"]


#: calls whose misses differ in every way arguments can; ``fresh`` forces one
SEQUENCE = [((1,), {}), ((2,), {}), ((2,), {"y": 3}), ((4,), {"y": 3}),
            ((2, 3), {}),  # the arguments of f(2, y=3): a hit, no miss recorded
            (([1, 2],), {}), (([1, 3],), {}), ((5,), {"z": "a"}), ((5,), {}), ((5,), {"z": "b"}),
            ("fresh", (5,), {"z": "b"})]


class _NoneSeen(set):
    def __contains__(self, item: object) -> bool:
        return False


def _misses(store_dir, defer, monkeypatch):
    """(deferred?, explanation) of each miss of SEQUENCE, read right after its call."""
    memolab.configure(store=str(store_dir))

    @memo
    def f(x, y=0, **kw):
        return [x, y, kw]

    store = get_store()
    if not defer:
        monkeypatch.setattr(store, "stored_codes", _NoneSeen())  # "no code seen stored": explain at once
    con = store.index.conn()
    out = []
    for call in SEQUENCE:
        before = con.execute("SELECT max(id) FROM misses").fetchone()[0]
        if call[0] == "fresh":
            f.fresh(*call[1], **call[2])
        else:
            f(*call[0], **call[1])
        if con.execute("SELECT max(id) FROM misses").fetchone()[0] != before:
            out.append((bool(store.index.last_miss(f.symbol).get("pending")), last_miss(store, f.symbol)))
    return out


def test_an_explanation_made_when_asked_is_the_one_made_at_the_miss(tmp_path, monkeypatch):
    """The same calls against two stores, one explaining every miss at once: each
    miss gets the same reasons and the same compared evaluation from both."""
    now = _misses(tmp_path / "now", False, monkeypatch)
    later = _misses(tmp_path / "later", True, monkeypatch)
    assert len(now) == len(later) == len(SEQUENCE) - 1
    assert [e["reasons"] for _, e in now] == [e["reasons"] for _, e in later]
    assert [e["evaluation"] for _, e in now] == [e["evaluation"] for _, e in later]
    assert not any(p for p, _ in now)
    # every miss but the first (code new here) and the forced one was deferred
    assert [p for p, _ in later] == [False] + [True] * (len(later) - 2) + [False]
    reasons = [e["reasons"] for _, e in later]
    assert reasons[1] == ["new arguments: x 1 -> 2"]
    assert ["new arguments: kw {'z': 'a'} -> {}"] in reasons
    assert reasons[-1][0] == "recomputation forced with .fresh()"


def _a_deferred_miss():
    """f(1) stored, then f(2): a miss of stored code, explained when asked."""
    @memo
    def f(x):
        return x

    f(1)
    f(2)
    store = get_store()
    return f, store, store.index.conn()


def test_a_deferred_miss_whose_new_code_is_gone_says_code_changed(tmp_store):
    f, store, con = _a_deferred_miss()
    # as if f(1) had been stored by an older version of the code and f(2)'s and
    # every other evaluation of the new code were since removed (gc, clear)
    con.execute("UPDATE evaluations SET code='0ld' || code WHERE args=?", (f.key(1)[2],))
    con.execute("DELETE FROM evaluations WHERE args=?", (f.key(2)[2],))
    con.commit()
    ex = last_miss(store, f.symbol)
    assert ex["reasons"][0].startswith("code changed (which code is no longer known")
    assert ex["reasons"][1] == "new arguments: x 1 -> 2"


APP_V1 = '''
import sys
from memolab import memo

SCALE = 2

def helper(x):
    return x * SCALE

@memo
def f(x):
    return helper(x)

for a in sys.argv[1:]:
    f(int(a))
'''


def test_why_in_a_fresh_process_explains_a_deferred_code_change_with_its_diff(project):
    project.write("app.py", APP_V1)
    project.run("app.py", "1", "2")
    project.write("app.py", APP_V1.replace("return x * SCALE", "return x * SCALE + 1"))
    # 3: the first miss of the new code here, explained at once; 2: stored by the old
    # code, so a deferred miss whose nearest evaluation has other code
    project.run("app.py", "3", "2")
    raw = project.run("-c", "import json, memolab\nfrom memolab.store import get_store\n"
                            "print(json.dumps(get_store().index.last_miss('__main__:f')))")
    assert json.loads(raw.stdout)["pending"] is True
    out = project.run("-m", "memolab", "why", "f").stdout
    assert "`__main__:helper` changed" in out, out
    assert "+    return x * SCALE + 1" in out and "-    return x * SCALE" in out, out
    assert "new arguments" not in out, out  # same arguments as the evaluation compared with
    js = json.loads(project.run("-m", "memolab", "why", "f", "--json").stdout)
    assert js["miss"]["hit"] is False and "`__main__:helper` changed" in js["miss"]["reasons"]
    assert "__main__:helper" in js["miss"]["diffs"]


def test_a_damaged_deferred_record_or_row_is_said_not_raised(tmp_store):
    f, store, con = _a_deferred_miss()
    con.execute("UPDATE evaluations SET snapshot='{not json' WHERE args=?", (f.key(1)[2],))
    con.commit()
    ex = last_miss(store, f.symbol)
    assert ex["hit"] is False and ex["reasons"][0].startswith("this miss cannot be explained now (JSONDecodeError")
