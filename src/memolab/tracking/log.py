"""``memolab.log``: log scalars, histograms, images, text and figures.

Inside a memoized function every call attaches to that function's run, so the
curves are stored with the evaluation and shown again on a cache hit; outside
one they go to a per-process run. ``step=None`` means "one more than the last
step of this tag in this run" (starting at 0).

The scalar path is the hot one (training loops log every step): it is a
context-variable lookup, a float conversion and a deque append; everything
else happens on the flusher thread.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from ..settings.text import mask_secrets
from . import runs as _runs, sink as _sink
from .hparams import hparam_value

__all__ = ["scalar", "scalars", "histogram", "image", "text", "figure", "hparams", "name", "note", "tag", "flush",
           "current_run"]

_time = time.time
_current = _runs.current
_SCALAR = _sink.SCALAR
_EVENT = _sink.EVENT
_WAKE_AT = _sink.WAKE_AT
_I64_MIN, _I64_MAX = _sink.I64_MIN, _sink.I64_MAX


def _tag(tag: Any, what: str) -> str:
    if type(tag) is not str:
        raise TypeError(f"memolab.log.{what}: tag must be a str, got {type(tag).__qualname__} {tag!r}")
    return tag


def _step(run: _runs.Run, tag: str, step: Any) -> int:
    if step is None:
        step = run.steps.get(tag, -1) + 1
    else:
        try:
            step = int(step)
        except (TypeError, ValueError):
            raise TypeError(f"memolab.log: step for {tag!r} must be an int, got {type(step).__qualname__} {step!r}") from None
        if not _I64_MIN <= step <= _I64_MAX:  # SQLite cannot store it: refuse it here, naming the tag
            raise ValueError(f"memolab.log: step for {tag!r} must fit in 64 bits, got {step}")
    run.steps[tag] = step
    return cast(int, step)


def _wall(tag: str, walltime: Any) -> float:
    # checked here, on the caller's thread, so a bad one raises at the call that made it
    try:
        return float(walltime)
    except (TypeError, ValueError):
        raise TypeError(f"memolab.log: walltime for {tag!r} must be a number (seconds since the epoch), "
                        f"got {type(walltime).__qualname__} {walltime!r}") from None


def scalar(tag: str, value: Any, step: int | None = None, walltime: float | None = None) -> None:
    """Log one number (int, float, numpy scalar, one-element tensor)."""
    run = _current()
    if type(tag) is not str:
        _tag(tag, "scalar")
    if step is None:
        step = run.steps.get(tag, -1) + 1
    elif type(step) is not int or not _I64_MIN <= step <= _I64_MAX:
        step = _step(run, tag, step)
    run.steps[tag] = step
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"memolab.log.scalar({tag!r}): value must be a number, got {type(value).__qualname__}") from None
    q = run.sink.q
    q.append((_SCALAR, run.id, tag, step, _time() if walltime is None else _wall(tag, walltime), v))
    if len(q) > _WAKE_AT:
        _sink.wake()


def scalars(values: Mapping[str, Any], step: int | None = None, main_tag: str = "",
            walltime: float | None = None) -> None:
    """Log several numbers at one step; tags are ``main_tag/name`` when ``main_tag`` is given."""
    if not isinstance(values, Mapping):
        raise TypeError(f"memolab.log.scalars: expected a dict of tag -> number, got {type(values).__qualname__}")
    prefix = f"{main_tag}/" if main_tag else ""
    for k, v in values.items():
        scalar(prefix + _tag(k, "scalars"), v, step, walltime)


def _event(kind: str, tag: str, step: Any, payload: Any, walltime: float | None) -> None:
    run = _current()
    st = _step(run, tag, step)
    run.sink.q.append((_EVENT, run.id, kind, tag, st, _time() if walltime is None else _wall(tag, walltime), payload))


def histogram(tag: str, values: Any, step: int | None = None, bins: Any = 64,
              walltime: float | None = None) -> None:
    """Log the distribution of an array/tensor/list (summarised to ``bins`` buckets now)."""
    from .encode import histogram as summarise

    _event("histogram", _tag(tag, "histogram"), step, summarise(values, bins, where=f"memolab.log.histogram({tag!r})"),
           walltime)


def image(tag: str, img: Any, step: int | None = None, dataformats: str | None = None,
          walltime: float | None = None) -> None:
    """Log an image: HxW, HxWxC or CxHxW array/tensor (uint8, or floats in [0, 1]) or a PIL image."""
    from .encode import image_array

    _event("image", _tag(tag, "image"), step, image_array(img, dataformats, where=f"memolab.log.image({tag!r})"), walltime)


def text(tag: str, value: str, step: int | None = None, walltime: float | None = None) -> None:
    """Log a string (shown as text; markdown is not rendered)."""
    if not isinstance(value, str):
        raise TypeError(f"memolab.log.text({tag!r}): value must be a str, got {type(value).__qualname__}")
    _event("text", _tag(tag, "text"), step, value, walltime)


def figure(tag: str, fig: Any, step: int | None = None, close: bool = True, walltime: float | None = None) -> None:
    """Log a matplotlib figure as a PNG (rendered now: matplotlib is not thread-safe)."""
    import io

    from .encode import png_size

    if not hasattr(fig, "savefig"):
        raise TypeError(f"memolab.log.figure({tag!r}): expected a matplotlib Figure, got {type(fig).__qualname__}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    data = buf.getvalue()
    _event("png", _tag(tag, "figure"), step, (data, png_size(data)), walltime)


def hparams(values: dict[str, Any]) -> None:
    """Add hyperparameters to the current run (the memoized function's arguments are already there)."""
    if not isinstance(values, Mapping):
        raise TypeError(f"memolab.log.hparams: expected a dict, got {type(values).__qualname__}")
    run = _current()
    # secrets masked as the arguments' are (text.is_secret_name)
    run.sink.q.append((_sink.HPARAMS, run.id, mask_secrets({str(k): hparam_value(v) for k, v in values.items()})))


def name(text: str) -> None:
    """Name the current run (shown in the dashboard's legends and by ``memolab runs``); the last call wins.

    Without a name a run is labelled by the arguments that differ between the runs shown."""
    if not isinstance(text, str):
        raise TypeError(f"memolab.log.name: expected a str, got {type(text).__qualname__}")
    text = " ".join(text.split())
    if not text:
        raise ValueError("memolab.log.name: the name is empty")
    _runs.set_name(_current(), text[:200])


def note(text: str) -> None:
    """Add a note to the current run (shown on its page in the dashboard, by ``memolab show`` and in
    ``memolab.runs()``); several notes are kept in order."""
    from .notes import check_note

    run = _current()
    run.sink.q.append((_sink.NOTE, run.id, "note", check_note(text, "memolab.log.note"), _time()))


def tag(*tags: str) -> None:
    """Tag the current run (``memolab.log.tag("baseline")``): filter by it in the dashboard
    (``tag:baseline``), ``memolab runs --tag baseline`` and ``memolab.runs(tag="baseline")``."""
    from .notes import check_tag

    run = _current()
    for t in tags:
        run.sink.q.append((_sink.NOTE, run.id, "tag", check_tag(t, "memolab.log.tag"), _time()))


def flush() -> None:
    """Write every pending record now; after it returns they survive even a SIGKILL."""
    _sink.flush_all()


def current_run() -> int:
    """The id of the run logs currently go to (as shown by the dashboard)."""
    return _current().id
