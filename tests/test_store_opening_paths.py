"""A store's opening asks the file system by strings and descriptors, not pathlib, with the answers
pathlib and ``os.path`` gave (issue 52 §2, the first hit of a fresh process): ``mounts.located``
(real path and stat from one ``O_PATH`` descriptor), ``perms.exists``, ``config.workspace_dir``'s
walk, ``config.environ_str``, the code cache's salt and folder, a blob folder's Paths made on use."""
from __future__ import annotations

import errno
import os
import sys
import threading
from pathlib import Path

import pytest
import xxhash

from conftest import skip_or_fail
from memolab._version import __version__
from memolab.codegraph import code_cache
from memolab.settings import config
from memolab.store import get_store, mounts, perms
from memolab.store.blobs import BlobFolder
from memolab.store.health import ReadOnlyBlobFolder


def _tree(tmp_path: Path) -> list[str]:
    """Paths of every shape a store's location may take, relative ones included (from ``tmp_path``)."""
    d = tmp_path / "real" / "store"
    d.mkdir(parents=True)
    (d / "index.sqlite").write_bytes(b"")
    (tmp_path / "deleted (deleted)").mkdir()  # (the kernel's suffix of a removed file's name, as a real name)
    os.symlink(tmp_path / "real", tmp_path / "link")  # a folder above, a link
    os.symlink("real/store", tmp_path / "rel")  # a relative link to the folder itself
    os.symlink(tmp_path / "rel", tmp_path / "chain")  # a link to a link
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    os.symlink(d / "index.sqlite", tmp_path / "filelink")
    os.symlink(tmp_path / "real" / "store", tmp_path / "real" / "up")  # then ``..`` after a link: the target's parent
    t = str(tmp_path)
    return [t, f"{t}/real/store", f"{t}/real/store/", f"{t}//real/./store", f"{t}/link/store", f"{t}/rel",
            f"{t}/chain", f"{t}/chain/index.sqlite", f"{t}/link/up/..", f"{t}/real/up/../store", f"{t}/real/store/..",
            f"{t}/deleted (deleted)", f"{t}/dangling", f"{t}/loop", f"{t}/loop/x", f"{t}/missing", f"{t}/missing/x",
            f"{t}/real/store/index.sqlite/x", f"{t}/filelink", f"{t}/real/store/index.sqlite", "real/store", "link/up",
            "link/up/..", "rel", ".", "/", "/proc/self", f"{t}/real\0/store", ""]


@pytest.mark.parametrize("descriptor", [True, False], ids=["o_path", "stat_and_realpath"])
def test_located_answers_what_stat_realpath_and_path_exists_answer(tmp_path, monkeypatch, descriptor):
    monkeypatch.chdir(tmp_path)
    if not descriptor:
        monkeypatch.setattr(mounts, "_NAME_FLAGS", 0)
    elif not mounts._NAME_FLAGS:
        skip_or_fail("no O_PATH here: located is stat and realpath")
    for p in _tree(tmp_path):
        got = mounts.located(p)
        try:
            there = Path(p).exists() if p else False  # (Path("") is ".": the empty name is no file to stat)
        except ValueError:
            there = False
        assert (got is not None) == there, p
        assert perms.exists(p) == there, p
        if got is not None:
            real, st = got
            want = os.stat(p)
            assert real == os.path.realpath(p), p
            assert (st.st_dev, st.st_ino, st.st_mode) == (want.st_dev, want.st_ino, want.st_mode), p


def test_located_takes_no_kernel_name_of_a_removed_folder_and_raises_what_stat_raises(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    real_open = os.open

    def open_then_remove(path, flags, *a, **k):  # removed between the descriptor's open and its name
        fd = real_open(path, flags, *a, **k)
        if os.fspath(path) == str(gone):
            os.rmdir(gone)
        return fd

    monkeypatch.setattr(os, "open", open_then_remove)
    assert mounts.located(str(gone)) is None  # (its name was "…/gone (deleted)": not taken; stat says gone)
    monkeypatch.setattr(os, "open", real_open)

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "denied")

    monkeypatch.setattr(os, "stat", denied)
    monkeypatch.setattr(mounts, "_NAME_FLAGS", 0)
    with pytest.raises(PermissionError):  # as ``Path.exists`` raises it: a folder on the way cannot be searched
        mounts.located(str(tmp_path))
    with pytest.raises(PermissionError):
        perms.exists(str(tmp_path))


def test_a_store_opened_through_a_link_is_the_store_of_its_real_path(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    a, b = get_store(tmp_path / "real" / "s"), get_store(tmp_path / "link" / "s")  # made, then found through the link
    assert a is b and a.root == tmp_path / "real" / "s"
    monkeypatch.chdir(tmp_path / "link")
    assert get_store("s") is a  # a relative path, through the link


def test_the_workspace_walk_asks_the_folders_os_path_asked_and_finds_the_same_one(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text("")
    (tmp_path / "a" / "b" / "c" / ".git").mkdir()
    (tmp_path / "a" / "b" / "pyproject.toml").mkdir()  # (a folder of that name counts: it exists)
    starts = [deep, deep.parent, tmp_path / "a" / "b", tmp_path / "a", tmp_path, Path("/"), Path("/proc/self")]
    real = os.path.realpath(tmp_path)
    for start, want in ((deep, "a/b/c"), (deep.parent, "a/b/c"), (tmp_path / "a" / "b", "a/b"), (tmp_path / "a", "a")):
        assert config.workspace_dir(start) == config.workspace_walk(os.path.realpath(start)) == f"{real}/{want}", start
    for start in starts:
        assert config.workspace_dir(start) == config.workspace_walk(os.path.realpath(start)), start
        monkeypatch.chdir(start)
        assert config.workspace_dir() == config.workspace_walk(os.getcwd()), start
    asked: list[str] = []
    real_stat = os.stat  # (``os.path.exists`` asks ``os.stat`` too)
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (asked.append(p), real_stat(p, *a, **k))[1])
    for start in (deep, tmp_path):
        asked.clear()
        config.workspace_dir(start)
        new = list(asked)
        asked.clear()
        config.workspace_walk(str(start))
        assert new == asked, start  # the same names, in the same order


def test_environ_str_reads_what_os_environ_get_reads(monkeypatch):
    for value in ("plain", "", " spaced ", "caf\u00e9", "bad\udcff"):
        monkeypatch.setenv("MEMOLAB_T52_ENV", value)
        assert config.environ_str(b"MEMOLAB_T52_ENV") == os.environ.get("MEMOLAB_T52_ENV") == value
    monkeypatch.delenv("MEMOLAB_T52_ENV")
    assert config.environ_str(b"MEMOLAB_T52_ENV") is None


def test_the_code_cache_salt_and_folder_are_what_they_were(monkeypatch, tmp_path):
    here = os.path.dirname(os.path.abspath(code_cache.__file__))
    mine = []
    for name in ("bytecode.py", "patches.py", "origins.py"):
        st = os.stat(os.path.join(here, name))
        mine.append(f"{st.st_size}.{st.st_mtime_ns}")
    tag = sys.implementation.cache_tag or sys.version
    want = xxhash.xxh3_64_hexdigest(f"{code_cache._FORMAT}|{tag}|{sys.version}|{__version__}|{'|'.join(mine)}".encode())
    monkeypatch.setattr(code_cache, "_salt", None)
    monkeypatch.chdir(tmp_path)  # (the scanners were placed at import: a new working folder moves nothing)
    assert code_cache._analysis_salt() == want
    cases = [({}, os.path.join(str(tmp_path / "home"), ".cache", "memolab", "code")),
             ({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, str(tmp_path / "xdg" / "memolab" / "code")),
             ({"XDG_CACHE_HOME": ""}, os.path.join(str(tmp_path / "home"), ".cache", "memolab", "code")),
             ({"MEMOLAB_CODE_CACHE": str(tmp_path / "cc")}, str(tmp_path / "cc")),
             ({"MEMOLAB_CODE_CACHE": str(tmp_path / "cc") + "/"}, str(tmp_path / "cc")),
             ({"MEMOLAB_CODE_CACHE": " "}, None), ({"MEMOLAB_CODE_CACHE": "off"}, None)]
    for env, where in cases:
        for name in ("MEMOLAB_CODE_CACHE", "XDG_CACHE_HOME"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(code_cache, "_dir", None)
        assert code_cache._cache_dir() == where, env
        # a file's path in it: the folder joined once (``_in_cache``), as ``os.path.join`` joins it
        assert code_cache._in_cache("k.salt.kinds.marshal") == os.path.join(where or "", "k.salt.kinds.marshal")
    monkeypatch.setattr(code_cache, "_dir", None)


def test_a_blob_folders_paths_are_made_on_use_and_equal_the_roots_children(tmp_path):
    b = BlobFolder(tmp_path / "s")
    assert vars(b).keys().isdisjoint({"dir", "tmp", "quarantine_dir"})  # none made by the opening
    assert (b.dir, b.tmp, b.quarantine_dir) == (tmp_path / "s" / "blobs", tmp_path / "s" / "tmp",
                                                 tmp_path / "s" / "quarantine")
    assert b.dir.is_dir() and b.tmp.is_dir() and not b.quarantine_dir.exists()  # (made as before: blobs/, tmp/)
    assert b.path("ab" * 32) == tmp_path / "s" / "blobs" / "ab" / ("ab" * 31)
    (tmp_path / "file").write_text("")
    r = ReadOnlyBlobFolder(tmp_path / "file" / "t")  # a read-only store's folder that cannot be made: set by hand
    assert (r.dir, r.tmp, r.quarantine_dir) == (tmp_path / "file" / "t" / "blobs", tmp_path / "file" / "t" / "tmp",
                                                 tmp_path / "file" / "t" / "quarantine")


def test_a_stores_opening_makes_no_event_and_a_lease_still_beats(tmp_path):
    from memolab.store import usage
    from memolab.store.local import Store

    s = Store(tmp_path / "s")
    assert "_beat_stop" not in vars(s)  # made by the heartbeat's start
    assert s.usage.prompt or s.usage._wake is usage._NO_WAKE  # (a prompt writer has its own)
    key = ("fn", "code", "args", "")
    owner = s.owner_id()
    s.hold(key, owner)
    try:  # (held: a heartbeat thread beats it, or the log flusher ticks it)
        assert s._beat is None or isinstance(s._beat_stop, threading.Event)
    finally:
        s.release(key, owner)
        if s._beat is not None:
            s._beat_stop.set()
            s._beat.join(10)
    s.close()
