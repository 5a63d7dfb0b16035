"""Run one benchmark script and keep what it printed as JSON: ``benchmarks/results/<script>.json``.

    python benchmarks/record.py hit_overhead.py --mb 20 --rounds 3

Every script here prints its results as Markdown tables (median, min–max over rounds, and the
ratio to its peer measured in the same run). This runs the script with its arguments, passes its
output through, and writes each table (the line above it as its title, its header, its rows, cell
by cell as printed) with the command, the date, the machine and the load average it ran under
(sampled every 10 s while it ran). The README's performance table is
generated from these files (``benchmarks/readme_table.py``), so a figure there is one a benchmark
printed, never one typed in. The figures come from a shared, loaded 2-core machine: compare the
ratios (each measured against a peer in the same run), not the absolute times.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MACHINE = ("a shared 2-core development machine, other jobs running: read the ratios (each against a "
           "peer in the same run), not the absolute times")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def notes(text: str) -> list[str]:
    """The lines of ``text`` outside its tables (what a script says about its run: threads, load)."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("|")]


def tables(text: str) -> list[dict[str, object]]:
    """The Markdown tables of ``text``: title (the last non-empty line above), header, rows."""
    out: list[dict[str, object]] = []
    lines = text.splitlines()
    i, title = 0, ""
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: "):
            header, rows = cells(line), []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            out.append({"title": title, "header": header, "rows": rows})
            title = ""
            continue
        if line.strip():
            title = line.strip()
        i += 1
    return out


class Load:
    """The 1-minute load average while the script ran: sampled at its start, every 10 s while it
    runs (a script may print nothing for minutes) and at its end. The machine is shared, so an
    absolute time is only readable next to the load it ran under; the ratios are what holds."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.last = 0.0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.sample(force=True)
        threading.Thread(target=self._every_10_s, name="record-load", daemon=True).start()

    def _every_10_s(self) -> None:
        while not self.done.wait(10):  # bounded by the script's run: stop() sets it
            self.sample()

    def stop(self) -> None:
        self.done.set()
        self.sample(force=True)

    def sample(self, force: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            if force or now - self.last >= 10:
                self.samples.append(round(os.getloadavg()[0], 1))
                self.last = now

    def summary(self) -> dict[str, object]:
        s = self.samples
        return {"start": s[0], "end": s[-1], "min": min(s), "max": max(s),
                "median": round(statistics.median(s), 1), "samples": len(s)}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    script, args = sys.argv[1], sys.argv[2:]
    path = HERE / script
    proc = subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE, text=True,
                            cwd=str(HERE.parent), env=dict(os.environ))
    printed = []
    load = Load()
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        printed.append(line)
    rc = proc.wait()
    load.stop()
    if rc:
        print(f"record.py: {script} exited {rc}; nothing written", file=sys.stderr)
        return rc
    text = "".join(printed)
    doc = {"script": f"benchmarks/{script}", "command": " ".join(["python", f"benchmarks/{script}", *args]),
           "recorded": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
           "machine": MACHINE, "cores": os.cpu_count(), "load_average": load.summary(),
           "python": platform.python_version(), "tables": tables(text), "notes": notes(text)}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{path.stem}.json"
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"record.py: wrote {out.relative_to(HERE.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
