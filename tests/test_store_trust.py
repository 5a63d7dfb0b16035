"""A store you did not make cannot hurt you (issue 36, item 1).

A repository can commit a ``.memolab/`` folder, a colleague can hand one over: its folders may
be links to the user's files, its rows may name any path, its ``tmp/`` may hold anything. Every
test builds such a store, then runs memolab as the user would, in fresh processes (a memoized
call, ``doctor``, ``gc``, ``clear``, ``export-tb``), and checks that nothing outside the store
was deleted, moved or touched (docs/reliability.md, "A store made elsewhere").
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import SRC

WORK = """
import sys, memolab

@memolab.memo
def make(n):
    with open("computed.log", "a") as f:
        f.write(f"{n}\\n")
    return bytes(range(256)) * n

print(len(make(int(sys.argv[1]))))
"""


def _env(project, **more):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(project.root)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["MEMOLAB_STORE"] = str(project.store)
    e["MEMOLAB_INLINE_MAX"] = "0"  # every result in a blob file
    e.update(more)
    return e


def _memolab(project, *args):
    return subprocess.run([sys.executable, "-m", "memolab", "--store", str(project.store), *args], cwd=project.root,
                          env=_env(project), capture_output=True, text=True, timeout=120)


def _call(project, n="4"):
    return subprocess.run([sys.executable, "work.py", n], cwd=project.root, env=_env(project),
                          capture_output=True, text=True, timeout=120)


def _victims(home):
    """The user's files outside the store: two documents and two keys, written long ago."""
    docs, keys = home / "Documents", home / "ssh"
    docs.mkdir(parents=True)
    keys.mkdir()
    files = {docs / "thesis.tex": "\\chapter{One}", docs / "notes.txt": "remember", keys / "id_ed25519": "PRIVATE",
             keys / "known_hosts": "host key"}
    old = time.time() - 7 * 86400
    for p, text in files.items():
        p.write_text(text)
        os.utime(p, (old, old))
    return {p: (text, os.stat(p).st_mtime_ns) for p, text in files.items()}


def _untouched(victims):
    for p, (text, mtime) in victims.items():
        assert p.exists(), f"{p} was deleted or moved"
        assert p.read_text() == text and os.stat(p).st_mtime_ns == mtime, f"{p} was changed"


def _stored(project):
    project.write("work.py", WORK)
    cp = _call(project)
    assert cp.returncode == 0, cp.stderr
    blobs = [p for p in (project.store / "blobs").rglob("*") if p.is_file()]
    assert blobs
    return blobs


def _link_folder(store, rel, target):
    p = store / rel
    if p.exists():
        p.rename(store / (rel.replace("/", "_") + ".moved-aside"))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(target, target_is_directory=True)


@pytest.mark.parametrize("linked", ["tmp", "blobs/ab", "quarantine", "blobs"])
def test_a_store_whose_folders_are_links_is_refused_by_every_command(project, tmp_path, linked):
    """`memolab doctor` deleted two files in ~/Documents (a `tmp` link) and moved ~/.ssh's files
    into the store's quarantine (a `blobs/ab` link); `gc --yes` and `clear --yes` deleted them."""
    _stored(project)
    victims = _victims(tmp_path / "home")
    target = tmp_path / "home" / ("Documents" if linked in ("tmp", "blobs") else "ssh")
    if linked == "tmp":
        _link_folder(project.store, "tmp", target)
        _link_folder(project.store, "blobs/ab", tmp_path / "home" / "ssh")
    else:
        _link_folder(project.store, linked, target)
    for args in (["doctor"], ["doctor", "--repair", "--yes"], ["gc", "--yes"], ["gc", "--older-than", "0s", "--yes"],
                 ["clear", "--yes"], ["ls"]):
        cp = _memolab(project, *args)
        assert cp.returncode == 1, (args, cp.stdout, cp.stderr)
        said = (cp.stdout + cp.stderr).strip()
        assert "is a symbolic link" in said and "never follows a link" in said, (args, said)
        assert "Traceback" not in said and len(said.splitlines()) == 1, (args, said)
    cp = _call(project, "5")  # a memoized call computes, stores nothing, warns once
    assert cp.returncode == 0 and cp.stdout.strip() == str(256 * 5), cp.stderr
    assert "is a symbolic link" in cp.stderr
    _untouched(victims)


def test_tmp_cleanup_removes_only_names_memolab_writes(project, tmp_path):
    """`reclaim` deleted every file in tmp/ older than an hour, whatever its name."""
    _stored(project)
    victims = _victims(tmp_path / "home")
    tmp = project.store / "tmp"
    old = time.time() - 3 * 3600
    mine = tmp / "0123456789abcdef.999999-12345-deadbeef.abcdef01"  # a writer of another host, an hour silent
    mine.write_bytes(b"x" * 10)
    theirs = tmp / "notes.txt"
    theirs.write_text("someone else's")
    (tmp / "link-to-thesis").symlink_to(tmp_path / "home" / "Documents" / "thesis.tex")
    (tmp / "0123456789abcdef.999998-12345-deadbeef.abcdef02").symlink_to(tmp_path / "home" / "ssh" / "id_ed25519")
    for p in (mine, theirs):
        os.utime(p, (old, old))
    cp = _memolab(project, "doctor")
    assert "1 temporary file" in cp.stdout, cp.stdout
    cp = _memolab(project, "gc", "--yes")
    assert cp.returncode == 0, cp.stderr
    assert not mine.exists()
    assert theirs.read_text() == "someone else's"
    assert (tmp / "link-to-thesis").is_symlink()
    _untouched(victims)


def _rows(project):
    return sqlite3.connect(project.store / "index.sqlite")


@pytest.mark.parametrize("column", ["payload", "buffers"])
def test_a_row_naming_a_path_is_a_damaged_row_never_a_path(project, tmp_path, column):
    """In an unsigned store a row whose payload digest was ``../../Documents/thesis.tex`` moved
    that file into the store's quarantine. A digest is hex of a fixed length, or the row is damaged."""
    _stored(project)
    victims = _victims(tmp_path)
    # blobs/<d[:2]>/<d[2:]> with d = "..../../Documents/thesis.tex" is <tmp_path>/Documents/thesis.tex
    crafted = ".." + "../../Documents/thesis.tex"
    assert (project.store / "blobs" / crafted[:2] / crafted[2:]).resolve() == (tmp_path / "Documents" / "thesis.tex")
    with _rows(project) as c:
        if column == "payload":
            c.execute("UPDATE evaluations SET payload=?", (crafted,))
        else:
            c.execute("UPDATE evaluations SET buffers=?", (json.dumps([[crafted, 13]]),))
    cp = _call(project)  # a miss that recomputes (the row is damaged), never a move of the file
    assert cp.returncode == 0 and cp.stdout.strip() == str(256 * 4), cp.stderr
    assert (project.root / "computed.log").read_text().split() == ["4", "4"]
    _untouched(victims)
    with _rows(project) as c:  # the row the recomputation wrote is a plain one again: damage it once more
        c.execute("UPDATE evaluations SET payload=?", (crafted,))
    cp = _memolab(project, "doctor")
    assert cp.returncode == 1 and "is not a blob digest" in cp.stdout, cp.stdout + cp.stderr
    for args in (["gc", "--yes"], ["clear", "--yes"]):
        assert _memolab(project, *args).returncode == 0
    _untouched(victims)
    assert not list((project.store / "quarantine").glob("*")) if (project.store / "quarantine").exists() else True


def test_a_blob_another_name_holds_is_never_touched_in_place(project, tmp_path):
    """A stored blob hard-linked elsewhere (``ln store/blobs/ab/… ~/backup``): storing the same
    bytes again refreshed the blob's time, which is the other name's file too. Now the store
    writes a copy of its own, and deleting its name leaves the other name whole."""
    blobs = _stored(project)
    outside = tmp_path / "backup.bin"
    os.link(blobs[0], outside)  # (its times are the blob's: the store's stamp of it still holds)
    before = (outside.read_bytes(), os.stat(outside).st_mtime_ns)
    with _rows(project) as c:
        c.execute("DELETE FROM evaluations")  # the same bytes are stored again by the next call
    cp = _call(project)
    assert cp.returncode == 0, cp.stderr
    assert (outside.read_bytes(), os.stat(outside).st_mtime_ns) == before
    assert os.stat(blobs[0]).st_nlink == 1 and not os.path.samefile(blobs[0], outside)  # the store's own copy now
    assert _memolab(project, "clear", "--yes").returncode == 0
    assert (outside.read_bytes(), os.stat(outside).st_mtime_ns) == before


LOGGED = """
import memolab

@memolab.memo
def train(lr):
    memolab.log.scalar("loss", lr, step=0)
    return lr

train(0.1)
"""


def test_export_tb_never_writes_outside_its_folder(project, tmp_path):
    """A run's status (or code digest) from the store became a path: a crafted status wrote
    event files outside the export folder."""
    project.write("train.py", LOGGED)
    project.run("train.py")
    with _rows(project) as c:
        c.execute("UPDATE runs SET status='../../../escaped', code='../../..'")
    out = tmp_path / "export" / "tb"
    cp = _memolab(project, "export-tb", str(out))
    assert cp.returncode == 0, cp.stderr
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.glob("**/escaped*"))
    written = [p for p in out.rglob("events.out.tfevents.*") if p.parent != out]
    assert written and all(out in p.parents for p in written)
    assert all(".." not in p.relative_to(out).parts for p in written)
