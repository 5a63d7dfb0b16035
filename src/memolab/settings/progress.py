"""Progress bars of long work: storing and loading big results, ``pull``, ``sync``,
``doctor``, ``gc``, ``export-tb`` (docs/logging.md, "Progress bars").

A ``Bar`` draws on stderr only where someone watches it: a terminal, or a Jupyter kernel
(whose output area renders ``\\r`` as a terminal does); never on a pipe or a file, so logs
and ``2>err.txt`` stay clean (``MEMOLAB_PROGRESS``: auto, on, off). It appears only once
its work has taken ``MEMOLAB_PROGRESS_DELAY`` seconds (2 by default): short work draws
nothing, and until then a bar costs a clock read per update, nothing is imported.

The drawing is tqdm's when tqdm is installed (``pip install memolab[progress]``: rates,
remaining time, byte units, the terminal's width), else a plain one-line bar written here.
The core does not depend on tqdm: a bar is a courtesy, and memolab's only dependencies are
the two hashers. Nothing here is imported by a hit: a result is stored or loaded with a bar
only when it is big (``BIG`` bytes or more), and even then tqdm is imported only when the
bar is drawn.
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import swallowed
from . import config

__all__ = ["Bar", "BIG", "wanted", "result_bar", "result_progress"]

#: results of at least this many bytes are stored and loaded with a bar (drawn if the work
#: lasts): below it a store takes well under the delay on any disk
BIG = 64 << 20


def _in_kernel(stream: Any) -> bool:
    """Is ``stream`` a Jupyter kernel's output stream (ipykernel's ``OutStream``)?"""
    return type(stream).__module__.startswith("ipykernel")


def wanted(stream: Any = None) -> bool:
    """Would a bar be drawn on ``stream`` (default: stderr)? ``MEMOLAB_PROGRESS``: on, off, or
    auto (a terminal or a Jupyter kernel)."""
    mode = config.env_setting("MEMOLAB_PROGRESS")
    if mode is False:
        return False
    stream = sys.stderr if stream is None else stream
    if stream is None:
        return False
    if mode is True:
        return True
    try:
        return bool(stream.isatty()) or _in_kernel(stream)
    except (AttributeError, ValueError, OSError):
        return False


class Bar:
    """``with Bar("verifying blobs", n) as bar: ... bar.update(k)``: a bar on stderr once the
    work has lasted the delay, erased when it ends (the command's own output follows)."""

    def __init__(self, label: str, total: int, unit: str = "", delay: float | None = None) -> None:
        self.label, self.total, self.unit = label, max(0, int(total)), unit
        self.done = 0
        self.on = self.total > 0 and wanted()
        self.delay = float(config.env_setting("MEMOLAB_PROGRESS_DELAY") if delay is None else delay)
        self._t0 = time.monotonic()
        self._bar: Any = None  # tqdm's, or ``_Plain``, once drawn

    def __enter__(self) -> Bar:
        if self.on and self.delay <= 0:
            self._draw()
        return self

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.on:
            return
        if self._bar is None:
            if time.monotonic() - self._t0 < self.delay:
                return
            self._draw()
            return
        self._bar.update(n)

    def _draw(self) -> None:
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = _Plain(self.label, self.total, self.unit, self.done)
            return
        byte = self.unit == "B"
        # a terminal that reports no size (a fresh pseudo-terminal, some CI runners) would get a
        # bar of width 0 from tqdm, that is nothing: $COLUMNS or 80 then
        sized = _columns() > 0
        self._bar = tqdm(total=self.total, initial=self.done, desc=self.label, unit=self.unit or "it",
                         unit_scale=byte, unit_divisor=1024 if byte else 1000, file=sys.stderr, leave=False,
                         dynamic_ncols=sized, ncols=None if sized else _fallback_columns(),
                         nrows=None if sized else 24, mininterval=0.1)

    def close(self) -> None:
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def result_bar(verb: str, symbol: str, size: int) -> Bar:
    """The bar of storing or loading (``verb``) a result of ``size`` bytes of function ``symbol``."""
    return Bar(f"{verb} {symbol.split(':', 1)[-1]}", size, unit="B").__enter__()


#: what a result under ``BIG`` bytes gets: a context manager made once (every hit loads through
#: ``result_progress``; a generator-based one cost 1-2 µs of a hit)
_NO_BAR: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def result_progress(verb: str, symbol: str, size: int) -> contextlib.AbstractContextManager[Callable[[int], None] | None]:
    """The update function of a big result's bar (``result_bar``), closed on the way out;
    None for a result under ``BIG`` bytes, which gets no bar and costs nothing."""
    return _NO_BAR if size < BIG else _bar_progress(verb, symbol, size)


@contextlib.contextmanager
def _bar_progress(verb: str, symbol: str, size: int) -> Iterator[Callable[[int], None]]:
    bar = result_bar(verb, symbol, size)
    try:
        yield bar.update
    finally:
        bar.close()


def _columns() -> int:
    import os

    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def _fallback_columns() -> int:
    import shutil

    return shutil.get_terminal_size((80, 24)).columns or 80


class _Plain:
    """The bar without tqdm: ``label [#####        ] 12/48 25%`` on one line, at most 10 draws a second."""

    def __init__(self, label: str, total: int, unit: str, done: int) -> None:
        self.label, self.total, self.unit, self.done = label, total, unit, done
        self._last = 0.0
        self._draw(force=True)

    def update(self, n: int) -> None:
        self.done += n
        self._draw()

    def _count(self, n: int) -> str:
        if self.unit != "B":
            return f"{n}{self.unit}"
        from .text import human_bytes

        return human_bytes(n)

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1 and self.done < self.total:
            return
        self._last = now
        frac = min(1.0, self.done / self.total) if self.total else 1.0
        bar = "#" * int(frac * 24)
        err = sys.stderr
        try:
            err.write(f"\r{self.label} [{bar:<24}] {self._count(self.done)}/{self._count(self.total)} {frac:4.0%}")
            err.flush()
        except (AttributeError, OSError, ValueError):
            swallowed("progress: _Plain._draw")

    def close(self) -> None:
        try:
            sys.stderr.write("\r\033[K")  # erase the bar
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):
            swallowed("progress: _Plain.close")
