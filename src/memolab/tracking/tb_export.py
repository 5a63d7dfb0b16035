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
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from . import query

# -- CRC32C (Castagnoli), table driven -------------------------------------------------------
_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


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


def event(wall: float, step: int, summary: Optional[bytes] = None, file_version: Optional[str] = None) -> bytes:
    out = f_double(1, wall) + f_varint(2, step)
    if file_version is not None:
        out += f_bytes(3, file_version.encode())
    if summary is not None:
        out += f_bytes(5, summary)
    return out


def summary_value(tag: str, *, simple: Optional[float] = None, image: Optional[bytes] = None,
                  histo: Optional[bytes] = None, tensor: Optional[bytes] = None, metadata: Optional[bytes] = None) -> bytes:
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


def histo_proto(h: Dict[str, Any]) -> bytes:
    return (f_double(1, h["min"]) + f_double(2, h["max"]) + f_double(3, h["num"]) + f_double(4, h["sum"])
            + f_double(5, h["sum_squares"]) + f_packed_doubles(6, h["limits"]) + f_packed_doubles(7, h["counts"]))


def text_tensor(s: str) -> bytes:
    # TensorProto{dtype: DT_STRING (7), tensor_shape: {} (scalar), string_val: [s]}
    return f_varint(1, 7) + f_bytes(2, b"") + f_bytes(8, s.encode("utf-8"))


_TEXT_METADATA = f_bytes(1, f_bytes(1, b"text"))  # SummaryMetadata{plugin_data{plugin_name: "text"}}


class EventFileWriter:
    """Appends events to ``events.out.tfevents.<time>.<host>.memolab`` in ``logdir``."""

    def __init__(self, logdir: Path) -> None:
        logdir.mkdir(parents=True, exist_ok=True)
        self.logdir = logdir
        self.path = logdir / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.memolab"
        # Written under a name TensorBoard ignores (no "tfevents"), then renamed over: a reader
        # never sees a half-written run, and an export that fails leaves the previous one whole.
        self._tmp = logdir / f".memolab-export-{os.getpid()}.tmp"
        self._f = open(self._tmp, "wb")
        self._f.write(record(event(time.time(), 0, file_version="brain.Event:2")))

    def add(self, wall: float, step: int, summary: bytes) -> None:
        self._f.write(record(event(wall, step, summary)))

    def close(self) -> None:
        self._f.close()
        # TensorBoard reads every event file of a run directory: a previous export's file left next
        # to this one would show every point twice. Only files memolab wrote are replaced.
        for old in self.logdir.glob("events.out.tfevents.*.memolab"):
            if old != self.path:
                old.unlink()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._f.close()
        self._tmp.unlink(missing_ok=True)


def _slug(s: str, limit: int = 60) -> str:
    s = re.sub(r"[^A-Za-z0-9._=,+-]+", "_", s).lstrip(".")  # no hidden or parent directories
    return s[:limit] or "_"


def run_dirname(run: Dict[str, Any]) -> str:
    hp = run.get("hparams") or {}
    args = ",".join(f"{k}={v}" for k, v in hp.items())
    return f"{_slug(args) if args else 'noargs'}__{run['status']}_{run['id']}"


def export(index: Any, out_dir: os.PathLike, fn: Optional[str] = None) -> List[Path]:
    """Write every run (of ``fn``, or all) as a TensorBoard run directory; returns the directories."""
    out = Path(out_dir)
    written = []
    for run in query.runs(index, fn):
        if not isinstance(run["id"], int):
            continue  # an evaluation stored without a run has no logs
        d = out / _slug(run["fn"].replace(":", "."), 120) / run_dirname(run)
        w = EventFileWriter(d)
        try:
            w.add(run["started"], 0, summary_value("hparams", tensor=text_tensor(
                "\n".join(f"| {k} | {json.dumps(v)} |" for k, v in run["hparams"].items()) or "(none)"),
                metadata=_TEXT_METADATA))
            for tag, points in query.all_scalars(index, run["id"]).items():
                for step, wall, value in points:
                    w.add(wall, step, summary_value(tag, simple=value))
            for e in query.events(index, run["id"], "histogram", exact=True):
                w.add(e["wall"], e["step"], summary_value(e["tag"], histo=histo_proto(e["meta"])))
            for e in query.events(index, run["id"], "image", with_data=True):
                m = e["meta"]
                w.add(e["wall"], e["step"], summary_value(
                    e["tag"], image=image_proto(m["height"], m["width"], m["channels"], bytes(e["data"]))))
            for e in query.events(index, run["id"], "text", with_data=True):
                w.add(e["wall"], e["step"], summary_value(e["tag"], tensor=text_tensor(bytes(e["data"]).decode("utf-8")),
                                                          metadata=_TEXT_METADATA))
        except BaseException:
            w.abort()
            raise
        w.close()
        written.append(d)
    return written


def is_nan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)
