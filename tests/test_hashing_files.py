"""memolab.File / memolab.Dir: keys follow content; unchanged files cost a stat."""
from __future__ import annotations

import os

import pytest

import memolab
from conftest import Calls
from memolab.errors import HashError
from memolab.hashing import files, hash_arguments, hash_value as H


@pytest.fixture
def quiet(monkeypatch, tmp_store):
    """Trust stat entries immediately (files written by a test are 'racily clean' for 2 s)."""
    monkeypatch.setattr(files, "RACY_NS", 0)
    return tmp_store


def reads() -> int:
    return files.files_hashed


def test_file_is_hashed_by_content_not_path(tmp_path, quiet):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("hello")
    b.write_text("hello")
    assert H(memolab.File(a)) == H(memolab.File(str(b)))
    assert H(memolab.File(a)) != H(str(a))
    b.write_text("hellO")
    assert H(memolab.File(a)) != H(memolab.File(b))


def test_large_file_mapped_and_chunked_equals_content(tmp_path, quiet):
    p = tmp_path / "big.bin"
    data = os.urandom(3 << 20) * 4  # 12 MiB: memory-mapped, chunk tree
    p.write_bytes(data)
    d = H(memolab.File(p))
    p.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert H(memolab.File(p)) != d


def test_unchanged_file_costs_a_stat(tmp_path, quiet):
    p = tmp_path / "x"
    p.write_bytes(b"x" * 1000)
    d = H(memolab.File(p))
    n = reads()
    for _ in range(3):
        assert H(memolab.File(p)) == d
    assert reads() == n


def test_same_size_same_mtime_rewrite_is_still_seen(tmp_path, quiet):
    p = tmp_path / "x"
    p.write_bytes(b"aaaa")
    st = os.stat(p)
    d = H(memolab.File(p))
    p.write_bytes(b"bbbb")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # hide the write from size and mtime
    assert os.stat(p).st_size == st.st_size and os.stat(p).st_mtime_ns == st.st_mtime_ns
    assert H(memolab.File(p)) != d  # ctime (and the inode for replace-by-rename) still moved


def test_racily_clean_files_are_rehashed(tmp_path, monkeypatch, tmp_store):
    monkeypatch.setattr(files, "RACY_NS", 10 * 10**9)
    p = tmp_path / "x"
    p.write_bytes(b"fresh")
    H(memolab.File(p))
    n = reads()
    H(memolab.File(p))
    assert reads() == n + 1  # modified too recently to trust its stat


def test_replaced_file_is_seen(tmp_path, quiet):
    p, q = tmp_path / "x", tmp_path / "y"
    p.write_bytes(b"one")
    d = H(memolab.File(p))
    q.write_bytes(b"two")
    os.replace(q, p)
    assert H(memolab.File(p)) != d


def make_tree(root):
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.csv").write_text("1,2\n")
    (root / "sub" / "b.csv").write_text("3,4\n")
    (root / "sub" / "deep" / "c.bin").write_bytes(b"\0" * 100)


def test_dir_covers_names_content_and_structure(tmp_path, quiet):
    make_tree(tmp_path / "d")
    d0 = H(memolab.Dir(tmp_path / "d"))
    make_tree(tmp_path / "e")
    assert H(memolab.Dir(tmp_path / "e")) == d0  # location does not count

    (tmp_path / "d" / "sub" / "b.csv").write_text("3,5\n")
    d1 = H(memolab.Dir(tmp_path / "d"))
    assert d1 != d0
    os.rename(tmp_path / "d" / "a.csv", tmp_path / "d" / "z.csv")
    d2 = H(memolab.Dir(tmp_path / "d"))
    assert d2 != d1
    (tmp_path / "d" / "empty").mkdir()
    d3 = H(memolab.Dir(tmp_path / "d"))
    assert d3 != d2
    (tmp_path / "d" / "link").symlink_to("sub/b.csv")
    assert H(memolab.Dir(tmp_path / "d")) != d3


def test_dir_exclude_patterns(tmp_path, quiet):
    make_tree(tmp_path / "d")
    d = H(memolab.Dir(tmp_path / "d", exclude=["*.tmp", ".git"]))
    (tmp_path / "d" / "scratch.tmp").write_text("x")
    (tmp_path / "d" / ".git").mkdir()
    (tmp_path / "d" / ".git" / "HEAD").write_text("ref")
    assert H(memolab.Dir(tmp_path / "d", exclude=["*.tmp", ".git"])) == d
    assert H(memolab.Dir(tmp_path / "d")) != d


def test_unchanged_dir_costs_a_stat_walk(tmp_path, quiet):
    make_tree(tmp_path / "d")
    d = H(memolab.Dir(tmp_path / "d"))
    n = reads()
    assert H(memolab.Dir(tmp_path / "d")) == d
    assert reads() == n
    (tmp_path / "d" / "a.csv").write_text("changed\n")
    assert H(memolab.Dir(tmp_path / "d")) != d
    assert reads() == n + 1  # only the changed file was read


def test_stat_cache_survives_the_process(project):
    make_tree(project.root / "data")
    project.write("h.py", """
        import json, memolab
        from memolab.hashing import files
        from memolab import hashing
        files.RACY_NS = 0
        d = hashing.hash_value(memolab.Dir("data"))
        print(json.dumps({"digest": d, "reads": files.files_hashed}))
    """)
    first = project.run_json("h.py")
    second = project.run_json("h.py")
    assert first["reads"] == 3
    assert second == {"digest": first["digest"], "reads": 0}


def test_missing_and_wrong_kind_name_the_argument(tmp_path, quiet):
    with pytest.raises(HashError) as ei:
        hash_arguments([("data", {"train": memolab.File(tmp_path / "nope.csv")})])
    assert ei.value.path == "args['data']['train']" and "does not exist" in str(ei.value)
    with pytest.raises(HashError, match="is not a directory"):
        H(memolab.Dir(__file__))
    with pytest.raises(HashError, match="is not a regular file"):
        H(memolab.File(tmp_path))


def test_file_is_pathlike_and_picklable(tmp_path):
    import pickle

    p = tmp_path / "x.txt"
    p.write_text("hi")
    f = memolab.File(p)
    with open(f) as fh:
        assert fh.read() == "hi"
    assert pickle.loads(pickle.dumps(f)) == f
    d = memolab.Dir(tmp_path, exclude=["*.tmp"])
    assert pickle.loads(pickle.dumps(d)) == d and os.fspath(d) == str(tmp_path)


def test_memoized_function_follows_file_edits(tmp_path, quiet):
    p = tmp_path / "in.txt"
    p.write_text("abc")
    calls = Calls()  # counts runs without joining the key

    @memolab.memo
    def count(f):
        calls.append(1)
        with open(f) as fh:
            return len(fh.read())

    assert count(memolab.File(p)) == 3
    assert count(memolab.File(p)) == 3
    assert len(calls) == 1
    p.write_text("abcd")
    assert count(memolab.File(p)) == 4
    assert len(calls) == 2


def test_a_file_rewritten_while_the_function_runs_is_not_stored_under_its_old_content(tmp_path, quiet):
    # The key is taken from the content before the call; another process rewrites
    # the file before the function reads it. Storing that result under the old
    # content's key would hand it out later for the old content.
    import subprocess
    import sys
    import warnings

    p = tmp_path / "in.txt"
    trigger = str(tmp_path / "rewrite-now")  # another writer shows up during this call
    calls = Calls()

    @memolab.memo
    def size(f):
        calls.append(1)
        if os.path.exists(trigger):
            os.unlink(trigger)
            subprocess.run([sys.executable, "-c", f"open({str(p)!r}, 'w').write('abcdefgh')"], check=True)
        with open(f) as fh:
            return len(fh.read())

    p.write_text("abc")
    open(trigger, "w").close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert size(memolab.File(p)) == 8
    assert any("changed while" in str(w.message) for w in caught)
    p.write_text("abc")
    assert size(memolab.File(p)) == 3  # computed for "abc", not the 8 of the rewritten file
    assert size(memolab.File(p)) == 3
    assert len(calls) == 2
