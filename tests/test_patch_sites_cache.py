"""Patch sites (user code planted into libraries) found once per source, kept on disk by a digest of
its bytes: a new process compiles no user module to find them, and an edit that keeps the file's
size and modification time is still scanned afresh (a stale site list would be a stale key)."""
from __future__ import annotations

import os

# v1 writes a harmless attribute; v2 (the same size) plants ``enc`` into the encoder the memoized
# function reaches through json.dumps without naming it: only the patch-site scan can see it
PLANT = """
import json

def enc(self, o):
    return "planted"

json.JSONEncoder.{attr} = enc
"""

SCRIPT = """
import builtins, json, os, sys
from memolab import memo
from memolab.codegraph import code_cache, patches

compiled = []

def spy(source, filename, *a, **k):  # every compile the patch-site scan makes
    compiled.append(os.path.basename(filename))
    return builtins.compile(source, filename, *a, **k)

patches.compile = spy
original = json.JSONEncoder.encode
import plant  # noqa: F401  (plants, or not, into json)

@memo(verbose=False)
def dump(x):
    return json.dumps(x)

value, truth = dump([1]), json.dumps([1])
json.JSONEncoder.encode = original  # to report
print(json.dumps({"value": value, "truth": truth, "compiled": compiled,
                  "sites_hit": code_cache.site_stats["hit"], "sites_miss": code_cache.site_stats["miss"]}))
"""


def test_patch_sites_come_from_the_disk_cache_and_a_same_stat_edit_is_rescanned(project, tmp_path):
    env = {"MEMOLAB_CODE_CACHE": str(tmp_path / "cc"), "PYTHONDONTWRITEBYTECODE": "1"}
    plant = project.write("plant.py", PLANT.format(attr="xncode"))
    project.write("run.py", SCRIPT)
    first = project.run_json("run.py", env=env)
    assert sorted(first["compiled"]) == ["plant.py", "run.py"] and first["sites_miss"] == 2
    assert first["value"] == first["truth"] == "[1]"

    second = project.run_json("run.py", env=env)  # a fresh process: the sites are read, not compiled
    assert second["compiled"] == [] and second["sites_hit"] == 2 and second["sites_miss"] == 0
    assert second["value"] == "[1]"

    # the same size and modification time, other bytes: the plant must be seen (truth: "planted")
    st = os.stat(plant)
    plant.write_text(plant.read_text().replace("xncode", "encode"))
    os.utime(plant, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(plant).st_size, os.stat(plant).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    third = project.run_json("run.py", env=env)
    assert third["compiled"] == ["plant.py"] and third["sites_hit"] == 1
    assert third["value"] == third["truth"] == "planted"

    # off: every process scans (and gets the same answer)
    off = project.run_json("run.py", env={**env, "MEMOLAB_CODE_CACHE": "off"})
    assert sorted(off["compiled"]) == ["plant.py", "run.py"] and off["value"] == "planted"


def test_a_damaged_or_foreign_sites_file_is_a_rescan_never_an_error(tmp_path, monkeypatch):
    import marshal

    from memolab.codegraph import code_cache

    monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cc"))
    code_cache.clear()
    try:
        path = str(tmp_path / "m.py")
        digest = code_cache.source_digest(b"import json\njson.JSONEncoder.encode = None\n")
        code_cache.put_sites(path, digest, [(("json", "JSONEncoder"), "encode")])
        code_cache.flush()
        assert code_cache.get_sites(path, digest) == [(("json", "JSONEncoder"), "encode")]
        assert code_cache.get_sites(path, code_cache.source_digest(b"other bytes")) is None  # another digest
        [f] = (tmp_path / "cc").glob("*.sites.marshal")
        for bad in (b"\x00garbage", marshal.dumps((2, path, digest, (((1, 2), "x"),))),
                    marshal.dumps((2, path, digest, ((("json",), 3),))), marshal.dumps((2, path, digest, (((), "a"),)))):
            f.write_bytes(bad)
            assert code_cache.get_sites(path, digest) is None
        assert code_cache.site_stats == {"hit": 1, "miss": 5}
    finally:
        code_cache.clear()
