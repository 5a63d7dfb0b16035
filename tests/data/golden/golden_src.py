"""Canonical sources of the golden vectors (tests/golden.py). FROZEN: never edit this file.

Their code digests are pinned in vectors.json and the store fixtures under stores/ hold results
keyed by them: an edit here changes those digests and reads as a schema change that was not
made. A new case goes in a new module next to this one. The functions use no library and no
standard module (a library counts by its version: the digests would move with it); the dataclass
and the enum count Python's version by design (golden.PYTHON_DEPENDENT).
"""
from __future__ import annotations

import dataclasses
import enum

import memolab

SCALE = 3
WEIGHTS = (0.25, -1.5, 2.0)


def plain(x, y=2, *, z=None):
    """A function with a default, a keyword-only default and a global."""
    return x * y + SCALE + (z or 0)


class Model:
    """A class with an attribute, methods with defaults, a static method and a property."""

    lr = 0.1

    def __init__(self, width=4, act="relu"):
        self.width = width
        self.act = act

    def forward(self, x, scale=1.5):
        return [v * scale * self.width for v in x]

    @staticmethod
    def helper(a, b=(1, 2)):
        return a + sum(b)

    @property
    def double(self):
        return self.width * 2


def make_closure(k):
    offset = [k, k + 1]

    def inner(x):
        return x + offset[0] * WEIGHTS[1]

    return inner


closure = make_closure(7)


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0
    tags: tuple = ()


class Color(enum.Enum):
    RED = 1
    GREEN = "green"


# -- memoized functions whose results live in the store fixtures (stores/) ------------------------

@memolab.memo
def golden_small(n, scale=2.0, *, label="a"):
    """An inline result (a small row)."""
    return {"n": n, "values": [i * scale for i in range(n)], "label": label * 2, "point": (n, -0.0)}


@memolab.memo
def golden_blob(data):
    """A result with an out-of-band buffer (a blob file): twice the NumPy array ``data``."""
    return data * 2
