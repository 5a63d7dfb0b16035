"""The library functions that seed and draw from a global generator, wrapped so that they
tell the bodies in progress what they do (``globalrng``: a seed before any draw settles a
generator, a draw makes the result depend on its state), and the recording classes that
tell another thread's draws from a body's.

``random``'s and numpy's generators (``rnglibs``) and torch's (``torch/rng.py``) register
with these; every wrapper is transparent to keys (``__memolab_wraps__``: ``codegraph`` and
``hashing`` see the function itself).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import globalrng
from .globalrng import add_draw, bodies, drew, mark_named, record, seeding

__all__ = ["wrap", "patch", "original", "always", "no_seed_given", "recording_class"]


def _never(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return False


def wrap(fn: Callable[..., Any], names: tuple[str, ...], kind: str = "seed",
         entropy: Callable[[tuple[Any, ...], dict[str, Any]], bool] = _never, via: Any = None) -> Callable[..., Any]:
    """``fn``, a function of generators ``names`` that programs call, telling bodies in
    progress what it does: ``kind="seed"`` (it seeds or sets them: settled, and marked
    seeded after — unseeded if ``entropy`` says this call seeds from the OS, as
    ``torch.seed()`` and ``random.seed()`` do), or ``"draw"`` (it draws from them: the
    body drew). A call by another thread while a body is in progress goes to the method
    of the same name of ``via`` (the instance whose bound method ``fn`` is: its recording
    class sees it), or to ``fn`` unrecorded. Transparent to keys: ``codegraph`` and
    ``hashing`` see ``__memolab_wraps__``, the function itself."""
    if getattr(fn, "__memolab_wraps__", None) is not None:
        return fn
    seeds = kind == "seed"

    @functools.wraps(fn)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if not globalrng.active_bodies:
            out = fn(*args, **kwargs)
        elif bodies.get():
            for n in names:
                if seeds:
                    seeding(n)
                else:
                    drew(n)
            out = fn(*args, **kwargs)
        elif via is not None:
            out = getattr(via, fn.__name__)(*args, **kwargs)
        else:
            out = fn(*args, **kwargs)
        if seeds:
            seeded = not entropy(args, kwargs)
            for n in names:
                mark_named(n, seeded)
        return out

    watched.__memolab_wraps__ = fn  # type: ignore[attr-defined]
    return watched


def original(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself, not memolab's seed-watching wrapper of it."""
    return getattr(fn, "__memolab_wraps__", None) or fn


def patch(module: Any, attrs: list[str], *names: str, kind: str = "seed",
          entropy: Callable[[tuple[Any, ...], dict[str, Any]], bool] = _never, via: Any = None) -> None:
    """Wrap ``module.attr`` for each of ``attrs`` (see ``wrap``): a seed function for good, a
    draw or read function only while a body is in progress (a hot loop of ``random.random()``
    pays nothing outside memoized computations)."""
    for a in attrs:
        fn = getattr(module, a, None)
        if not callable(fn) or getattr(fn, "__memolab_wraps__", None) is not None:
            continue
        wrapper = wrap(fn, names, kind, entropy, via)
        if kind == "seed":
            setattr(module, a, wrapper)
        else:
            add_draw(module, a, fn, wrapper)


def always(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``entropy`` of a function that always seeds from the OS (``torch.seed()``)."""
    return True


def no_seed_given(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``entropy`` of ``seed(a=None)``: from the OS when called without a seed."""
    given = args[0] if args else next(iter(kwargs.values()), None)
    return given is None


def recording_class(cls: type, name: str, primitives: tuple[str, ...], base: type) -> type:
    """A subclass of ``cls`` (layout unchanged: its instances' ``__class__`` can be swapped)
    whose ``primitives`` — the methods of ``base``, a C type, that every draw goes through —
    note a draw of a body in progress, and record one made by another thread (``globalrng.record``)."""
    scratch = cls()

    def method(primitive: Callable[..., Any]) -> Callable[..., Any]:
        def draw(self: Any, *args: Any) -> Any:
            if bodies.get():
                drew(name)
                return primitive(self, *args)
            return record(name, primitive, self, args, scratch)

        draw.__name__ = draw.__qualname__ = primitive.__name__
        return draw

    def reduce(self: Any) -> Any:  # a copy or a pickle is of the library's class
        return cls, (), self.getstate()

    body: dict[str, Any] = {p: method(getattr(base, p)) for p in primitives}
    body.update(__reduce__=reduce, __module__=cls.__module__, __qualname__=cls.__qualname__)
    return type(cls.__name__, (cls,), body)
