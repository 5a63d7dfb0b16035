"""Writing TensorBoard event files, with no TensorFlow or tensorboard import.

An event file is a TFRecord stream: per record, the little-endian uint64
length, its masked CRC32C, the bytes, and their masked CRC32C. Each record is
an ``Event`` protobuf; the handful of messages needed (Event, Summary, Value,
Image, HistogramProto, TensorProto for text) are encoded by hand below, field
numbers as in tensorboard's ``event.proto``/``summary.proto``.

``export(index, out_dir, fn)`` writes one directory per run, named
``<module.function>/<args>__<status>_<run id>`` so ``tensorboard --logdir``
lists evaluations readably, plus the hyperparameters as a text summary.
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import swallowed
from . import names, query

# -- CRC32C (Castagnoli) ---------------------------------------------------------------------
# Every record carries two CRC32Cs of its bytes. The pure-Python loop below runs at ~8 MB/s,
# which made a 200k-point export take seconds; google-crc32c (the `tb` extra, also what
# TensorFlow uses) is native and ~1000x faster. The fallback keeps export dependency-free.
_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c_py(data: bytes) -> int:
    crc = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _native_crc32c() -> Callable[[bytes], int] | None:
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":
            return google_crc32c.value
    except ImportError:
        pass
    return None


crc32c: Callable[[bytes], int] = _native_crc32c() or crc32c_py
CRC32C_NATIVE = crc32c is not crc32c_py


def masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


# -- protobuf wire format -----------------------------------------------------------------------
def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def f_varint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(int(n))


def f_double(field: int, x: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", x)


def f_float(field: int, x: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", x)


def f_bytes(field: int, b: bytes) -> bytes:
    return _key(field, 2) + _varint(len(b)) + b


def f_packed_doubles(field: int, xs: Iterable[float]) -> bytes:
    return f_bytes(field, b"".join(struct.pack("<d", float(x)) for x in xs))


def event(wall: float, step: int, summary: bytes | None = None, file_version: str | None = None) -> bytes:
    out = f_double(1, wall) + f_varint(2, step)
    if file_version is not None:
        out += f_bytes(3, file_version.encode())
    if summary is not None:
        out += f_bytes(5, summary)
    return out


def summary_value(tag: str, *, simple: float | None = None, image: bytes | None = None,
                  histo: bytes | None = None, tensor: bytes | None = None, metadata: bytes | None = None) -> bytes:
    v = f_bytes(1, tag.encode())
    if simple is not None:
        v += f_float(2, simple)
    if image is not None:
        v += f_bytes(4, image)
    if histo is not None:
        v += f_bytes(5, histo)
    if tensor is not None:
        v += f_bytes(8, tensor)
    if metadata is not None:
        v += f_bytes(9, metadata)
    return f_bytes(1, v)  # Summary.value (repeated) with one element


def image_proto(h: int, w: int, channels: int, png: bytes) -> bytes:
    return f_varint(1, h) + f_varint(2, w) + f_varint(3, channels) + f_bytes(4, png)


def histo_proto(h: dict[str, Any]) -> bytes:
    return (f_double(1, h["min"]) + f_double(2, h["max"]) + f_double(3, h["num"]) + f_double(4, h["sum"])
            + f_double(5, h["sum_squares"]) + f_packed_doubles(6, h["limits"]) + f_packed_doubles(7, h["counts"]))


def text_tensor(s: str) -> bytes:
    # TensorProto{dtype: DT_STRING (7), tensor_shape: {} (scalar), string_val: [s]}
    return f_varint(1, 7) + f_bytes(2, b"") + f_bytes(8, s.encode("utf-8"))


_TEXT_METADATA = f_bytes(1, f_bytes(1, b"text"))  # SummaryMetadata{plugin_data{plugin_name: "text"}}


class EventFileWriter:
    """Appends events to ``events.out.tfevents.<time>.<host>.memolab`` in ``logdir``."""

    def __init__(self, logdir: Path, suffix: str = "memolab", stamp: float | None = None) -> None:
        logdir.mkdir(parents=True, exist_ok=True)
        self.logdir = logdir
        self.suffix = suffix
        when = time.time() if stamp is None else stamp
        self.path = logdir / f"events.out.tfevents.{int(when):010d}.{socket.gethostname()}.{suffix}"
        # Written under a name TensorBoard ignores (no "tfevents"), then renamed over: a reader
        # never sees a half-written run, and an export that fails leaves the previous one whole.
        self._tmp = logdir / f".memolab-export-{os.getpid()}.tmp"
        self._f = open(self._tmp, "wb")
        self._f.write(record(event(time.time(), 0, file_version="brain.Event:2")))

    def add(self, wall: float, step: int, summary: bytes) -> None:
        self._f.write(record(event(wall, step, summary)))

    def add_scalars(self, tag: str, points: Iterable[tuple[int, float, float]]) -> None:
        """Many points of one scalar tag: the same bytes as ``add(wall, step, summary_value(tag,
        simple=v))`` each, with the constant parts encoded once (a 200k-point export spent most
        of its time re-encoding the tag)."""
        inner = f_bytes(1, tag.encode()) + b"\x15"  # Value{tag, simple_value: <float32>}
        summary = b"\x0a" + _varint(len(inner) + 4) + inner  # Summary{value: [...]}
        tail = b"\x2a" + _varint(len(summary) + 4) + summary  # Event.summary
        pack_d, pack_f, pack_q, pack_i, crc = struct.Struct("<d").pack, struct.Struct("<f").pack, \
            struct.Struct("<Q").pack, struct.Struct("<I").pack, masked_crc
        buf = []
        for step, wall, value in points:
            data = b"\x09" + pack_d(wall) + b"\x10" + _varint(int(step)) + tail + pack_f(value)
            header = pack_q(len(data))
            buf.append(header + pack_i(crc(header)) + data + pack_i(crc(data)))
            if len(buf) >= 4096:
                self._f.write(b"".join(buf))
                buf.clear()
        self._f.write(b"".join(buf))

    def close(self) -> None:
        self._f.close()
        # TensorBoard reads every event file of a run directory: a previous export's file left next
        # to this one would show every point twice. Only files memolab wrote are replaced.
        for old in self.logdir.glob(f"events.out.tfevents.*.{self.suffix}"):
            if old != self.path:
                old.unlink()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._f.close()
        self._tmp.unlink(missing_ok=True)


# -- the HParams plugin (tensorboard/plugins/hparams/{api,plugin_data}.proto) ------------------
# Without these summaries TensorBoard's HParams tab says "No hparams data was found". Each
# run gets a session start (its arguments as hparams) and a session end (its status); the
# metrics are the run's own scalar tags, which the plugin reads from the run's scalars. One
# experiment summary at the export root lists every hparam and metric of every exported run
# (TensorBoard reads one experiment per logdir, so it covers them all).
HPARAMS_EXPERIMENT_TAG = "_hparams_/experiment"
HPARAMS_SESSION_START_TAG = "_hparams_/session_start_info"
HPARAMS_SESSION_END_TAG = "_hparams_/session_end_info"
_HP_STATUS = {"done": 1, "failed": 2, "running": 3, "lost": 2, "interrupted": 2}  # api.Status: SUCCESS, FAILURE, RUNNING
# TensorProto{dtype: DT_FLOAT, tensor_shape: {dim: [{}]}}: the empty tensor the plugin's summaries carry
_NULL_TENSOR = f_varint(1, 1) + f_bytes(2, f_bytes(2, b""))


def _pb_value(v: Any) -> bytes:
    """google.protobuf.Value: numbers, strings and bools as themselves, anything else as its JSON."""
    if isinstance(v, bool):
        return f_varint(4, int(v))
    if isinstance(v, (int, float)) and math.isfinite(v):
        return f_double(2, float(v))
    if isinstance(v, str):
        return f_bytes(3, v.encode())
    return f_bytes(3, json.dumps(v, default=str).encode())


def _hp_metadata(plugin_data: bytes) -> bytes:
    # SummaryMetadata{plugin_data{plugin_name: "hparams", content: HParamsPluginData{version: 0, ...}}}
    return f_bytes(1, f_bytes(1, b"hparams") + f_bytes(2, f_varint(1, 0) + plugin_data))


def session_start(hparams: dict[str, Any], group: str, started: float) -> bytes:
    entries = b"".join(f_bytes(1, f_bytes(1, k.encode()) + f_bytes(2, _pb_value(v))) for k, v in hparams.items())
    info = entries + f_bytes(4, group.encode()) + f_double(5, started)
    return summary_value(HPARAMS_SESSION_START_TAG, tensor=_NULL_TENSOR, metadata=_hp_metadata(f_bytes(3, info)))


def session_end(status: str, finished: float) -> bytes:
    info = f_varint(1, _HP_STATUS.get(status, 0)) + f_double(2, finished)
    return summary_value(HPARAMS_SESSION_END_TAG, tensor=_NULL_TENSOR, metadata=_hp_metadata(f_bytes(4, info)))


def _hp_type(values: list[Any]) -> int:
    if all(isinstance(v, bool) for v in values):
        return 2  # DATA_TYPE_BOOL
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return 3  # DATA_TYPE_FLOAT64
    return 1  # DATA_TYPE_STRING


def experiment(hparams: dict[str, list[Any]], metrics: list[str], created: float) -> bytes:
    """The experiment: the arguments that vary between the runs first, marked ``differs``.

    TensorBoard's HParams view shows the first hparams of the experiment and hides the rest;
    sorted by name, a sweep opened on its constant arguments (``batch``, ``ds.*``) with ``lr``,
    ``optimizer`` and ``seed`` hidden."""
    distinct = {name: sorted({json.dumps(v, default=str, sort_keys=True) for v in values})
                for name, values in hparams.items()}
    infos = b""
    for name in sorted(hparams, key=lambda n: (len(distinct[n]) < 2, n)):
        t = _hp_type(hparams[name])
        info = f_bytes(1, name.encode()) + f_varint(4, t)
        if t != 3:  # a discrete domain (ListValue) lets the tab offer a filter per value
            info += f_bytes(5, b"".join(f_bytes(1, _pb_value(json.loads(v))) for v in distinct[name]))
        if len(distinct[name]) > 1:
            info += f_varint(7, 1)  # HParamInfo.differs: what TensorBoard shows first
        infos += f_bytes(4, info)
    for tag in sorted(metrics):
        infos += f_bytes(5, f_bytes(1, f_bytes(1, b"") + f_bytes(2, tag.encode())))  # MetricInfo{name{group, tag}}
    exp = f_bytes(6, b"memolab") + f_double(3, created) + infos
    return summary_value(HPARAMS_EXPERIMENT_TAG, tensor=_NULL_TENSOR, metadata=_hp_metadata(f_bytes(2, exp)))


def hparams_markdown(hparams: dict[str, Any]) -> str:
    """A markdown table with its header row (without one TensorBoard renders a paragraph)."""
    if not hparams:
        return "(no arguments)"

    def cell(x: str) -> str:
        return x.replace("|", "\\|").replace("\n", " ")

    rows = [f"| {cell(k)} | {cell(json.dumps(v, default=str))} |" for k, v in hparams.items()]
    return "\n".join(["| argument | value |", "|---|---|", *rows])


# -- layout: one directory per run, owned through a manifest -----------------------------------
MANIFEST = ".memolab-export.json"


def _slug(s: str, limit: int = 60) -> str:
    s = re.sub(r"[^A-Za-z0-9._=,+-]+", "_", s).lstrip(".")  # no hidden or parent directories
    return s[:limit] or "_"


def run_dirname(run: dict[str, Any]) -> str:
    """``<name or args>__code-<8 hex>__<status>_<id>``: a run's own name (``memolab.log.name``, a
    ``SummaryWriter``'s log_dir: ``runs/lr0.1`` -> ``runs_lr0.1``) else its arguments; the code
    version keeps apart two evaluations that differ only in code; the id is the evaluation id the
    CLI takes (``eval12``), or the run id (``run1234``) for a run that stored nothing (failed,
    lost, running)."""
    # Every part comes from the store, which someone else may have made: each is slugged (no
    # separator, no leading dot), so a crafted status (``../../../.bashrc``) or code digest
    # cannot name a directory outside the export (``export`` checks the result once more).
    hp = run.get("hparams") or {}
    args = ",".join(f"{k}={v}" for k, v in hp.items()) if isinstance(hp, dict) else str(hp)
    if run.get("name") and not (str(run.get("fn", "")).startswith("<process:") and "argv" in hp):
        args = str(run["name"])  # (a script's own process run is named by its whole command line)
    code = f"__code-{_slug(str(run['code'])[:8], 8)}" if run.get("code") else ""
    ident = f"eval{_slug(str(run['eval_id']), 20)}" if run.get("eval_id") and run.get("stored") \
        else f"run{_slug(str(run['id']), 20)}"
    return f"{_slug(args) if args else 'noargs'}{code}__{_slug(str(run['status']), 20)}_{ident}"


def fn_dirname(fn: str, label: str | None = None) -> str:
    """``pkg.mod.train``; a script's function as the dashboard names it (``a.py:train`` -> ``a.py.train``)."""
    return _slug((label or fn).replace(":", "."), 120)


class Exported(list):
    """The run directories written (a list of Paths); ``removed``: stale ones deleted;
    ``experiment``: the function directory the HParams experiment compares."""

    removed: list[Path]
    experiment: str | None = None


def _read_manifest(out: Path) -> dict[str, Any]:
    try:
        m = json.loads((out / MANIFEST).read_text())
        if isinstance(m, dict) and isinstance(m.get("runs"), dict):
            return m
    except (OSError, ValueError):
        pass
    return {"version": 1, "runs": {}}


def _write_manifest(out: Path, m: dict[str, Any]) -> None:
    tmp = out / f"{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(m, indent=1, sort_keys=True))
    os.replace(tmp, out / MANIFEST)


def _remove_run_dir(out: Path, rel: str) -> bool:
    """Delete what export wrote in ``out/rel`` (its event files), then the directory if that
    left it empty; files someone else put there are kept, and so is the directory."""
    d = (out / rel).resolve()
    if out.resolve() not in d.parents:
        return False  # a manifest edited to point outside the export: not ours
    if not d.is_dir():
        return False
    for f in [*d.glob("events.out.tfevents.*.memolab"), *d.glob(f"events.out.tfevents.*.{EXPERIMENT_SUFFIX}")]:
        f.unlink()
    for f in d.glob(".memolab-export-*.tmp"):
        f.unlink()
    try:
        d.rmdir()
        d.parent.rmdir()  # the function's directory, once its last run is gone
    except OSError:
        swallowed("tracking.tb_export: _remove_run_dir")
    return True


def runs_to_export(index: Any, fn: str | None = None, script: str | None = None) -> list[dict[str, Any]]:
    # a row without a run has no logs; ``script``: only that script's runs of a __main__ function
    return [r for r in query.runs(index, fn) if isinstance(r["id"], int) and (script is None or r.get("script") == script)]


def count_runs(index: Any, fn: str | None = None, script: str | None = None) -> int:
    return len(runs_to_export(index, fn, script))


def export(index: Any, out_dir: os.PathLike, fn: str | None = None,
           progress: Callable[[int], None] | None = None, script: str | None = None) -> Exported:
    """Write every run (of ``fn``, or all) as a TensorBoard run directory; returns the directories.

    The export owns what it wrote, recorded in ``out_dir/.memolab-export.json``: a run directory
    written by an earlier export whose run is gone now (cleared, collected) is removed, so
    TensorBoard does not keep showing deleted evaluations. Exporting one function touches only
    that function's directories.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(out)
    written = Exported()
    now_runs: dict[str, dict[str, Any]] = {}
    root = out.resolve()
    runs = runs_to_export(index, fn, script)
    scripts = names.script_labels(sorted({r["script"] for r in runs if r.get("script")}))
    for run in runs:
        label = names.function_label(run["fn"], scripts.get(run.get("script") or ""))
        rel = f"{fn_dirname(run['fn'], label)}/{run_dirname(run)}"
        d = out / rel
        if root not in (root / rel).resolve().parents:
            raise ValueError(f"export-tb: run {run['id']!r} would be written outside {out} ({rel!r}): not written")
        w = EventFileWriter(d)
        metrics: list[str] = []
        try:
            w.add(run["started"], 0, summary_value("hparams", tensor=text_tensor(hparams_markdown(run["hparams"])),
                                                   metadata=_TEXT_METADATA))
            w.add(run["started"], 0, session_start(run["hparams"], rel, run["started"]))
            for tag, points in query.all_scalars(index, run["id"]).items():
                metrics.append(tag)
                w.add_scalars(tag, points)
            for e in query.events(index, run["id"], "histogram", exact=True):
                w.add(e["wall"], e["step"], summary_value(e["tag"], histo=histo_proto(e["meta"])))
            for e in query.events(index, run["id"], "image", with_data=True):
                m = e["meta"]
                w.add(e["wall"], e["step"], summary_value(
                    e["tag"], image=image_proto(m["height"], m["width"], m["channels"], bytes(e["data"]))))
            for e in query.events(index, run["id"], "text", with_data=True):
                w.add(e["wall"], e["step"], summary_value(e["tag"], tensor=text_tensor(bytes(e["data"]).decode("utf-8")),
                                                          metadata=_TEXT_METADATA))
            if run["status"] != "running":
                fin = run.get("finished") or run["started"]
                w.add(fin, 0, session_end(run["status"], fin))
        except BaseException:
            w.abort()
            raise
        w.close()
        written.append(d)
        now_runs[rel] = {"fn": run["fn"], "script": run.get("script"), "hparams": run["hparams"], "metrics": sorted(metrics)}
        if progress is not None:
            progress(1)
    # stale: what an earlier export wrote for the functions exported now, and is not written now
    removed = []
    for rel, info in list(manifest["runs"].items()):
        if rel in now_runs or (fn is not None and info.get("fn") != fn) or (
                script is not None and info.get("script") != script):
            continue
        if _remove_run_dir(out, rel):
            removed.append(out / rel)
        del manifest["runs"][rel]
    manifest["runs"].update(now_runs)
    written.experiment = _write_experiment(out, manifest)
    _write_manifest(out, manifest)
    written.removed = removed
    return written


def experiment_function(manifest: dict[str, Any]) -> str | None:
    """The function whose runs the export's HParams experiment compares: the one with the most runs
    (ties: the first by name), scripts' process runs last.

    TensorBoard reads one experiment per logdir, and its parallel-coordinates view draws only the
    sessions that have a value in every column shown: an experiment listing the arguments of two
    functions (``lr`` of one, ``k`` of the other) drew no line at all. So the experiment at the
    root is one function's; every session still has its own hparams (the table view lists them all)
    and ``tensorboard --logdir DIR/<function>`` compares any other function."""
    count: dict[str, int] = {}
    for rel in manifest["runs"]:
        fdir = rel.split("/", 1)[0]
        count[fdir] = count.get(fdir, 0) + 1
    if not count:
        return None
    return min(count, key=lambda f: (f.startswith("_process"), -count[f], f))


# The experiment's own event file, beside the events of one run of the compared function. At the
# logdir's root it made a run of its own, ``.``, empty, listed first in every TensorBoard tab;
# the hparams plugin takes the experiment from whichever run holds it. Its own suffix keeps it
# apart from the run's events (a re-export of the run replaces those, not this).
EXPERIMENT_SUFFIX = "memolab-hparams"


def _write_experiment(out: Path, manifest: dict[str, Any]) -> str | None:
    chosen = experiment_function(manifest)
    hp: dict[str, list[Any]] = {}
    metrics: set = set()
    rels = sorted(rel for rel in manifest["runs"] if rel.split("/", 1)[0] == chosen)
    for rel in rels:
        info = manifest["runs"][rel]
        for k, v in (info.get("hparams") or {}).items():
            hp.setdefault(k, []).append(v)
        metrics.update(info.get("metrics") or [])
    root = out.resolve()
    old = manifest.get("experiment_file")
    # earlier exports' root experiment (the empty ``.`` run), and the experiment another run held
    stale = list(out.glob("events.out.tfevents.*.memolab"))
    if isinstance(old, str) and root in (root / old).resolve().parents and old.endswith(EXPERIMENT_SUFFIX):
        stale.append(out / old)
    manifest.pop("experiment_file", None)
    if rels:
        # stamp 0: read before the run's own events, which a re-export replaces
        w = EventFileWriter(out / rels[0], suffix=EXPERIMENT_SUFFIX, stamp=0)
        try:
            w.add(time.time(), 0, experiment(hp, sorted(metrics), time.time()))
        except BaseException:
            w.abort()
            raise
        w.close()
        manifest["experiment_file"] = w.path.relative_to(out).as_posix()
        stale = [f for f in stale if f.resolve() != w.path.resolve()]
    for f in stale:
        f.unlink(missing_ok=True)
    return chosen
