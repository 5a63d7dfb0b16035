"""System metrics sampled while memoized computations run: the ``sys/`` tags of their runs.

What W&B records for every run: CPU and memory of the machine and of the process, and the
utilisation and memory of each GPU when there is one. One daemon thread per process
(``memolab-system-metrics``) samples every ``MEMOLAB_SYSTEM_METRICS`` seconds (default 10; 0 or
``off``: never) while at least one computation's run is open, and queues the same sample to each
of those runs as scalars, at the step of its seconds since the run began (so the step axis is
time). The training thread pays two dict operations per computation (``watch``/``unwatch``);
reading ``/proc``, psutil or the GPU happens on the sampler's thread, which starts only once a
computation has run for half an interval (the log flusher's round looks: ``start_due``; an interval
of 2 s or less starts it with the first computation). A computation shorter than one interval gets
no sample, so a quick call's run stays as it was (written with its result,
``runs.Rider``).

Tags: ``sys/cpu`` (% of all cores, the machine), ``sys/memory`` (% of the machine's memory in use),
``sys/proc_cpu`` (% of one core, this process: 250 = two and a half cores), ``sys/proc_memory_mb``
(this process's resident memory), and per GPU ``i`` visible to the process: ``sys/gpu{i}_util``
(%), ``sys/gpu{i}_memory`` (% of its memory in use) and ``sys/gpu{i}_memory_mb``.

Sources, the first that works: psutil if importable, else Linux's ``/proc``; for GPUs, NVIDIA's
NVML through ``pynvml`` (nvidia-ml-py) if importable, else ``nvidia-smi`` if on the PATH, else
none. A source that fails once is dropped for the rest of the process, silently: metrics must
never disturb a computation.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import swallowed
from . import sink as _sink

Sample = dict[str, float]


def interval() -> float:
    """Seconds between samples (``MEMOLAB_SYSTEM_METRICS``; 0: off), read at every computation."""
    from ..settings import config

    return float(config.env_setting("MEMOLAB_SYSTEM_METRICS"))


# -- sources ------------------------------------------------------------------------------------
class ProcSource:
    """CPU and memory from Linux's ``/proc`` (no dependency)."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.cores = os.cpu_count() or 1
        self.last: tuple[float, float, float, float] | None = None  # (wall, proc cpu, busy, total)

    @staticmethod
    def _stat() -> tuple[float, float]:
        with open("/proc/stat", "rb") as f:
            parts = [float(x) for x in f.readline().split()[1:]]
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)  # idle + iowait
        total = sum(parts[:8])  # guest time is counted inside user already
        return total - idle, total

    def sample(self) -> Sample:
        t = os.times()
        now, proc = time.monotonic(), t.user + t.system
        busy, total = self._stat()
        out: Sample = {}
        if self.last is not None:
            w0, p0, b0, t0 = self.last
            if total > t0:
                out["sys/cpu"] = 100.0 * (busy - b0) / (total - t0)
            if now > w0:
                out["sys/proc_cpu"] = 100.0 * (proc - p0) / (now - w0)
        self.last = (now, proc, busy, total)
        mem: dict[str, float] = {}
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                k, _, v = line.partition(b":")
                if k in (b"MemTotal", b"MemAvailable"):
                    mem[k.decode()] = float(v.split()[0]) * 1024
        if mem.get("MemTotal"):
            out["sys/memory"] = 100.0 * (1 - mem.get("MemAvailable", 0.0) / mem["MemTotal"])
        with open("/proc/self/statm", "rb") as f:
            out["sys/proc_memory_mb"] = float(f.read().split()[1]) * self.page / 1e6
        return out


class PsutilSource:
    def __init__(self, psutil: Any) -> None:
        self.psutil = psutil
        self.proc = psutil.Process()
        psutil.cpu_percent(None)  # the first call starts the interval (it returns 0.0)
        self.proc.cpu_percent(None)
        self.started = True

    def sample(self) -> Sample:
        p = self.psutil
        return {"sys/cpu": float(p.cpu_percent(None)), "sys/memory": float(p.virtual_memory().percent),
                "sys/proc_cpu": float(self.proc.cpu_percent(None)),
                "sys/proc_memory_mb": self.proc.memory_info().rss / 1e6}


def _visible_gpus() -> list[int] | None:
    """The physical GPU indexes ``CUDA_VISIBLE_DEVICES`` names (None: all, or not indexes)."""
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    if v is None:
        return None
    parts = [x.strip() for x in v.split(",") if x.strip()]
    return [int(x) for x in parts] if all(x.isdigit() for x in parts) else None


class NvmlSource:
    def __init__(self, nvml: Any) -> None:
        nvml.nvmlInit()
        self.nvml = nvml
        n = nvml.nvmlDeviceGetCount()
        want = _visible_gpus()
        phys = [i for i in range(n) if want is None or i in want]
        self.handles = [(k, nvml.nvmlDeviceGetHandleByIndex(i)) for k, i in enumerate(phys)]

    def sample(self) -> Sample:
        out: Sample = {}
        for k, h in self.handles:
            util = self.nvml.nvmlDeviceGetUtilizationRates(h)
            mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
            out[f"sys/gpu{k}_util"] = float(util.gpu)
            out[f"sys/gpu{k}_memory_mb"] = mem.used / 1e6
            if mem.total:
                out[f"sys/gpu{k}_memory"] = 100.0 * mem.used / mem.total
        return out


class SmiSource:
    QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.sample()  # fails here (no driver, no GPU) rather than at every tick

    def sample(self) -> Sample:
        import subprocess

        cp = subprocess.run([self.exe, *self.QUERY], capture_output=True, text=True, timeout=10, check=True)
        want = _visible_gpus()
        out: Sample = {}
        rows = [[x.strip() for x in line.split(",")] for line in cp.stdout.splitlines() if line.strip()]
        rows = [r for r in rows if want is None or int(r[0]) in want]
        for k, (_, util, used, total) in enumerate(rows):
            if util.replace(".", "", 1).isdigit():  # "[N/A]" on some boards
                out[f"sys/gpu{k}_util"] = float(util)
            out[f"sys/gpu{k}_memory_mb"] = float(used) * 1.048576  # MiB -> MB
            if float(total):
                out[f"sys/gpu{k}_memory"] = 100.0 * float(used) / float(total)
        return out


def cpu_source() -> Any | None:
    try:
        import psutil

        return PsutilSource(psutil)
    except Exception:  # psutil: a third-party library (its import, its errors of many kinds)
        swallowed("tracking.system: cpu_source")
    if os.path.exists("/proc/stat") and os.path.exists("/proc/self/statm"):
        try:
            src = ProcSource()
            src.sample()
            return src
        except (OSError, ValueError, IndexError):  # no /proc to read, or one of another shape
            swallowed("tracking.system: cpu_source")
            return None
    return None


def gpu_source() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        return NvmlSource(pynvml)
    except Exception:  # pynvml: a third-party library (its import, NVML errors of many kinds)
        swallowed("tracking.system: gpu_source")
    import shutil

    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            return SmiSource(exe)
        except Exception:  # nvidia-smi: an external tool, any driver's output
            swallowed("tracking.system: gpu_source")
            return None
    return None


# -- the sampler ----------------------------------------------------------------------------------
class Sampler:
    """One thread for the process; runs are watched while their computations run."""

    def __init__(self, sources: Callable[[], list[Any]] | None = None) -> None:
        #: run id -> [Run, its start (wall clock), when its next sample is due]
        self.runs: dict[int, list[Any]] = {}
        self.every = 10.0
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.make_sources = sources or (lambda: [s for s in (cpu_source(), gpu_source()) if s is not None])
        self.sources: list[Any] | None = None
        self.closing = False
        self.hooked = False  # ``stop`` registered at exit (with the first thread)

    def watch(self, run: Any, every: float) -> None:
        self.every = every
        now = time.time()
        self.runs[run.id] = [run, now, now + every]
        if self.thread is None or not self.thread.is_alive():
            if every <= 2 * _sink.INTERVAL:  # samples asked for more often than the flusher's rounds
                self._start()
            return  # else the flusher's round starts the thread once a run lasts (``start_due``)
        self.wake.set()  # the loop recomputes when the next sample is due

    def start_due(self) -> None:
        """(on the flusher's round) Start the thread once a watched run has lasted half an interval:
        its first reading then, its first sample at one interval; a quick computation starts none."""
        if self.thread is not None and self.thread.is_alive():
            return
        now = time.time()
        if any(now - start >= self.every / 2 for _, start, _ in list(self.runs.values())):
            self._start()

    def _start(self) -> None:
        with self.lock:
            if self.closing or (self.thread is not None and self.thread.is_alive()):
                return
            self.thread = threading.Thread(target=self._loop, name="memolab-system-metrics", daemon=True)
            self.thread.start()
            if not self.hooked:
                self.hooked = True
                atexit.register(self.stop)

    def unwatch(self, run: Any) -> None:
        self.runs.pop(run.id, None)

    def stop(self, timeout: float = 2.0) -> None:
        """At exit, before the interpreter tears its modules down: the thread ends (within
        ``timeout``), so it is never inside psutil, NVML or an import while that happens (a
        daemon thread there can crash the exiting process: a test's child once died by SIGSEGV
        after storing its result)."""
        self.closing = True
        self.wake.set()
        t = self.thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout)

    def _loop(self) -> None:
        if self.sources is None:
            self.sources = self.make_sources()
        self._read()  # a first reading: CPU use is measured between two
        while not self.closing:
            due = [d for _, _, d in list(self.runs.values())]
            # idle (a daemon thread, joined at exit) until a computation starts, else until the next due sample
            self.wake.wait(None if not due else max(0.0, min(due) - time.time()))
            self.wake.clear()
            if not self.closing:
                self.tick()

    def _read(self) -> Sample:
        values: Sample = {}
        for s in list(self.sources or []):
            try:
                values.update(s.sample())
            except Exception:  # psutil, NVML, nvidia-smi: third parties of unknown behaviour; dropped once failed
                swallowed("tracking.system: Sampler._read")
                self.sources.remove(s)  # type: ignore[union-attr]  # failed once: dropped, silently
        return values

    def tick(self) -> int:
        """Sample once if any watched run is due, and queue the sample to every run due within half an
        interval (one reading serves a computation and those nested in it); how many runs got it."""
        now = time.time()
        entries = list(self.runs.values())
        if not any(d <= now for _, _, d in entries):
            return 0
        values = self._read()
        n = 0
        for e in entries:
            run, t0, d = e
            if d > now + self.every / 2:
                continue
            e[2] = now + self.every
            step = int(now - t0)
            q = run.sink.q
            for tag, v in values.items():
                q.append((_sink.SCALAR, run.id, tag, step, now, v))
            n += 1
        return n


_sampler = Sampler()


def watch(run: Any) -> None:
    """A computation's run began: sample for it while it runs (unless ``MEMOLAB_SYSTEM_METRICS=0``)."""
    every = interval()
    if every > 0:
        _sampler.watch(run, max(0.05, every))


def unwatch(run: Any) -> None:
    _sampler.unwatch(run)


def _start_due() -> None:
    _sampler.start_due()


_sink.tickers.append(_start_due)


def _after_fork() -> None:
    global _sampler
    _sampler = Sampler()  # the parent's runs and thread are not the child's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
