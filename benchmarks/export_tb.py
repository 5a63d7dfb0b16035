"""Writing TensorBoard event files: `memolab export-tb` vs torch's SummaryWriter, same points.

One run of N scalar points (default 200,000) is stored once; then, in interleaved rounds,
  * memolab export (native CRC32C when google-crc32c is installed),
  * memolab export with the pure-Python CRC32C (what a machine without the `tb` extra gets),
  * torch.utils.tensorboard.SummaryWriter.add_scalar for the same points + close (the peer:
    what writing those events directly costs TensorBoard's own writer),
and prints median and spread. Every file is read back by TensorBoard's EventAccumulator once
to check it holds all N points.

    python benchmarks/export_tb.py [--n 200000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()

    import memolab
    from memolab import memo
    from memolab.store import get_store
    from memolab.tracking import query, tb_export

    work = Path(tempfile.mkdtemp(prefix="memolab-export-bench-"))
    memolab.configure(store=str(work / "store"))

    @memo
    def train(n):
        for s in range(n):
            memolab.log.scalar("loss", 1.0 / (s + 1), step=s)
        return n

    train(a.n)
    index = get_store().index
    (run,) = [r for r in query.runs(index) if isinstance(r["id"], int)]
    points = query.all_scalars(index, run["id"])["loss"]

    native = tb_export.crc32c

    def memolab_native(out: Path) -> None:
        tb_export.crc32c = native
        tb_export.export(index, out)

    def memolab_python(out: Path) -> None:
        tb_export.crc32c = tb_export.crc32c_py
        try:
            tb_export.export(index, out)
        finally:
            tb_export.crc32c = native

    def torch_writer(out: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        w = SummaryWriter(str(out))
        for step, wall, value in points:
            w.add_scalar("loss", value, step, walltime=wall)
        w.close()

    cases = {"memolab export-tb (native CRC32C)" if tb_export.CRC32C_NATIVE else "memolab export-tb": memolab_native,
             "memolab export-tb (pure-Python CRC32C)": memolab_python,
             "torch SummaryWriter.add_scalar + close": torch_writer}
    times = {k: [] for k in cases}
    for r in range(a.rounds):  # interleaved: machine noise hits every case alike
        for name, fn in cases.items():
            out = work / f"out-{r}-{len(times[name])}-{abs(hash(name))}"
            t = time.perf_counter()
            fn(out)
            times[name].append(time.perf_counter() - t)
            if r == 0:
                from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

                runs = [p.parent for p in out.rglob("events.out.tfevents.*") if p.parent != out] or [out]
                ea = EventAccumulator(str(runs[0]), size_guidance={"scalars": 0})
                ea.Reload()
                assert len(ea.Scalars("loss")) == a.n, name
            shutil.rmtree(out)
    base = statistics.median(times["torch SummaryWriter.add_scalar + close"])
    print(f"{a.n:,} scalar points, {a.rounds} interleaved rounds (shared machine: quote ratios)\n")
    print("| writer | median s | min–max s | vs torch |")
    print("|---|---:|---:|---:|")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"| {name} | {m:.2f} | {min(ts):.2f}–{max(ts):.2f} | {base / m:.1f}× |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
