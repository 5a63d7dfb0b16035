"""The WAL is checkpointed on a thread of its own, never inside a call (``memolab/store/wal.py``).

No timing here: what is pinned is who checkpoints, that the header is read
right, and that a process leaving mid-checkpoint loses nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from memolab import memo
from memolab.store import wal
from memolab.store.sqlite import AUTOCHECKPOINT_FRAMES, Index
from conftest import Calls

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _pending(index: Index) -> int:
    fd = os.open(str(index.path) + "-shm", os.O_RDONLY)
    try:
        n = wal.pending_frames(fd)
    finally:
        os.close(fd)
    assert n is not None
    return n


def _wait_for(cond, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds  # a bound for a stuck thread, not a performance limit
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_pending_frames_counts_the_frames_not_yet_copied_back(tmp_path):
    index = Index(tmp_path / "index.sqlite")
    c = index.conn()
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert _pending(index) == 0
    with index.write() as w:
        w.execute("INSERT INTO meta(key, value) VALUES ('a', ?)", ("x" * 10_000,))  # a few pages
    page = c.execute("PRAGMA page_size").fetchone()[0]
    frames = (os.path.getsize(str(index.path) + "-wal") - 32) // (page + 24)  # a fresh log: header, then frames
    assert frames >= 3
    assert _pending(index) == frames
    busy, log, copied = c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert (busy, log, copied) == (0, frames, frames)
    assert _pending(index) == 0


def test_an_unreadable_header_is_no_count(tmp_path):
    p = tmp_path / "not-shm"
    p.write_bytes(b"\0" * 200)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert wal.pending_frames(fd) is None  # not SQLite's version number: SQLite's backstop checkpoints
    finally:
        os.close(fd)


def test_commits_leave_the_checkpoint_to_a_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "CHECKPOINT_FRAMES", 30)

    @memo(store=tmp_path / "s")
    def f(x):
        return x + 1

    for i in range(80):  # about 10 frames a miss: several times the threshold
        assert f(i) == i + 1
    index = f.store().index
    # SQLite's own checkpoint, in the committing call, only as a backstop far above
    assert index.conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == AUTOCHECKPOINT_FRAMES
    assert _wait_for(lambda: index.wal.checkpoints >= 1 and _pending(index) < 30)
    assert any(t.name == "memolab-wal-checkpoint" and t.daemon for t in threading.enumerate())
    f.store().forget()
    assert all(f(i) == i + 1 for i in range(80))  # read back after the checkpoints


def test_a_forked_child_checkpoints_on_its_own_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "CHECKPOINT_FRAMES", 30)
    calls = Calls()

    @memo(store=tmp_path / "s")
    def f(x):
        calls.append(x)
        return x + 1

    for i in range(40):
        f(i)
    index = f.store().index
    assert _wait_for(lambda: index.wal.checkpoints >= 1)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            before = index.wal.checkpoints  # the parent's count, copied by the fork
            ok = all(f(1000 + i) == 1001 + i for i in range(60))
            ok = ok and _wait_for(lambda: index.wal.checkpoints > before and _pending(index) < 30)
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    f.store().forget()
    assert all(f(1000 + i) == 1001 + i for i in range(60))  # the child's results, checkpointed or not
    assert not [x for x in calls if x >= 1000]


WRITER = """
import os, sys
import memolab
from memolab import memo
from memolab.store import wal
wal.CHECKPOINT_FRAMES = 20  # checkpoints all the time: the exit below lands in one, or close to one
memolab.configure(store=sys.argv[1])

@memo
def f(x):
    return x * 3

lo = int(sys.argv[2])
for x in range(lo, lo + 150):
    f(x)
os._exit(0)  # at once: no atexit, the daemon thread possibly mid-checkpoint
"""

READER = """
import sys
import memolab
from memolab import memo
from memolab.store import get_store
memolab.configure(store=sys.argv[1])

@memo
def f(x):
    return x * 3

c = get_store().index.conn()
count = lambda: c.execute("SELECT COUNT(*) FROM evaluations WHERE status='done'").fetchone()[0]
stored = count()
assert all(get_store().lookup(f.key(x)) is not None for x in range(600))  # the writers' keys: hits
assert all(f(x) == x * 3 for x in range(600))
print(stored, count(), c.execute("PRAGMA integrity_check").fetchone()[0])
"""


def test_a_process_that_exits_mid_checkpoint_loses_nothing(tmp_path):
    env = dict(os.environ, PYTHONPATH=SRC)
    store = str(tmp_path / "s")
    for lo in (0, 150, 300, 450):  # four writer processes, one after the other
        cp = subprocess.run([sys.executable, "-c", WRITER, store, str(lo)], env=env, capture_output=True, text=True,
                            timeout=300)
        assert cp.returncode == 0, cp.stderr
    cp = subprocess.run([sys.executable, "-c", READER, store], env=env, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["600", "600", "ok"]  # every result read back, none recomputed; the index sound


def test_a_retired_index_lets_its_thread_end(tmp_path, monkeypatch):
    """The default store follows the working directory: a store left behind must not be kept
    alive (connections, thread) by its checkpoint thread."""
    import gc
    import weakref

    monkeypatch.setattr(wal, "CHECKPOINT_FRAMES", 1)
    index = Index(tmp_path / "index.sqlite")
    with index.write() as w:
        w.execute("INSERT INTO meta(key, value) VALUES ('a', 'b')")
    thread = index.wal._thread
    assert thread is not None and thread.is_alive()
    assert _wait_for(lambda: index.wal.checkpoints >= 1)
    ref = weakref.ref(index)
    del index, w
    gc.collect()
    assert ref() is None
    thread.join(timeout=60)
    assert not thread.is_alive()


PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:  # SQLite's "shared memory in use" byte (unix VFS: offset 128), as a new connection would test it
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)
    print("free")
except OSError:
    print("held")
"""


def test_reading_the_header_keeps_sqlite_s_locks(tmp_path):
    """Closing any descriptor of a file drops all of a process's POSIX locks on it: had the
    header been read through a descriptor opened and closed per commit, SQLite's lock
    saying "this shared memory is in use" would be gone, and the next process to open the
    store would re-initialise it under our connections (a worker of the stress test died
    of SIGBUS that way)."""

    @memo(store=tmp_path / "s")
    def f(x):
        return x

    for i in range(5):
        f(i)  # each miss commits twice, and each commit reads the header
    shm = str(f.store().index.path) + "-shm"
    assert f.store().index.conn().execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 5
    cp = subprocess.run([sys.executable, "-c", PROBE, shm], capture_output=True, text=True, timeout=60)
    assert cp.stdout.strip() == "held", cp.stderr


def test_a_shared_memory_file_sqlite_re_created_is_read_afresh(tmp_path):
    """When the last connection to a store closes, SQLite deletes its -shm file; the next
    connection makes a new one. The descriptor kept for the old one must not be read for ever."""
    import gc

    path = tmp_path / "index.sqlite"
    shm = str(path) + "-shm"
    index = Index(path)
    with index.write() as w:
        w.execute("INSERT INTO meta(key, value) VALUES ('a', 'b')")
    old = wal._shm_fds[shm]
    del index, w
    gc.collect()  # its connections close: the last ones, so SQLite removes the -shm file
    assert not os.path.exists(shm)
    assert os.fstat(old).st_nlink == 0
    index = Index(path)
    with index.write() as w:
        w.execute("INSERT INTO meta(key, value) VALUES ('c', 'd')")
    fd = wal._shm_fds[shm]
    assert os.fstat(fd).st_nlink == 1 and os.fstat(fd).st_ino == os.stat(shm).st_ino
    assert wal.pending_frames(fd) == _pending(index) >= 1


def test_a_failing_look_at_the_log_never_fails_the_commit(tmp_path, monkeypatch):
    """No os.pread (Windows), or no new thread at interpreter shutdown (a commit in an atexit
    handler): the commit went through, so the call returns and its result is stored."""
    def boom(fd):
        raise AttributeError("module 'os' has no attribute 'pread'")

    monkeypatch.setattr(wal, "pending_frames", boom)
    calls = Calls()

    @memo(store=tmp_path / "s")
    def f(x):
        calls.append(x)
        return x * 2

    assert f(21) == 42
    f.store().forget()
    assert f(21) == 42 and calls == [21]


HIT_ONLY = """
import sys
import memolab
from memolab import memo
memolab.configure(store=sys.argv[1])

@memo
def f(x):
    return x + 1

assert f(1) == 2
print("memolab.store.wal" in sys.modules)
"""


def test_a_process_that_only_hits_never_imports_the_checkpointer(tmp_path):
    """The checkpointer is made at an index's first commit. Imported with the store, it made
    the first hit of a fresh process about 20% slower (hit_overhead.py's child, alternating
    processes): ``import _pickle`` in that first hit took 1.4 ms instead of 0.75 ms."""
    env = dict(os.environ, PYTHONPATH=SRC)
    store = str(tmp_path / "s")
    runs = [subprocess.run([sys.executable, "-c", HIT_ONLY, store], env=env, capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr for r in runs]  # a miss commits; a hit does not
