"""The memolab command line, run as a real subprocess on a real store."""
from __future__ import annotations

import argparse
import os
import re

import pytest

from memolab import cli

JOB = """
import sys
from memolab import memo

@memo
def prepare(n, lr=0.001):
    return list(range(n))

@memo
def other():
    return "x" * 10

prepare(int(sys.argv[1]), lr=float(sys.argv[2]) if len(sys.argv) > 2 else 0.001)
other()
"""


@pytest.fixture
def populated(project):
    project.write("job.py", JOB)
    project.run("job.py", "1000")
    project.run("job.py", "1000")  # hits
    project.run("job.py", "1000", "0.0003")  # a miss with new arguments
    return project


def memolab(project, *args, check=True):
    return project.run("-m", "memolab", *args, check=check)


def test_ls_lists_functions_and_evaluations(populated):
    out = memolab(populated, "ls").stdout
    lines = out.splitlines()
    assert lines[0].split() == ["FUNCTION", "EVALS", "SIZE", "HITS", "COMPUTE", "LAST", "RUN"]
    # a script's functions are named by its file, as the dashboard and `runs` name them (issue 40)
    assert re.search(r"job.py:prepare\s+2\s+[\d.]+ KB\s+1\s", out)
    assert re.search(r"job.py:other\s+1\s", out)
    out = memolab(populated, "ls", "prepare").stdout
    # the argument that varies in each row, the one both rows share once above the table (issue 53)
    assert "same in all 2: n=1000\n" in out and re.search(r"\bhit\s+lr=0.001\n", out), out
    assert re.search(r"\bstored\s+lr=0.0003\n", out), out


def test_show_why_and_unknown_function(populated):
    ids = re.findall(r"^\s*(\d+)\s", memolab(populated, "ls", "prepare").stdout, re.M)
    out = memolab(populated, "show", ids[0]).stdout
    assert "__main__:prepare" in out and "lr = 0.0003" in out and "code dependencies" in out
    why = memolab(populated, "why", "prepare").stdout
    assert "lr 0.001 -> 0.0003" in why
    cp = memolab(populated, "ls", "prepar", check=False)
    assert cp.returncode != 0 and "did you mean" in cp.stderr


def test_clear_one_function(populated):
    assert "cleared __main__:prepare: 2 evaluations, 2 runs" in memolab(populated, "clear", "prepare", "--yes").stdout
    out = memolab(populated, "ls").stdout
    assert "prepare" not in out and "other" in out


def test_gc_dry_run_then_real(populated):
    before = sorted(p for p in (populated.store / "blobs").rglob("*") if p.is_file())
    out = memolab(populated, "gc", "--max-size", "1B", "--dry-run").stdout  # a dry run needs no --yes
    assert "would drop 3 evaluations" in out
    assert sorted(p for p in (populated.store / "blobs").rglob("*") if p.is_file()) == before
    out = memolab(populated, "gc", "--older-than", "30d", "--yes").stdout
    assert "dropped 0 evaluations" in out
    out = memolab(populated, "gc", "--max-size", "1B", "-y").stdout
    assert "dropped 3 evaluations" in out
    assert not [p for p in (populated.store / "blobs").rglob("*") if p.is_file()]


def test_doctor_finds_and_quarantines_damage(blob_results, populated):
    assert "no problems" in memolab(populated, "doctor").stdout
    blob = next(p for p in (populated.store / "blobs").rglob("*") if p.is_file())
    os.chmod(blob, 0o644)
    data = bytearray(blob.read_bytes())
    data[0] ^= 1
    st = blob.stat()
    blob.write_bytes(bytes(data))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot leaves no trace in stat
    cp = memolab(populated, "doctor", check=False)
    assert cp.returncode == 1
    assert "1 of" in cp.stdout and "marked corrupt" in cp.stdout
    assert list((populated.store / "quarantine").iterdir())
    assert "no problems" in memolab(populated, "doctor").stdout


def test_human_units():
    assert cli.parse_size("10GB") == 10 * 1000**3
    assert cli.parse_size("2GiB") == 2 * 1024**3
    assert cli.parse_age("30d") == 30 * 86400
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_size("ten")
    assert cli.human_bytes(1_500_000) == "1.5 MB"
    assert cli.human_seconds(0.0021) == "2 ms"
    assert cli.human_seconds(125) == "2m 05s"
