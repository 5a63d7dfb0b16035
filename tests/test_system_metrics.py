"""System metrics (``sys/`` tags) sampled in the background while a memoized computation runs
(memolab/tracking/system.py), each case in a fresh process with ``MEMOLAB_SYSTEM_METRICS`` set."""
from __future__ import annotations

import os
import stat

JOB = """
import json, sys, threading, time
{block}
import memolab
from memolab import memo

@memo
def train(seconds):
    t, cpu = time.time(), time.process_time()
    spins = 0
    while time.time() - t < seconds:
        spins += sum(range(2000))
    threads = sorted(t.name for t in threading.enumerate())
    # the share of a core this process had (100: a whole one), what sys/proc_cpu samples should see: on a
    # loaded machine a spinning body gets far less than a core (census: 14-19 % under 6 spinners on 2 cores)
    share = 100 * (time.process_time() - cpu) / (time.time() - t)
    return {{"threads": threads, "thread": threading.current_thread().name, "share": share}}

@memo
def outer(seconds):
    return train(seconds)

@memo
def quick(x):
    return x

out = {{"long": train(float(sys.argv[1])), "quick": quick(1)}}
if len(sys.argv) > 2:
    out["nested"] = outer(float(sys.argv[2]))
memolab.log.flush()
rows = {{}}
for r in memolab.runs():
    rows.setdefault(r.fn.split(":")[-1], []).append(
        {{"tags": r.tags(), "sys": {{t: [r.scalars(t).step, r.scalars(t).value] for t in r.tags() if t.startswith("sys/")}}}})
out["runs"] = rows
print(json.dumps(out))
"""


def run(project, *args, env=None, block=""):
    project.write("job.py", JOB.format(block=block))
    return project.run_json("job.py", *args, env={"MEMOLAB_SYSTEM_METRICS": "0.25", **(env or {})})


def test_a_computation_gets_cpu_and_memory_sampled_off_its_thread(project):
    """A 1.6 s computation sampled every 0.25 s: sys/cpu, sys/memory, sys/proc_cpu and
    sys/proc_memory_mb, about six samples each, at steps counting seconds since it began, taken by
    the memolab-system-metrics thread (the training thread only registers the run). A quick call
    (shorter than one interval) gets none."""
    out = run(project, "1.6")
    assert "memolab-system-metrics" in out["long"]["threads"] and out["long"]["thread"] == "MainThread"
    (long,) = out["runs"]["train"]
    assert {"sys/cpu", "sys/memory", "sys/proc_cpu", "sys/proc_memory_mb"} <= set(long["tags"])
    steps, values = long["sys"]["sys/proc_cpu"]
    assert 4 <= len(steps) <= 8, steps
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 1  # seconds since it began
    # it spun: the busiest interval's sample is at least about the share of a core the body had
    assert max(values) >= 0.5 * out["long"]["share"] > 0, (values, out["long"]["share"])
    assert all(0 <= v <= 100 for v in long["sys"]["sys/memory"][1])
    assert all(v > 1 for v in long["sys"]["sys/proc_memory_mb"][1])
    (quick,) = out["runs"]["quick"]
    assert quick["tags"] == []
    assert not any(t.startswith("sys/gpu") for t in long["tags"])  # no GPU on this machine: skipped cleanly


def test_nested_computations_each_get_the_samples_of_their_own_time(project):
    out = run(project, "0.1", "1.2")
    runs = out["runs"]
    inner = [r for r in runs["train"] if r["sys"]]
    (outer,) = runs["outer"]
    assert len(inner) == 1 and outer["sys"]
    assert len(outer["sys"]["sys/cpu"][0]) >= len(inner[0]["sys"]["sys/cpu"][0]) - 1


def test_off_means_no_thread_and_no_samples(project):
    for off in ("0", "off"):
        out = run(project, "0.8", env={"MEMOLAB_SYSTEM_METRICS": off})
        assert "memolab-system-metrics" not in out["long"]["threads"]
        assert out["runs"]["train"][0]["tags"] == []


def test_without_psutil_linux_proc_is_read(project):
    """psutil is optional: without it CPU and memory come from /proc (Linux)."""
    out = run(project, "1.2", block="sys.modules['psutil'] = None  # not importable")
    (long,) = out["runs"]["train"]
    assert {"sys/cpu", "sys/memory", "sys/proc_cpu", "sys/proc_memory_mb"} <= set(long["tags"])
    values = long["sys"]["sys/proc_cpu"][1]
    assert max(values) >= 0.5 * out["long"]["share"] > 0, (values, out["long"]["share"])


SMI = """#!/bin/sh
# what `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
# prints on a two-GPU machine
case "$*" in *query-gpu=index,utilization.gpu,memory.used,memory.total*) ;; *) exit 3 ;; esac
[ -n "$SMI_FAIL" ] && exit 9
echo "0, 37, 1024, 81559"
echo "1, [N/A], 40960, 81559"
"""


def test_gpus_through_nvidia_smi_visible_devices_only_and_a_failing_one_skipped(project, tmp_path):
    """No GPU here: nvidia-smi is an executable on the PATH printing what the real one prints for
    two GPUs. CUDA_VISIBLE_DEVICES=1 reports the second as sys/gpu0_*; a failing nvidia-smi (no
    driver) is dropped and the computation's other metrics are kept."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    block = "sys.modules['pynvml'] = None"
    out = run(project, "1.0", env={"PATH": path}, block=block)
    (long,) = out["runs"]["train"]
    gpu = {t: v for t, v in long["sys"].items() if t.startswith("sys/gpu")}
    assert set(gpu) == {"sys/gpu0_util", "sys/gpu0_memory", "sys/gpu0_memory_mb", "sys/gpu1_memory",
                        "sys/gpu1_memory_mb"}
    assert set(gpu["sys/gpu0_util"][1]) == {37.0}
    assert abs(gpu["sys/gpu1_memory"][1][0] - 100 * 40960 / 81559) < 1e-6
    (project.store).rename(tmp_path / "first-store")
    out = run(project, "1.0", env={"PATH": path, "CUDA_VISIBLE_DEVICES": "1"}, block=block)
    (long,) = out["runs"]["train"]
    assert sorted(t for t in long["tags"] if t.startswith("sys/gpu")) == [
        "sys/gpu0_memory", "sys/gpu0_memory_mb"]  # the physical GPU 1, whose utilisation reads [N/A]
    (project.store).rename(tmp_path / "second-store")
    out = run(project, "1.0", env={"PATH": path, "SMI_FAIL": "1"}, block=block)
    (long,) = out["runs"]["train"]
    assert not any(t.startswith("sys/gpu") for t in long["tags"]) and "sys/cpu" in long["tags"]


def test_the_setting_is_parsed_in_config():
    from memolab.settings import config

    var = config.ENV["MEMOLAB_SYSTEM_METRICS"]
    assert var.rule.parse("off") == 0.0 and var.rule.parse("2.5") == 2.5 and var.default == 10.0


def test_the_sampler_thread_ends_at_exit_before_modules_are_torn_down(project):
    """A daemon thread inside psutil or an import while the interpreter finalizes can crash the
    process: the sampler is stopped and joined by an exit handler. Each run's last words are
    printed by an exit handler registered before memolab's (so run after it)."""
    project.write("exits.py", """
import atexit, json, threading
def last_words():
    alive = [t.name for t in threading.enumerate() if t.name == "memolab-system-metrics"]
    print(json.dumps({"sampler_alive_at_exit": alive}))
atexit.register(last_words)
import memolab

@memolab.memo
def quick(x):
    return x + 1

print(json.dumps({"value": quick(1)}))
""")
    for _ in range(3):
        cp = project.run("exits.py", env={"MEMOLAB_SYSTEM_METRICS": "0.05"})
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout.strip().splitlines()[-1] == '{"sampler_alive_at_exit": []}', cp.stdout
