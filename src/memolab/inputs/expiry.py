"""Results that expire: ``@memo(max_age="1d")`` and ``@memo(validate=callback)``.

A function that reads the outside world (a dataset fetched from a URL, a database query)
gives results that go stale with time, whatever its code and arguments. Its stored
results are judged on every hit:

- ``max_age``: a stored result is used while its age is at most ``max_age``. Its age counts
  from the *start* of the computation that made it (what it read of the world is at least
  that old).
- ``validate(metadata) -> bool`` (joblib's ``cache_validation_callback``): called with the
  stored evaluation's metadata (``id``, ``time``/``started``, ``finished``, ``duration``,
  ``age``, ``now``, ``host``); False refuses it.

An expired result is a miss that recomputes and replaces it (``explain``/``memolab why``
say "expired"). No wall-clock race: a call reads the clock once, when it starts, and
judges every row by that instant; a row stored after that instant (a result another
process computed while this call waited for it) is never expired for this call. So a
result that expires while a call loads it, or while the call waits for another process
to compute it, is still returned, once.

The clock is injectable (``set_clock``): tests move time instead of sleeping. The same
clock stamps evaluations' ``started`` and ``finished``.
"""
from __future__ import annotations

import datetime as _dt
import re
import time
from collections.abc import Callable
from typing import Any

from ..settings.text import human_seconds

__all__ = ["now", "set_clock", "parse_max_age", "verdict", "metadata"]

_clock: Callable[[], float] = time.time


def now() -> float:
    """memolab's time (seconds since the epoch): ``time.time`` unless ``set_clock`` replaced it."""
    return _clock()


def set_clock(clock: Callable[[], float] | None) -> Callable[[], float]:
    """Make ``clock()`` memolab's time (None: ``time.time`` again); returns the clock it replaces."""
    global _clock
    old = _clock
    _clock = time.time if clock is None else clock
    return old


_SPANS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_AGE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$")


def parse_max_age(value: None | int | float | str | _dt.timedelta) -> float | None:
    """``max_age`` in seconds: a number of seconds, a ``timedelta``, or text such as ``"90s"``,
    ``"30m"``, ``"12h"``, ``"1d"``, ``"2w"`` (None: never expires)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"@memo(max_age=...) takes seconds, a timedelta or text like '1d', not {value!r}")
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        m = _AGE.match(value.lower())
        if m is None or m.group(2) not in _SPANS and m.group(2) != "":
            raise ValueError(f"@memo(max_age={value!r}): not an age; write seconds (3600) or a number with a unit "
                             "s, m, h, d or w ('90s', '30m', '12h', '1d', '2w')")
        seconds = float(m.group(1)) * _SPANS.get(m.group(2), 1.0)
    else:
        raise TypeError(f"@memo(max_age=...) takes seconds, a timedelta or text like '1d', not {type(value).__name__}")
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"@memo(max_age={value!r}): must be 0 or more seconds, and finite")
    return seconds


def metadata(row: dict[str, Any], at: float) -> dict[str, Any]:
    """What a ``validate`` callback is given about a stored evaluation, judged at time ``at``."""
    started = row.get("started")
    return {"id": row.get("id"), "time": started, "started": started, "finished": row.get("finished"),
            "duration": row.get("duration"), "age": None if started is None else at - started, "now": at,
            "host": row.get("host")}


def verdict(row: dict[str, Any], at: float, max_age: float | None, validate: Callable[[dict[str, Any]], Any] | None,
            symbol: str) -> str | None:
    """Why stored ``row`` is expired for a call that started at ``at``, or None to use it."""
    finished = row.get("finished")
    if finished is not None and finished > at:
        return None  # stored after this call began (it waited for it): never expired for it
    started = row.get("started")
    if max_age is not None:
        if started is None:
            return (f"stored evaluation #{row.get('id')} expired: its start time is not recorded "
                    f"(max_age {human_seconds(max_age)})")
        age = at - started
        if age > max_age:
            return (f"stored evaluation #{row.get('id')} expired: computed {human_seconds(age)} ago, max_age is "
                    f"{human_seconds(max_age)}")
    if validate is not None and not validate(metadata(row, at)):
        name = getattr(validate, "__qualname__", None) or repr(validate)
        return f"stored evaluation #{row.get('id')} expired: validate={name} refused it"
    return None
