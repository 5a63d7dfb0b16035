"""``memolab.File(path, snapshot=DIGEST)`` (issue 55 §1: "a ``memolab.File`` whose content is a stored
snapshot can restore a missing file"): a missing file is given back from its snapshot, verified,
before the call is keyed, and the call hits in a fresh process as if the file had never gone; the
user's file, changed or not, is never replaced (keyed as it is); a link is never followed; nothing is
written outside the path named; ``Dir`` likewise; ``.restore(overwrite=True)`` on request."""
from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys

import pytest

from test_snapshots import base_env, make_folder, tree

JOB = '''
import json, os, sys
import memolab


@memolab.memo
def rows(csv: memolab.File) -> list:
    with open(os.environ["CALLS"], "a") as fh:
        fh.write("rows\\n")
    with open(csv) as fh:
        return [line.split(",") for line in fh.read().splitlines()]


@memolab.memo
def count(folder: memolab.Dir) -> int:
    with open(os.environ["CALLS"], "a") as fh:
        fh.write("count\\n")
    return sum(len(files) for _, _, files in os.walk(folder))


print(json.dumps([rows(memolab.File("data/rows.csv", snapshot=sys.argv[1])),
                  count(memolab.Dir("tree", snapshot=sys.argv[2]))]))
'''


def test_a_missing_file_is_given_back_from_its_snapshot_and_a_users_file_never_replaced(tmp_path):
    import memolab
    from memolab.errors import HashError
    from memolab.hashing import hash_value
    from memolab.store import Store
    from memolab.team import snapshots

    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "data").mkdir()
    csv = tmp_path / "data" / "rows.csv"
    original = b"a,1\nb,2\n" * 500
    csv.write_bytes(original)
    want = make_folder(tmp_path / "tree", 30)
    env = base_env(tmp_path, "store", CALLS=str(tmp_path / "calls"))
    store = Store(tmp_path / "store")
    d_file = snapshots.snapshot(csv, store=store)
    d_dir = snapshots.snapshot(tmp_path / "tree", store=store)
    store.close()

    def job() -> tuple[list, list[str]]:
        (tmp_path / "calls").unlink(missing_ok=True)
        cp = subprocess.run([sys.executable, "job.py", d_file, d_dir], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        calls = (tmp_path / "calls").read_text().split() if (tmp_path / "calls").exists() else []
        return json.loads(cp.stdout), calls

    first, calls = job()
    assert calls == ["rows", "count"]
    # the file, its whole folder and the snapshotted tree deleted: given back bitwise, and both calls hit
    csv.unlink()
    (tmp_path / "data").rmdir()
    shutil.rmtree(tmp_path / "tree")
    again, calls = job()
    assert again == first and calls == [] and csv.read_bytes() == original and tree(tmp_path / "tree") == want
    # the user's own edit is theirs: keyed as it is (a miss), never replaced by the snapshot
    csv.write_bytes(b"c,3\n")
    edited, calls = job()
    assert edited[0] == [["c", "3"]] and calls == ["rows"] and csv.read_bytes() == b"c,3\n"

    memolab.configure(store=str(tmp_path / "store"))  # (put back after the test by conftest)
    f = memolab.File(csv, snapshot=d_file)
    assert pickle.loads(pickle.dumps(f)) == f and "snapshot=" in repr(f)
    with pytest.raises(snapshots.SnapshotError, match="exists with other content"):
        f.restore()
    assert f.restore(overwrite=True) is f and csv.read_bytes() == original
    # a link where the file goes is never followed nor replaced, dangling or not
    outside = tmp_path / "outside"
    outside.mkdir()
    csv.unlink()
    csv.symlink_to(outside / "victim.csv")
    with pytest.raises(HashError, match="does not exist"):
        hash_value(memolab.File(csv, snapshot=d_file))
    assert list(outside.iterdir()) == [] and csv.is_symlink()
    # a folder's snapshot named for a file: refused, nothing written; an unknown digest: named
    with pytest.raises(HashError, match="is a folder, not a file"):
        hash_value(memolab.File(tmp_path / "x.csv", snapshot=d_dir))
    with pytest.raises(HashError, match=r"x\.csv does not exist and could not be restored .* not in the store"):
        hash_value(memolab.File(tmp_path / "x.csv", snapshot="0" * 64))
    assert not (tmp_path / "x.csv").exists()
    # the key is the content: restored or never gone, one key; ``snapshot=`` is not in it
    csv.unlink()
    restored = hash_value(memolab.File(csv, snapshot=d_file))
    assert csv.read_bytes() == original and restored == hash_value(memolab.File(csv))
