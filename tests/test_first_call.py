"""What the first call of a fresh process costs, in what can be counted (issue 52 §2/§3; timings are
in benchmarks/hit_overhead.py, torch_first_hit.py and big_results.py).

The first memoized call of a process classifies every loaded module (user code is scanned for
patch sites, libraries are not) and opens the store. Pinned here, in fresh processes whose first
call is a hit:

- the system calls that classify the modules do not grow with the number of modules loaded:
  the folders they lie in are ``lstat``-ed once each (no folder above one is a link, so its
  files' real paths are their own), and which of a settled folder's entries are links comes
  from the code cache (one file for all folders) while the folder's stamp is unchanged: not an
  ``lstat`` a file, no listing; 60 more stdlib modules loaded cost not one more ``lstat``/``stat``;
- the first hit compiles nothing (the patch sites of the script come from the code cache) and
  imports nothing (a scalar result is read without the unpickler: ``inline.plain_scalar``);
- the store's first read runs two PRAGMAs (no I/O but the header) and then the point read:
  no schema work, no write;
- the batch classification (``origins.kinds_of``) answers exactly what ``kind_of`` answers one
  module at a time, through links into and out of library folders: a user's file reached through
  a library folder is the user's (its plants must be watched: a stale result otherwise).
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

from memolab.codegraph import origins

SCRIPT = textwrap.dedent(r'''
    import collections, gc, json, os, sqlite3, sys
    MORE = sys.argv[2] == "more"
    if MORE:  # 60 more single-file stdlib modules, as a bigger program loads
        for name in """abc argparse base64 bdb bisect bz2 calendar cmd code codeop colorsys compileall
                configparser contextvars copy cProfile csv dataclasses difflib dis filecmp fileinput
                fnmatch fractions ftplib getopt getpass gettext glob graphlib gzip heapq hmac imaplib
                ipaddress lzma mimetypes netrc numbers optparse pdb pickletools pprint profile pstats
                py_compile pyclbr queue quopri random sched secrets shlex zipfile statistics stringprep
                tabnanny timeit tracemalloc symtable string textwrap""".split():
            __import__(name)
    import memolab.store.sqlite as index_module
    from memolab import memo, configure
    from memolab.codegraph import origins
    origins.SETTLED_NS = 0  # (folder listings kept in the code cache however new this interpreter's folders are)
    configure(store=os.path.join(sys.argv[1], "store"), verbose=False)

    statements = []

    class Traced(sqlite3.Connection):  # every statement the store's connection runs, from its first
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.set_trace_callback(statements.append)

    opened = index_module.connect
    index_module.connect = lambda target, setup=(), **kw: opened(target, setup, factory=Traced, **kw)

    @memo
    def f(x):
        return x + 1

    calls = collections.Counter()
    read = []

    class Probe(type(os)):  # a library's submodule that counts what reads it: the watch must not
        def __getattribute__(self, name):
            read.append(name)
            return super().__getattribute__(name)

    for i in range(30):  # (a user's file, under the stdlib's package: a library module)
        sys.modules[f"json.m52probe{i}"] = Probe(f"json.m52probe{i}")
        vars(sys.modules[f"json.m52probe{i}"]).update(__file__=__file__)
    read.clear()

    py = collections.Counter()

    def profile(frame, event, arg):  # (not a patch of os.lstat: that would join every key as a plant)
        if event == "call" and frame.f_code.co_name in ("_kinds_fresh", "folder_links", "kept_kinds"):
            py[frame.f_code.co_name] += 1  # the kinds asked module by module, the folders' file read
        if event == "call" and frame.f_code.co_filename.endswith(("pathlib.py", "posixpath>", "posixpath.py")):
            py["path " + frame.f_code.co_name] += 1  # pathlib's and os.path's Python functions (the store's opening)
        if event == "c_call" and arg.__name__ in ("stat", "lstat", "scandir", "compile", "listdir"):
            while frame is not None and "importlib" not in frame.f_code.co_filename:
                if os.sep + "memolab" + os.sep in frame.f_code.co_filename:
                    calls[arg.__name__] += 1  # memolab's own (not the import system's, loading the unpickler)
                    if arg.__name__ == "scandir" and frame.f_code.co_filename.endswith("origins.py"):
                        calls["listed"] += 1  # a folder of modules listed (not read from the code cache)
                    break
                frame = frame.f_back

    before, collections_before = set(sys.modules), [s["collections"] for s in gc.get_stats()]
    sys.setprofile(profile)
    value = f(1)
    sys.setprofile(None)
    print(json.dumps({"value": value, "calls": dict(calls), "py": dict(py), "statements": statements,
                      "imported": sorted(set(sys.modules) - before), "modules": len(sys.modules),
                      "probes_read": len(read)}))
''')


def _run(tmp_path, more: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the code cache: the first run fills it
    cp = subprocess.run([sys.executable, str(tmp_path / "first.py"), str(tmp_path), more], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_the_first_hit_of_a_process_lists_folders_compiles_nothing_and_reads_the_store_at_once(tmp_path):
    (tmp_path / "first.py").write_text(SCRIPT)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='first'\n")
    filled = _run(tmp_path, "less")  # the miss: stores the result, writes the code cache at exit
    assert filled["value"] == 2 and filled["calls"].get("compile", 0) >= 1  # (the script's sites: scanned once)
    assert filled["calls"].get("listed", 0) >= 1  # the stdlib's folders listed once, their links kept in the code cache
    plain, more = _run(tmp_path, "less"), _run(tmp_path, "more")
    assert more["modules"] >= plain["modules"] + 60
    for got in (plain, more):
        assert got["value"] == 2
        assert got["calls"].get("compile", 0) == 0, got  # patch sites from the code cache
        assert got["calls"].get("listed", 0) == 0, got  # the folders' links from the code cache
        assert got["probes_read"] == 0, got  # no module of a library package read (json's, here)
        assert got["imported"] == [], got  # a scalar read without the unpickler (``inline.plain_scalar``)
        # the store's first read: its two PRAGMAs (the header, nothing parsed, nothing written), then the lookup
        assert got["statements"][:2] == ["PRAGMA synchronous=NORMAL", "PRAGMA user_version"], got
        assert len(got["statements"]) == 3 and got["statements"][2].lstrip().upper().startswith("SELECT"), got
    # 60 more modules in the stdlib's folder: not one more system call to classify them
    assert more["calls"] == plain["calls"], (plain["calls"], more["calls"])
    # the packages' kinds as the last process with these modules found them (``origins._kept``): not
    # asked module by module, the folders' file not read; 60 more modules, a new batch: asked once
    paths = {k: v for k, v in plain["py"].items() if k.startswith("path ")}
    assert {k: v for k, v in plain["py"].items() if k not in paths} == {"kept_kinds": 1}, plain["py"]
    assert {k: v for k, v in more["py"].items() if not k.startswith("path ")} == {
        "kept_kinds": 1, "_kinds_fresh": 1, "folder_links": more["py"].get("folder_links")}, more
    # the store found by one descriptor (``mounts.located``: no ``realpath``, its ``lstat`` a folder), opened by
    # names: four Paths made (the configured location, the index's, and ``Index``'s own two), none parsed twice
    # over (3.11: 63 pathlib and os.path calls here, 147 at 0.4.3 with its realpath, abspath and eight Paths)
    assert "path realpath" not in paths and "path abspath" not in paths, (sum(paths.values()), paths)
    if sys.version_info[:2] == (3, 11):
        assert paths.get("path _from_parts", 0) + paths.get("path _from_parsed_parts", 0) <= 4, paths
        assert sum(paths.values()) < 75, paths
    stats = plain["calls"].get("lstat", 0) + plain["calls"].get("stat", 0)
    # (on 3.11 with this suite's venv: 37 here, 1 of them the network check's, which reads no mount table on
    # an ext4 or XFS disk, and none the store's real path's (``mounts.located``: one descriptor); 45 with a
    # ``stat`` of the store for its existence, one for its type, one for its device and ``realpath``'s ``lstat``
    # a folder; 50 with an ``lstat`` of each of the store's names and of
    # each folder of the working folder, 63 with a listing file a folder and an ``lstat`` a package's
    # ``__init__.py``, 139 before any listing, and 216 then with the 60 more modules; the rest are each
    # folder of the paths ``lstat``-ed once, the store's own files)
    assert stats < 45, plain["calls"]
    assert plain["calls"].get("scandir") == 2, plain["calls"]  # the store's root and its ``blobs/``
    # what every connection parses before its first statement: the schema, triggers and all; the kept
    # counts' and argument index's triggers are made by the connections that write (tracking/temptriggers.py)
    with sqlite3.connect(tmp_path / "store" / "index.sqlite") as c:
        kept = dict(c.execute("SELECT name, length(sql) FROM sqlite_master WHERE type='trigger'").fetchall())
    assert set(kept) == {"lineage_replace", "lineage_add", "lineage_drop"}, kept
    assert sum(kept.values()) < 1_700, kept  # (15,068 in 0.4.2, 9,235 in 0.4.3)


def test_kinds_in_a_batch_equal_kinds_one_at_a_time_through_links(tmp_path, monkeypatch):
    """A library folder holding a link to a user's file, a user folder holding a link into a library,
    a linked package folder, a dangling link: listed in one batch (more than ``LIST_MIN`` files a
    folder), each answer is ``kind_of``'s without a listing, and each path ``os.path.realpath``'s."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    site.mkdir(parents=True)
    (work / "mine.py").write_text("")
    (work / "pkg" / "__init__.py").write_text("")
    mods = []
    for i in range(origins.LIST_MIN + 4):  # plain library modules: the folder is listed
        (site / f"lib{i}.py").write_text("")
        mods.append((f"lib{i}", str(site / f"lib{i}.py")))
        (work / f"user{i}.py").write_text("")
        mods.append((f"user{i}", str(work / f"user{i}.py")))
    os.symlink(work / "mine.py", site / "planted.py")  # in a library folder, the user's file: user code
    os.symlink(site / "lib0.py", work / "borrowed.py")  # in the user's folder, a library's file
    os.symlink(work / "pkg", site / "linkedpkg")  # a package folder linked from the user's tree
    (site / "realpkg").mkdir()
    os.symlink(work / "pkg" / "__init__.py", site / "realpkg" / "__init__.py")  # a linked __init__ only
    os.symlink(tmp_path / "nowhere.py", site / "dangling.py")
    mods += [("planted", str(site / "planted.py")), ("borrowed", str(work / "borrowed.py")),
             ("linkedpkg", str(site / "linkedpkg" / "__init__.py")),
             ("realpkg", str(site / "realpkg" / "__init__.py")), ("dangling", str(site / "dangling.py")),
             ("odd", f"{site}/./lib1.py"), ("rel", "relative/x.py"), ("none", None), ("gen", "<string>"),
             ("memolab.x", str(site / "lib2.py")), ("__main__", str(site / "lib3.py"))]
    from memolab.codegraph import code_cache

    monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cache"))
    code_cache.clear()
    # (the files the folders' links place; not a module with no file, which ``kind_of`` places by
    # its distribution: reading every installed one's metadata takes a second)
    mine = [i for i, (_, f) in enumerate(mods) if f and f.startswith("/")]
    # and every module this process has loaded (the stdlib's and lib-dynload's folders: listed)
    mods += [(name, getattr(m, "__file__", None)) for name, m in list(sys.modules.items())]
    origins.clear()
    try:
        batch = origins.kinds_of(mods)
        # and with every folder settled: the folders' links kept and read back by the next batch
        settled = origins.SETTLED_NS
        origins.SETTLED_NS = 0
        try:
            for _ in range(2):
                origins.clear()
                assert origins.kinds_of([mods[i] for i in mine]) == [batch[i] for i in mine]
                code_cache.flush()
                code_cache.clear()
        finally:
            origins.SETTLED_NS = settled
        # the listing does not outlive its batch: a library file replaced by a link to the user's, later, is seen
        (site / "lib4.py").unlink()
        os.symlink(work / "mine.py", site / "lib4.py")
        assert origins.kind_of("lib4", str(site / "lib4.py")) == origins.USER
        os.unlink(site / "lib4.py")
        (site / "lib4.py").write_text("")
        origins.clear()
        alone = [origins.kind_of(n, f) for n, f in mods]
        origins.clear()
        for _name, path in mods:
            if path and path.startswith("/"):
                assert origins.realpath(path) == os.path.realpath(path), path
        for (name, path), b, a in zip(mods, batch, alone, strict=True):
            assert b == a, (name, path, b, a)
    finally:
        origins.clear()
        monkeypatch.delenv("MEMOLAB_CODE_CACHE")
        code_cache.clear()
    kinds = dict(zip((n for n, _ in mods), batch, strict=True))
    # placed by where the links lead (a dangling one too: to a file outside any library folder)
    assert kinds["planted"] == kinds["linkedpkg"] == kinds["realpkg"] == kinds["dangling"] == origins.USER
    assert kinds["borrowed"] == kinds["lib5"] == origins.PACKAGE
    assert kinds["user3"] == origins.USER


def _plain_values() -> list:
    import math
    ints = [0, 1, 255, 256, 65535, 65536, -1, -2 ** 31, 2 ** 31 - 1, 2 ** 31, -2 ** 31 - 1, 2 ** 63, -2 ** 200, 10 ** 600]
    floats = [0.0, -0.0, 1.5, -2.25e-300, math.inf, -math.inf, math.nan, 5e-324]
    strs = ["", "a", "é", "x" * 255, "y" * 256, "\ud800", "日本", "\x00"]
    return [None, True, False, *ints, *floats, *strs, b"", b"\x00\xff", b"z" * 300, (1, 2), [1], {"a": 1},
            bytearray(b"x"), 3j, frozenset()]


def test_a_plain_scalar_reads_as_pickle_reads_it():
    """``inline.plain_scalar``, what a fresh process's first hit reads a small scalar with (no
    unpickler imported): on the pickles of every scalar kind at protocols 2 to 5, and on every
    truncation and one-byte change of them, whenever it answers, ``_pickle.loads`` answers the
    same value of the same type (floats to the bit); where ``_pickle`` fails it never answers."""
    import _pickle
    import pickle
    import random
    import struct

    from memolab.store.inline import plain_scalar

    def same(a, b) -> bool:
        if type(a) is not type(b):
            return False
        return struct.pack("<d", a) == struct.pack("<d", b) if type(a) is float else a == b

    rnd = random.Random(52)
    answered = 0
    for v in _plain_values():
        for proto in (2, 3, 4, 5):
            p = pickle.dumps(v, protocol=proto)
            cases = [p, p + b"."] + [p[:k] for k in range(len(p))]
            for _ in range(60):
                b = bytearray(p)
                b[rnd.randrange(len(b))] = rnd.randrange(256)
                cases.append(bytes(b))
            for at in range(min(len(p), 14)):  # every byte of the header and opcode, every value
                for x in (0, 1, 2, 4, 5, 6, 0x2E, 0x4B, 0x8C, 0x94, 0x95, 0xFF):
                    b = bytearray(p)
                    b[at] = x
                    cases.append(bytes(b))
            for case in cases:
                plain, got = plain_scalar(case)
                if not plain:
                    continue
                answered += 1
                want = _pickle.loads(case)  # (raises if plain_scalar answered where pickle fails)
                assert same(got, want), (case, got, want)
            # (memolab pickles with protocol 5; below 4 a str or bytes is memoized by BINPUT: left to pickle)
            if type(v) in (type(None), bool, int, float, str, bytes) and (proto >= 4 or type(v) not in (str, bytes)):
                plain, got = plain_scalar(p)
                if type(v) is not int or abs(v) < 2 ** 2000:  # (LONG4 above 255 bytes: pickle reads it)
                    assert plain and same(got, v), (v, proto)
    assert answered > 500


def test_a_folders_links_are_kept_only_while_the_folder_is_unchanged_and_settled(tmp_path, monkeypatch):
    """``origins.kinds_of`` keeps which entries of a module's folder are links in the code cache,
    under the folder's stamp (device, inode, modification and change times): read back only with
    that very stamp, only for a folder whose real path is itself (each folder above it ``lstat``-ed
    in every batch), and only kept for a folder whose last change is ``SETTLED_NS`` old (a folder
    just made is listed by every process: a change within one tick of the file system's clock
    would not move it). A library's file replaced by a link to the user's, after a process kept its
    folder, is the user's in the next process (its plants watched: a stale result otherwise)."""
    from memolab.codegraph import code_cache

    monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cache"))
    code_cache.clear()
    origins.clear()
    try:
        code_cache.put_folder_links("/f", (1, 2, 3, 4), frozenset({"b.py"}))
        code_cache.flush()
        code_cache.clear()  # (a new process: read from disk)
        assert code_cache.folder_links("/f", (1, 2, 3, 4)) == frozenset({"b.py"})
        for other in ((9, 2, 3, 4), (1, 9, 3, 4), (1, 2, 9, 4), (1, 2, 3, 9)):
            assert code_cache.folder_links("/f", other) is None, other
        assert code_cache.folder_links("/g", (1, 2, 3, 4)) is None
        # a file holds at most FOLDERS_MAX folders: what a process listed, then what it used, then the rest
        monkeypatch.setattr(code_cache, "FOLDERS_MAX", 3)
        code_cache.put_folder_links("/g", (5, 6, 7, 8), frozenset())
        code_cache.flush()
        code_cache.clear()
        assert code_cache.folder_links("/g", (5, 6, 7, 8)) == frozenset()  # used; "/f" is not
        code_cache.put_folder_links("/h", (1, 1, 1, 1), frozenset({"x"}))
        code_cache.put_folder_links("/i", (2, 2, 2, 2), frozenset())
        code_cache.flush()
        code_cache.clear()
        assert [code_cache.folder_links(*a) for a in (("/f", (1, 2, 3, 4)), ("/g", (5, 6, 7, 8)),
                ("/h", (1, 1, 1, 1)), ("/i", (2, 2, 2, 2)))] == [None, frozenset(), frozenset({"x"}), frozenset()]
        monkeypatch.undo()
        monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cache"))
        code_cache.clear()
        code_cache.put_folder_links("/f", (1, 2, 3, 4), frozenset({"b.py"}))
        code_cache.flush()
        code_cache.clear()
        assert code_cache.folder_links("/f", (1, 2, 3, 4)) == frozenset({"b.py"})
        (tmp_path / "cache" / os.path.basename(code_cache._folders_file())).write_bytes(b"\x00damaged")
        code_cache.clear()
        assert code_cache.folder_links("/f", (1, 2, 3, 4)) is None  # damaged: listed afresh

        site = tmp_path / "venv" / "lib" / "site-packages"
        work = tmp_path / "work"
        site.mkdir(parents=True)
        work.mkdir()
        (work / "mine.py").write_text("")
        (site / "lib.py").write_text("")
        os.symlink(work / "mine.py", site / "planted.py")
        mods = [("lib", str(site / "lib.py")), ("planted", str(site / "planted.py"))]
        scans: list[str] = []
        scandir = os.scandir
        monkeypatch.setattr(origins.os, "scandir", lambda p: scans.append(p) or scandir(p))

        def new_process() -> list[str]:
            code_cache.flush()
            code_cache.clear()
            origins.clear()
            scans.clear()
            return origins.kinds_of(mods)

        # just made: asked afresh by every process (an ``lstat`` a file here), never kept
        for _ in range(2):
            assert new_process() == [origins.PACKAGE, origins.USER] and str(site) not in code_cache._folders_new
        monkeypatch.setattr(origins, "SETTLED_NS", 0)  # settled (at this threshold): kept under its stamp
        assert new_process() == [origins.PACKAGE, origins.USER] and str(site) in scans
        st = os.lstat(site)
        assert code_cache._folders_new[str(site)] == ((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns),
                                                      ("planted.py",))
        assert new_process() == [origins.PACKAGE, origins.USER] and scans == []  # read back, not listed
        # the library's file becomes a link to the user's: the folder's stamp moved, listed afresh
        (site / "lib.py").unlink()
        os.symlink(work / "mine.py", site / "lib.py")
        assert new_process() == [origins.USER, origins.USER] and str(site) in scans
        assert new_process() == [origins.USER, origins.USER] and scans == []
        (site / "lib.py").unlink()
        (site / "lib.py").write_text("")
        assert new_process() == [origins.PACKAGE, origins.USER] and str(site) in scans
        assert new_process() == [origins.PACKAGE, origins.USER] and scans == []
        # a folder above becomes a link (to the same folders): not answered from the kept links, and the
        # files are placed where the links lead (a library folder's name no longer on their path)
        os.rename(tmp_path / "venv", tmp_path / "moved")
        os.symlink(tmp_path / "moved", tmp_path / "venv")
        (tmp_path / "moved" / "lib" / "site-packages").rename(tmp_path / "moved" / "lib" / "plain")
        os.symlink(tmp_path / "moved" / "lib" / "plain", tmp_path / "moved" / "lib" / "site-packages")
        assert new_process() == [origins.USER, origins.USER] == [origins.kind_of(n, f) for n, f in mods]
    finally:
        origins.clear()
        monkeypatch.delenv("MEMOLAB_CODE_CACHE")
        code_cache.clear()


def test_the_team_store_settings_read_from_pyproject_as_a_text_file_reads_them(tmp_path):
    """``config._tool_table`` reads ``pyproject.toml`` through one descriptor (five system calls, not
    ten): the table a text file would give (universal newlines too), ``{}`` for a file that is not
    UTF-8 or not TOML, and a file rewritten is read again (its stamp: inode, size, times)."""
    from memolab.settings import config

    p = tmp_path / "pyproject.toml"
    cases = [
        (b"[project]\nname='x'\n", {}),
        (b"[tool.memolab]\r\nremote = 'postgresql://db/team'\r\nremote_blobs = 's3://b/m'\r\n",
         {"remote": "postgresql://db/team", "remote_blobs": "s3://b/m"}),
        (b"[tool.memolab]\rremote = 'postgresql://db/cr'\r", {"remote": "postgresql://db/cr"}),
        (b"[tool.memolab]\nremote = \n", {}),  # not TOML
        (b"[tool.memolab]\nremote = '\xff'\n", {}),  # not UTF-8
        (b"[tool.memolab]\nremote = 'postgresql://db/" + b"x" * 70_000 + b"'\n",
         {"remote": "postgresql://db/" + "x" * 70_000}),  # more than one read
    ]
    try:
        for data, want in cases:
            p.write_bytes(data)
            assert config._tool_table(tmp_path) == want, data[:40]
            assert config._tool_table(tmp_path) == want  # (from the in-process cache)
        p.unlink()
        assert config._tool_table(tmp_path) == {}
    finally:
        config._pyproject_cache.clear()


def test_the_watch_reads_a_modules_file_as_getattr_does(tmp_path):
    """``patches._watched_sites`` reads a module's ``__file__`` from its namespace (a builtin module,
    which has none, raises and formats no ``AttributeError``), except where ``getattr`` could answer
    otherwise: a PEP 562 ``__getattr__`` or a module subclass. The plants of every such user module
    are watched."""
    import types

    from memolab.codegraph import patches

    src = tmp_path / "planter.py"
    src.write_text("import json\njson.JSONEncoder.encode = None\n")

    class Sub(types.ModuleType):
        @property
        def __file__(self):  # (not in the namespace)
            return str(src)

    plain = types.ModuleType("m52_plain")
    plain.__file__ = str(src)
    lazy = types.ModuleType("m52_lazy")
    lazy.__getattr__ = lambda name: str(src) if name == "__file__" else None
    sub = Sub("m52_sub")
    builtin_like = types.ModuleType("m52_none")  # no file at all: not scanned
    mods = {"m52_plain": plain, "m52_lazy": lazy, "m52_sub": sub, "m52_none": builtin_like}
    for m in (plain, lazy, sub):
        m.__dict__["json"] = __import__("json")
    before = dict(sys.modules)
    sys.modules.update(mods)
    try:
        loaded = [m for name, m in sys.modules.items() if name in mods]
        assert [getattr(m, "__file__", None) for m in loaded] == [str(src)] * 3 + [None]
        origins.clear()
        patches._kinds.clear()
        sites, _ = patches._watched_sites()
        assert ("json.encoder.JSONEncoder", "encode") in {(where, name) for where, _, name, _ in sites}
        # each of the three alone is enough
        for name in ("m52_plain", "m52_lazy", "m52_sub"):
            for other in mods:
                sys.modules.pop(other, None)
            sys.modules[name] = mods[name]
            patches._kinds.clear()
            sites, _ = patches._watched_sites()
            assert ("json.encoder.JSONEncoder", "encode") in {(w, n) for w, _, n, _ in sites}, name
    finally:
        _restore_modules(mods, before)


def _watched_one_module_at_a_time(patches):
    """The watch as it was before it read names first (0.4.3): every module's namespace and file read."""
    import types

    loaded, todo = [], {}
    for modname, m in sys.modules.copy().items():
        if not isinstance(modname, str) or not issubclass(type(m), types.ModuleType):
            continue
        ns = getattr(m, "__dict__", None)
        if type(ns) is not dict:
            continue
        path = getattr(m, "__file__", None)
        if not path:
            continue
        top = modname.partition(".")[0]
        if top not in patches._kinds and top not in todo:
            todo[top] = patches._top_file(modname, m)[1]
        loaded.append((ns, path, top))
    patches._kinds.update(zip(todo, origins.kinds_of(list(todo.items())), strict=True))
    out = set()
    for ns, path, top in loaded:
        if patches._kinds[top] == origins.USER:
            for chain, attr in patches._sites(path):
                target = patches._resolve(chain, ns)
                if target is not None and not patches.neutral(target, attr):
                    out.add((id(target), attr))
    return out


def test_the_watch_reads_a_module_only_where_its_package_is_new_or_the_users(tmp_path):
    """``patches._watched_sites`` reads names first: a module is read (its namespace, its file) only
    where its top-level package is not classified yet (then the package's own module, or, with no
    file there, its first module with one) or is the user's. Its sites equal those of reading every
    module: a user module under a package with no module of its own (``m52orphan.sub``), a namespace
    package placed by its folder, a module subclass, a name that is no string, an object that is no
    module; and a library's submodules are never read."""
    import types

    from memolab.codegraph import patches

    (tmp_path / "ns52").mkdir()
    planter = tmp_path / "planter52.py"
    planter.write_text("import json\njson.JSONEncoder.encode = None\n")
    other = tmp_path / "ns52" / "deeper.py"
    other.write_text("import json\njson.JSONDecoder.decode = None\n")
    orphan = tmp_path / "orphan52.py"
    orphan.write_text("import json\njson.dumps = None\n")

    read: list[str] = []

    class Probe(types.ModuleType):  # counts every attribute read (``__dict__`` included)
        def __getattribute__(self, name):
            read.append(types.ModuleType.__getattribute__(self, "__name__"))
            return super().__getattribute__(name)

    def module(cls, name, file=None, **ns):
        m = cls(name)
        if file is not None:
            m.__file__ = str(file)
        m.__dict__.update(ns)
        return m

    json_ = __import__("json")
    mods = {
        "m52user": module(types.ModuleType, "m52user", planter, json=json_),
        "m52orphan.sub": module(types.ModuleType, "m52orphan.sub", orphan, json=json_),  # no ``m52orphan``
        "ns52": module(types.ModuleType, "ns52", __path__=[str(tmp_path / "ns52")]),  # a namespace package
        "ns52.deeper": module(Probe, "ns52.deeper", other, json=json_),
        "m52none": module(types.ModuleType, "m52none"),  # no file: a builtin's shape
        # a builtin's shape with a module of the user's under it: a package placed by no file is a library
        "m52bare": module(types.ModuleType, "m52bare"),
        "m52bare.sub": module(types.ModuleType, "m52bare.sub", orphan, json=json_),
        "m52object": object(),
        **{f"json.m52probe{i}": module(Probe, f"json.m52probe{i}", planter, json=json_) for i in range(20)},
    }
    before = dict(sys.modules)
    sys.modules.update(mods)
    sys.modules[52] = module(types.ModuleType, "52", planter, json=json_)  # type: ignore[index]
    try:
        origins.clear()
        patches._kinds.clear()
        read.clear()
        sites, _ = patches._watched_sites()
        got = {(id(t), a) for _, _, a, t in sites}
        # ns52.deeper alone (namespace and file: to place ns52, then to watch it), no json.m52probe* (the stdlib's)
        assert read == ["ns52.deeper"] * 4, read
        wants = {("json.encoder.JSONEncoder", "encode"), ("json.decoder.JSONDecoder", "decode"), ("json", "dumps")}
        assert wants <= {(w, a) for w, _, a, _ in sites}, sites
        del sys.modules[52]  # (the walk of 0.4.3 stopped at a name that is no string)
        origins.clear()
        patches._kinds.clear()
        assert got == _watched_one_module_at_a_time(patches)
        # a second walk, with the packages known, reads only the user's modules
        read.clear()
        patches._watched_sites()
        assert read == ["ns52.deeper"] * 2, read
    finally:
        sys.modules.pop(52, None)  # type: ignore[call-overload]
        _restore_modules(mods, before)


def test_a_batch_of_kinds_is_kept_while_each_folder_that_placed_it_is_unchanged(tmp_path, monkeypatch):
    """``origins.kinds_of`` keeps a batch's answers (``KEEP_MIN`` modules or more: a fresh process's
    first call asks about every top-level package) in the code cache, keyed by its names and files,
    with the stamps of the folders whose links placed them and the folders above those. A later
    process answers from it when each such folder has its stamp and each folder above is still a
    folder: no work a module. A library's file replaced by a link to the user's, or a folder above
    turned into a link (the library folder's own stamp unchanged), is seen by the next process;
    a file that is a link is asked afresh by every process. Each answer equals ``kind_of``'s."""
    from memolab.codegraph import code_cache

    monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(origins, "SETTLED_NS", 0)  # (every folder settled: kept)
    site = tmp_path / "venv" / "site-packages"
    pkg = site / "pkg52"
    work = tmp_path / "work"
    pkg.mkdir(parents=True)
    work.mkdir()
    (work / "mine.py").write_text("")
    for i in range(9):
        (pkg / f"m{i}.py").write_text("")
    os.symlink(work / "mine.py", pkg / "linked.py")
    mods = [(f"m{i}", str(pkg / f"m{i}.py")) for i in range(9)] + [("linked", str(pkg / "linked.py")),
                                                                     ("__main__", str(work / "mine.py"))]
    fresh: list[int] = []
    kinds_fresh = origins._kinds_fresh
    monkeypatch.setattr(origins, "_kinds_fresh", lambda m: fresh.append(len(m)) or kinds_fresh(m))

    def new_process() -> list[str]:
        code_cache.flush()
        code_cache.clear()
        origins.clear()
        fresh.clear()
        got = origins.kinds_of(mods)
        assert got == [origins.kind_of(n, f) for n, f in mods]
        return got

    lib, user = [origins.PACKAGE] * 9, [origins.USER] * 2
    code_cache.clear()
    origins.clear()
    try:
        assert new_process() == lib + user and fresh == [len(mods)]  # asked, and kept
        assert new_process() == lib + user and fresh == [1]  # kept: only the link asked afresh
        assert new_process() == lib + user and fresh == [1]
        # the library's file becomes a link to the user's: its folder's stamp moved
        (pkg / "m3.py").unlink()
        os.symlink(work / "mine.py", pkg / "m3.py")
        assert new_process() == lib[:3] + [origins.USER] + lib[4:] + user and fresh == [len(mods)]
        assert new_process()[3] == origins.USER and fresh == [2]
        (pkg / "m3.py").unlink()
        (pkg / "m3.py").write_text("")
        assert new_process() == lib + user and fresh == [len(mods)]
        assert new_process() == lib + user and fresh == [1]
        # a folder above turns into a link: the package's folder (its stamp unchanged) now lies
        # in no library folder, and every file of it is the user's
        st = os.lstat(pkg)
        os.rename(site, tmp_path / "venv" / "plain")
        os.symlink(tmp_path / "venv" / "plain", site)
        assert os.lstat(tmp_path / "venv" / "plain" / "pkg52").st_ctime_ns == st.st_ctime_ns
        assert new_process() == [origins.USER] * 11 and fresh == [len(mods)]
        # a damaged file is asked afresh
        for p in (tmp_path / "cache").glob("*.kinds.marshal"):
            p.write_bytes(b"\x00damaged")
        assert new_process() == [origins.USER] * 11 and fresh == [len(mods)]
        # fewer than KEEP_MIN: never kept
        small = mods[:origins.KEEP_MIN - 1]
        for _ in range(2):
            code_cache.flush()
            code_cache.clear()
            fresh.clear()
            origins.kinds_of(small)
            assert fresh == [len(small)]
    finally:
        origins.clear()
        code_cache.clear()


def test_the_store_layout_check_lists_the_root_once_and_refuses_what_an_lstat_a_name_refused(tmp_path, monkeypatch):
    """``layout.check`` reads the store root's entry types from one listing instead of an ``lstat``
    of each of its seven names: each of them as a link (dangling, to a file, to a folder) is refused,
    naming the first in the order the names were asked; other links in the root are the user's; and
    a root that cannot be listed is asked name by name."""
    import pytest

    from memolab.errors import StoreUnavailable
    from memolab.store import layout

    names = layout.OWN_DIRS + layout.OWN_FILES
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    for i, name in enumerate(names):
        for j, target in enumerate((tmp_path / "nowhere", tmp_path / "file", tmp_path / "dir")):
            root = tmp_path / f"store{i}{j}"
            (root / "blobs").mkdir(parents=True)
            (root / "mine").symlink_to(tmp_path / "file")  # (not the store's: left alone)
            if name == "blobs":
                (root / "blobs").rmdir()
            (root / name).symlink_to(target)
            if i + 1 < len(names):
                (root / names[-1]).unlink(missing_ok=True)
                (root / names[-1]).symlink_to(target)  # a second: the first in order is named
            with pytest.raises(StoreUnavailable) as e:
                layout.check(root)
            assert f": {name} is a symbolic link" in str(e.value), (name, str(e.value))
            with monkeypatch.context() as m:  # cannot be listed: an lstat a name, the same answer
                m.setattr(layout.os, "scandir", lambda p: (_ for _ in ()).throw(PermissionError(13, "denied", p)))
                with pytest.raises(StoreUnavailable) as e2:
                    layout.check(root)
                assert str(e2.value) == str(e.value)
    clean = tmp_path / "clean"
    (clean / "blobs" / "ab").mkdir(parents=True)
    (clean / "mine").symlink_to(tmp_path / "dir")
    layout.check(clean)


def test_the_workspace_of_the_working_folder_is_found_from_its_real_path_without_resolving_it(tmp_path, monkeypatch):
    """``config.find_workspace()`` starts from ``os.getcwd()`` as it is: Linux makes it from the
    working folder's own entries, so it is already its real path (``os.path.realpath`` of it is
    itself), even when the folder was entered through a link; a start given is resolved."""
    from memolab.settings import config

    real = tmp_path / "real" / "project"
    (real / "src" / "deep").mkdir(parents=True)
    (real / "pyproject.toml").write_text("[project]\nname='x'\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for where in (real / "src" / "deep", tmp_path / "link" / "project" / "src", tmp_path / "link" / "project"):
        monkeypatch.chdir(where)
        assert os.getcwd() == os.path.realpath(os.getcwd())
        assert config.find_workspace() == real.resolve() == config.find_workspace(where)
        assert config.workspace_dir() == str(real.resolve())  # (the team store's settings: as a string)
    monkeypatch.chdir(tmp_path / "link")
    assert config.find_workspace() == (tmp_path / "real").resolve()  # (no pyproject.toml above: the folder itself)


def test_the_default_store_and_the_team_settings_search_the_workspace_once(tmp_path, monkeypatch):
    """With no store and no team store configured, ``get_store`` finds the workspace once for both
    the store's location (``.memolab`` there) and the team store's settings (its ``pyproject.toml``),
    where it searched twice, ``stat``-ing two names a folder up to the root each time."""
    from memolab import configure
    from memolab.settings import config
    from memolab.store import close_open_stores, get_store

    for name in ("MEMOLAB_STORE", "MEMOLAB_REMOTE", "MEMOLAB_REMOTE_BLOBS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "proj" / "sub").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname='x'\n")
    monkeypatch.chdir(tmp_path / "proj" / "sub")
    searched: list[str] = []
    workspace_dir = config.workspace_dir
    monkeypatch.setattr(config, "workspace_dir", lambda start=None: searched.append("") or workspace_dir(start))
    before = config.settings()
    configure(store=None, remote=None, remote_blobs=None)
    try:
        s = get_store()
        where = tmp_path.resolve() / "proj" / ".memolab"
        assert s.root == where and len(searched) == 1, (s.root, searched)
        assert config.store_path() == where and config.remote() is None
    finally:
        close_open_stores(tmp_path)
        configure(store=before.store, remote=before.remote, remote_blobs=before.remote_blobs)


def test_threads_whose_first_calls_run_at_once_ask_their_batches_of_kinds_one_at_a_time(tmp_path, monkeypatch):
    """What a batch of ``origins.kinds_of`` learns of folders is dropped when it is done: two
    threads' first calls at once each dropped the other's mid-batch, and the one still asking raised
    ``KeyError`` out of its memoized call (6 threads, one key: tests/test_lease_threads.py, now and
    then). Thread A pauses inside its batch until thread B's batch is done (bounded): B waits for A's
    batch to end instead, and both answer as ``kind_of`` does."""
    import threading

    from memolab.codegraph import code_cache

    monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cache"))
    code_cache.clear()
    origins.clear()
    monkeypatch.setattr(origins, "SETTLED_NS", 0)  # (every folder's links kept: the batch takes its folders' route)
    lib = tmp_path / "lib"
    lib.mkdir()
    mods = []
    for i in range(origins.KEEP_MIN + 2):
        (lib / f"m{i}.py").write_text("")
        mods.append((f"m52t{i}", str(lib / f"m{i}.py")))
    os.utime(lib, ns=(1, 1))  # (settled: its last change long ago)
    b_done, a_inside = threading.Event(), threading.Event()
    real_file_kind = origins._file_kind

    def file_kind(f):
        if threading.current_thread().name == "a" and not a_inside.is_set():
            a_inside.set()
            b_done.wait(0.5)  # (with one batch at a time, B cannot be done before A: this wait runs out)
        return real_file_kind(f)

    monkeypatch.setattr(origins, "_file_kind", file_kind)
    got: dict[str, object] = {}

    def ask(name):
        try:
            got[name] = origins.kinds_of(list(mods))
        except Exception as e:  # (what the memoized call raised)
            got[name] = e
        finally:
            if name == "b":
                b_done.set()

    a = threading.Thread(target=ask, args=("a",), name="a")
    a.start()
    assert a_inside.wait(30)
    b = threading.Thread(target=ask, args=("b",), name="b")
    b.start()
    a.join(30)
    b.join(30)
    want = [origins.kind_of(n, f) for n, f in mods]
    assert got == {"a": want, "b": want}, got


def test_a_kept_batch_is_taken_only_while_each_folder_is_a_folder_and_each_placing_one_has_its_stamp(tmp_path,
                                                                                                     monkeypatch):
    """``origins._kept`` reads the folders' modes and stamps in C: each ``lstat`` a folder (not a
    link, not a file, there), and each folder that placed answers (its stamp not None, however
    falsy) with the very stamp kept; a damaged entry asks afresh."""
    from memolab.codegraph import code_cache

    d = tmp_path / "placed"
    d.mkdir()
    (tmp_path / "file").write_text("")
    os.symlink(d, tmp_path / "link")
    st = os.lstat(d)
    stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    answers = ("user", None, "pkg")
    cases = [
        (((str(tmp_path), None), (str(d), stamp)), list(answers)),
        ((), list(answers)),
        (((str(tmp_path), None), (str(d), (*stamp[:3], stamp[3] + 1))), None),  # changed since
        (((str(d), ()),), None),  # (a falsy stamp is still a stamp: compared, unequal)
        (((str(d), list(stamp)),), None),  # (another type: unequal)
        (((str(tmp_path / "link"), None), (str(d), stamp)), None),  # a folder above turned into a link
        (((str(tmp_path / "file"), None),), None),
        (((str(tmp_path / "gone"), None),), None),
        (((str(d), stamp, "more"),), None),  # damaged
        (((str(d),),), None),
        ((5,), None),
    ]
    for folders, want in cases:
        monkeypatch.setattr(code_cache, "kept_kinds", lambda key, f=folders: (answers, f))
        assert origins._kept("k", 3) == want, folders
    assert origins._kept("k", 4) is None  # (another batch's size)


def _restore_modules(mods: dict, before: dict) -> None:
    """Take a test's modules out of ``sys.modules``, put back what they replaced, and forget what
    the watch learned of them."""
    from memolab.codegraph import patches

    for name in mods:
        sys.modules.pop(name, None)
    sys.modules.update({k: v for k, v in before.items() if k not in sys.modules})
    origins.clear()
    patches._kinds.clear()
    patches._cache = (-1, [], [])
