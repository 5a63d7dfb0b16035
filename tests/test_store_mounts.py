"""A local store on a network filesystem is reported once (issue 42; docs/team.md, "Slurm").

No NFS here: the detector is pinned on the real ``/proc/self/mountinfo`` format (lines as the
kernel writes them, and this machine's own table), and the warning end to end in a fresh
process whose mount table is faked at its seam (``memolab.store.mounts.mount_table``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import SRC
from memolab.store import mounts

# proc(5)'s example line, a bind mount with optional fields, an NFS mount whose point has a space
# (written \040) and a Lustre mount with no optional field
MOUNTINFO = textwrap.dedent(r"""
    36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
    128 27 0:53 / /mnt/team\040share rw,relatime shared:70 master:3 - nfs4 filer:/export/team rw,vers=4.2,hard
    140 27 0:61 / /lustre rw,relatime - lustre 10.0.0.1@o2ib:/scratch rw,flock
    141 140 0:62 / /lustre/local rw - tmpfs tmpfs rw
    not a mountinfo line
""")


def test_mountinfo_lines_parse_as_the_kernel_writes_them():
    got = mounts.parse_mountinfo(MOUNTINFO)
    assert got == [
        mounts.Mount("/mnt2", "ext3", "/dev/root"),
        mounts.Mount("/", "ext4", "/dev/vda"),
        mounts.Mount("/mnt/team share", "nfs4", "filer:/export/team"),
        mounts.Mount("/lustre", "lustre", "10.0.0.1@o2ib:/scratch"),
        mounts.Mount("/lustre/local", "tmpfs", "tmpfs"),
    ]
    table = mounts.parse_mountinfo(MOUNTINFO)
    assert mounts.mount_of("/mnt/team share/me/.memolab", table).fstype == "nfs4"
    assert mounts.mount_of("/mnt/team shared/x", table).point == "/"  # a prefix of the name is not a parent
    assert mounts.mount_of("/lustre/run/1", table).fstype == "lustre"
    assert mounts.mount_of("/lustre/local/x", table).fstype == "tmpfs"  # the deepest mount point wins
    assert {"nfs4", "lustre", "cifs", "gpfs"} <= mounts.NETWORK_FILESYSTEMS


def test_the_network_check_finds_the_mount_the_whole_table_finds(monkeypatch):
    """``network_mount`` parses only the lines whose mount point is above the path; its answer is
    ``mount_of(path, parse_mountinfo(text))``'s when that is a network filesystem, else None: on
    paths at, under, beside and between the mount points, on this fake table and on the same table
    with each network filesystem made local (and each local one network), lines in any order."""
    paths = ["/", "/mnt", "/mnt2", "/mnt2/x", "/mnt/team share", "/mnt/team share/me/.memolab",
             "/mnt/team shared/x", "/mnt/team", "/lustre", "/lustre/run/1", "/lustre/local", "/lustre/local/x",
             "/lustrex/y", "/x/y/z"]
    lines = MOUNTINFO.splitlines()
    swapped = MOUNTINFO.replace("- ext4 ", "- XFS ").replace("- nfs4 ", "- ext4 ").replace("- XFS ", "- nfs4 ") \
        .replace("- tmpfs ", "- cifs ").replace("- lustre ", "- tmpfs ")
    tables = [MOUNTINFO, "\n".join(reversed(lines)), swapped, "\n".join(lines[2:] + lines[:2]), "", "garbage\n- -",
              # a point mounted over again (the last mount wins), the root too
              MOUNTINFO + "150 27 0:70 / /lustre rw - ext4 /dev/x rw\n151 1 0:71 / / rw - nfs srv:/ rw\n",
              MOUNTINFO + "150 27 0:70 / /mnt/team\\040share/ rw - ext4 /dev/x rw\n"]
    answers = set()
    for text in tables:
        monkeypatch.setattr(mounts, "mount_table", lambda text=text: text)
        for path in paths:
            whole = mounts.mount_of(path, mounts.parse_mountinfo(text), path)
            want = whole if whole is not None and whole.fstype in mounts.NETWORK_FILESYSTEMS else None
            assert mounts.network_mount(path, path) == want, (text[:30], path)
            answers.add(want)
    assert len(answers) >= 4  # (None, nfs4, lustre, cifs... : the cases are not all alike)


@pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="no /proc/self/mountinfo (not Linux)")
def test_this_machines_mount_table_parses_and_holds_the_working_directory(tmp_path):
    text = mounts.mount_table()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    table = mounts.parse_mountinfo(text)
    assert len(table) == len(lines)  # every line of the real table parses
    assert any(m.point == "/" for m in table)
    m = mounts.mount_of(tmp_path, table)
    assert m is not None and os.path.realpath(tmp_path).startswith(m.point.rstrip("/") + "/")
    link = tmp_path / "link"
    link.symlink_to("/")
    assert mounts.mount_of(link, table).point == "/"  # the real path decides
    for where in (tmp_path, link, "/", "/proc", "/proc/self", "/dev/shm", "/sys/fs", os.getcwd()):
        whole = mounts.mount_of(where, table)
        assert mounts.network_mount(where) == (whole if whole.fstype in mounts.NETWORK_FILESYSTEMS else None)


SCRIPT = """
import json, sys, warnings
from memolab.store import mounts

point, fstype = sys.argv[1], sys.argv[2]
fake = ("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\\n"
        f"128 27 0:53 / {point.replace(' ', chr(92) + '040')} rw,relatime shared:70 - {fstype} filer:/export rw\\n")
mounts.mount_table = lambda: fake   # the seam: what /proc/self/mountinfo would say

import memolab

@memolab.memo
def double(x):
    return x * 2

@memolab.memo
def triple(x):
    return x * 3

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    values = [double(i) for i in range(3)] + [triple(1), double(1)]
print(json.dumps({"values": values, "warnings": [str(x.message) for x in w],
                  "stored": len(double.evaluations()) + len(triple.evaluations())}))
"""


@pytest.mark.parametrize("fstype", ["nfs4", "lustre", "ext4"])
def test_a_store_on_a_network_filesystem_is_reported_once_and_still_used(tmp_path, fstype):
    point = tmp_path / "team share"  # a space: written \040 in the mount table
    store = point / "me" / ".memolab"
    (tmp_path / "probe.py").write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": SRC, "MEMOLAB_STORE": str(store), "PYTHONDONTWRITEBYTECODE": "1"}
    cp = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(point), fstype], env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["values"] == [0, 2, 4, 3, 2] and out["stored"] == 4  # warned, never refused
    about = [w for w in out["warnings"] if "network filesystem" in w]
    if fstype == "ext4":
        assert about == []
        return
    assert len(about) == 1, out["warnings"]  # once per process, however many calls and functions
    assert f"({fstype} filer:/export mounted at {point})" in about[0]
    assert str(Path(store)) in about[0] and "team store" in about[0] and "docs/team.md" in about[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="no /proc/self/mountinfo (not Linux)")
def test_a_folder_on_an_ext4_or_xfs_disk_is_known_without_the_mount_table(tmp_path, monkeypatch):
    """``on_local_disk`` says a folder is on ext4 or XFS only where the mount table says so (and no
    network filesystem is), on this machine's folders; the network check then reads no mount
    table. Anonymous devices (/proc, tmpfs) and a missing folder: not known, the table is read."""
    table = mounts.parse_mountinfo(mounts.mount_table())
    for where in (tmp_path, "/", os.getcwd(), "/proc", "/dev/shm", "/sys", tmp_path / "missing"):
        real = os.path.realpath(where)
        whole = mounts.mount_of(real, table, real)
        if mounts.on_local_disk(real):
            assert whole is not None and whole.fstype in mounts.LOCAL_BLOCK_FILESYSTEMS, (where, whole)
            assert whole.fstype not in mounts.NETWORK_FILESYSTEMS
    assert not mounts.on_local_disk("/proc") and not mounts.on_local_disk(str(tmp_path / "missing"))
    reads: list[str] = []
    read_bytes = mounts.read_bytes
    monkeypatch.setattr(mounts, "read_bytes", lambda p: reads.append(p) or read_bytes(p))
    real = os.path.realpath(tmp_path)
    assert mounts.network_mount(tmp_path, real) is None  # (this suite's temporary folders are local)
    assert reads == ([] if mounts.on_local_disk(real) else ["/proc/self/mountinfo"]), reads
