"""The short versions of the standing stress suite in ``stress/`` (the long runs give the README figures).

Each runs the same code as its long version with smaller numbers: SIGKILL
fault injection (20 trials, at random moments and at every write step), N
processes hammering one store with exactly-once checks, a disk that fills up,
a read-only store, and seeded byte-flip fuzzing of blobs and the index. Nothing
may be lost, nothing wrong, no exception may leave a memoized call and the CLI
may never print a traceback.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stress"))

import diskfull  # noqa: E402
import fuzz  # noqa: E402
import hammer  # noqa: E402
import kill9  # noqa: E402

pytestmark = pytest.mark.slow


def test_sigkill_at_random_moments_and_at_every_write_step_loses_nothing(tmp_path):
    fig = kill9.run(20, tmp_path, ops=25, log=lambda s: None)
    assert fig["trials"] == 20 and fig["killed"] >= 10, fig  # most trials must actually be interrupted
    steps_hit = {k.split(":")[0] for k, n in fig["by_step"].items() if n and k != "random"}
    assert steps_hit >= {"tmp_write", "fsync", "rename", "commit"}, fig["by_step"]
    assert fig["lost"] == [] and fig["wrong"] == [], fig
    assert fig["doctor_failures"] == [] and fig["integrity_failures"] == 0, fig
    assert fig["checked"] >= fig["evaluations"] > 0


def test_processes_hammering_one_store_compute_each_key_once(tmp_path):
    fig = hammer.run(3, 4.0, tmp_path)
    assert sum(fig["ops"].values()) > 50, fig["ops"]
    assert hammer.ok(fig), fig


def test_a_disk_that_fills_up_costs_no_value(tmp_path):
    fig = diskfull.diskfull(tmp_path, procs=2, calls=40, size_mb=2)
    assert fig["calls"] == 80 and fig["wrong"] == 0 and fig["raised"] == [], fig
    if fig["mode"] == "tmpfs":
        assert fig["full"], "the disk must really have filled up for this to mean anything"
    assert fig["lost"] == [] and fig["wrong_after"] == [] and fig["doctor_rc"] == 0 and fig["integrity"] == ["ok"], fig


def test_a_read_only_store_serves_hits_and_never_raises(tmp_path):
    r = diskfull.readonly(tmp_path, keys=6, new=3)
    assert r["wrong"] == 0 and r["raised"] == [], r
    assert sorted(map(tuple, r["computed"])) == sorted([(10_000 + i, "big") for i in range(3)] * 2), r["computed"]
    assert len(r["warnings"]) == 1, r["warnings"]
    assert r["unclosed"] == 0  # a connection that failed to open was closed, not left to the collector
    assert not any(tb for *_, tb in r["cli"]), r["cli"]
    assert [rc for a, rc, _ in r["cli"] if a != "clear --yes"] == [0, 0, 0, 0], r["cli"]


def test_byte_flips_in_blobs_and_index_are_clean_misses(tmp_path):
    fig = fuzz.run(40, tmp_path, seed=0)
    assert fig["targets"]["index"] >= 10 and fig["targets"]["blob"] >= 10, fig["targets"]
    assert fig["wrong"] == [] and fig["raised"] == [], fig
    assert fig["cli_raised"] == [] and fig["tracebacks"] == 0, fig
    assert fig["misses"] > 0  # the damage was noticed, not merely missed by the calls
