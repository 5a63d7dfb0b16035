"""Process-wide random generators: what a memoized body drew from joins its key.

``torch.manual_seed(args.seed); model = train(cfg)`` is the most common line of
ML code, and ``train``'s result depends on the seed although the seed is no
argument: the body draws from a *global* generator (torch's default CPU one,
numpy's legacy ``np.random`` state, Python's ``random``; CUDA's once it is
initialised). So a miss watches them:

* **Before and after the body** each generator's state is digested. One that
  moved, and was not first reseeded by the body, was *drawn from*: the body's
  result depends on its state at entry.
* **Seeding is seen where it happens.** The seed/set functions users call
  (``torch.manual_seed``, ``np.random.seed``, ``random.seed``, their
  ``set_state`` kin, and so ``torch.random.fork_rng``'s restore) are wrapped by
  thin functions that tell every computation in progress: a body whose first
  touch of a generator is a seed (its state still what it was at entry)
  reseeded it before drawing — the caller's state does not matter
  (``seed_everything(cfg.seed)`` at the top of ``train``). A draw undone by a
  ``set_state`` is still a draw: the set is seen with the state moved.
* **The evaluation records** the entry digests of what it drew from (``deps``)
  and the exit state of every generator it changed (``exit``).
* **A draw proven to reach nothing is no draw** (``neutral``: a ``DataLoader``'s base
  seed without workers, ``memolab.torch.loaderseed``): the body still has not touched
  the generator, and a hit makes the same draw again (``replay``) — a relative move,
  so the generator ends where the body would leave it from the caller's state.
  A draw that may reach the result says why on a miss (``reason``).

A stored row with ``deps`` is used only when the current states have those
digests (``implicit.mismatch``); otherwise the call is routed to the key of the
current states (``implicit.routed``), so seed 0 and seed 1 are two evaluations
and a function that draws nothing is never split by the seed. A hit sets every generator the
evaluation changed to its exit state (``restore``): the rest of the program
draws exactly what it would have drawn had the body run.

**Unseeded generators.** torch, numpy and ``random`` seed their global generators
from the operating system when they are imported: a program that never seeds one
gets other numbers in every process, and any result drawn from it is as good as
another. Such a generator's state counts as ``UNSEEDED`` (a body drawing from it
hits in any process where it is unseeded too, as it would without memolab) until
the program seeds or sets it. ``import memolab`` wraps nothing: the seed
functions are wrapped at the first memoized computation (``hooks.before_computing``,
or a key that reads the generators). A generator counts as unseeded only where
memolab can prove it:

* its module was imported after that, under the import watcher: the seed
  functions were wrapped from its first line, they say when it is seeded;
* it was imported earlier, and its state or the library's own records prove
  that nothing seeded or set it since (``Generator.proof``): numpy's keeps the
  ``SeedSequence`` the OS seeded it from (a seed drops it; a set state is not on
  its sequence of states), torch's records every ``torch.manual_seed`` and
  ``torch.seed`` in its lazy CUDA seed queue (only for a torch imported after
  ``import memolab``: ``torch/rng.py``, ``os_seeded``). Such a generator stays
  unseeded only while that evidence does not change (``Generator.evidence``):
  a seed through a function bound before memolab wrapped it
  (``from torch import manual_seed`` at the top of a script) is seen there;
* anything else (``random``, which keeps no such record; a torch imported before
  memolab) counts by its exact state: safe, and a body drawing from it unseeded
  then computes in every new process (seed, or opt out with
  ``@memo(global_rng=False)``). A module not imported at all is unseeded (a body
  that imports it gets an OS-seeded generator).

``random``'s and numpy's generators (``rnglibs``) and torch's (``torch/rng.py``) register
through ``hooks.LAZY_HOOKS["global_rng"]``; this module imports none of them. The library
functions that seed and draw are wrapped by ``rngwrap``, which tells this module what they
do through its public names (``bodies``, ``active_bodies``, ``seeding``, ``drew``,
``mark_named``, ``add_draw``, ``add_recorder``, ``record``); other threads' frames are read
by ``threadframes``.
"""
from __future__ import annotations

import contextvars
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import swallowed
from . import threadframes

__all__ = ["Generator", "register", "Frame", "Outcome", "begin", "end", "current", "Result", "restore", "UNSEEDED",
           "neutral", "drew", "reason", "register_replay", "on_swap", "in_progress", "bodies", "active_bodies",
           "seeding", "mark_named", "record", "add_draw", "add_recorder"]

#: the state of a generator that was seeded by the operating system (or is not imported)
UNSEEDED = "unseeded"


@dataclass
class Generator:
    """One process-wide generator: how to read, compare, digest and set its state."""

    name: str
    #: its state, as ``set`` takes it back
    get: Callable[[], Any]
    set: Callable[[Any], None]
    #: a state as a cheap value to compare (``==``): a body's entry and exit are compared on
    #: every miss, and digested only when a result depends on them
    token: Callable[[Any], Any]
    digest: Callable[[Any], str]
    #: the top-level module it lives in
    module: str
    #: its state comes from a seed or a set the program made (else from the OS: ``UNSEEDED``)
    seeded: bool = True
    #: does the state provably come from the OS, although memolab did not see the module's
    #: import? (asked once, by ``register``; None: it cannot be known, the state counts)
    proof: Callable[[], bool] | None = None
    #: a value that any seed or set of the generator changes, also one made through a
    #: function memolab did not wrap (compared with ``_same``); None: no such value exists
    evidence: Callable[[], Any] | None = None
    #: while unseeded: ``_WATCHED`` (its seed functions were wrapped from its import on), or
    #: the ``evidence`` when it was last known unseeded
    mark: Any = field(default=None, repr=False)


_generators: dict[str, Generator] = {}


#: ``Generator.mark`` of a generator whose module's import memolab watched
_WATCHED = object()


def register(gen: Generator) -> None:
    """Watch ``gen`` from now on (called by its ``global_rng`` hook once its module is imported).
    Unseeded if memolab saw the module's import (nobody can have seeded it before), or if
    its ``proof`` says so."""
    from ..settings import hooks

    watched = hooks.import_was_watched(gen.module)
    if watched:
        gen.seeded, gen.mark = False, _WATCHED
    else:
        _mark(gen, not _proved(gen))
    with _lock:  # (``begin`` reads the generators and joins ``_frames`` under it: each body is in one or the other)
        _generators[gen.name] = gen
        # A body that imported the module: its state from here on is what draws are judged
        # against. A watched import ran this hook before any other thread could reach the module,
        # so that holds for the bodies of every thread: another thread's import in the middle of
        # a body (a Dask task importing numpy beside one computing) is no draw of that body's.
        for frame in list(_frames.values()) if watched else bodies.get():
            frame.baseline.setdefault(gen.name, gen.token(gen.get()))


def _proved(gen: Generator) -> bool:
    if gen.proof is None:
        return False
    try:
        return gen.proof()
    except Exception:  # a library whose internals moved: its state counts (safe)
        swallowed(f"the proof that {gen.name}'s generator is unseeded")
        return False


def _mark(gen: Generator, seeded: bool) -> None:
    """``gen`` was just seeded (or set) by the program, or from the OS (``seeded=False``)."""
    from ..settings import hooks

    if seeded:
        gen.seeded, gen.mark = True, None
    elif hooks.import_was_watched(gen.module):
        gen.seeded, gen.mark = False, _WATCHED
    else:  # unseeded while its evidence holds; without any, by its exact state
        ev = gen.evidence() if gen.evidence is not None else None
        gen.seeded, gen.mark = ev is None, ev


def mark_named(name: str, seeded: bool) -> None:
    """Generator ``name``, if registered, was just seeded or set (``_mark``): a wrapped seed
    function of the library ran (``rngwrap.wrap``)."""
    gen = _generators.get(name)
    if gen is not None:
        _mark(gen, seeded)


def _unseeded(gen: Generator) -> bool:
    """Does ``gen``'s state still come from the OS? A generator whose evidence changed was
    seeded or set where no wrapper saw it: it counts by its state from now on."""
    if gen.seeded:
        return False
    if gen.mark is _WATCHED:
        return True
    if gen.evidence is not None and _same(gen.evidence(), gen.mark):
        return True
    gen.seeded, gen.mark = True, None
    return False


def _same(a: Any, b: Any) -> bool:
    """Are two evidences the same: each part the same object, or an equal int?"""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is y or (type(x) is int and type(y) is int and x == y) for x, y in zip(a, b, strict=True))


def _available() -> dict[str, Generator]:
    """The registered generators, after registering those whose module was imported since."""
    from ..settings import hooks

    hooks.run_imported("global_rng")
    return _generators


def current(names: Any) -> dict[str, str]:
    """Each named generator's state as a key sees it: its digest, or ``UNSEEDED``."""
    gens = _available()
    out = {}
    for n in names:
        g = gens.get(n)
        out[n] = g.digest(g.get()) if g is not None and not _unseeded(g) else UNSEEDED
    return out


# -- a computation in progress ---------------------------------------------------------


class Frame:
    """One memoized body in progress: the generators' states at its entry, and what it
    learned of each (``settled``: True = reseeded before any draw, False = drew)."""

    __slots__ = ("entry", "baseline", "settled", "start", "threads", "replay", "why")

    def __init__(self, entry: dict[str, Any], baseline: dict[str, Any]) -> None:
        #: the state at entry of each seeded generator (``None``: unseeded): digested for the
        #: key only if the result turns out to depend on it
        self.entry = entry
        self.baseline = baseline  # each generator's ``token`` at entry: a draw is judged against it
        self.settled: dict[str, bool] = {}
        #: where this body's window of other threads' calls starts in ``_calls``
        self.start = 0
        #: the threads running when the body began, but its own: their calls are not the body's
        self.threads: dict[int, Any] = {}
        #: generator -> the draws whose value provably reached nothing (``neutral``), in order
        self.replay: dict[str, list[str]] = {}
        #: generator -> why a draw from it may reach the result, in words (``reason``)
        self.why: dict[str, str] = {}


#: the bodies in progress in this context, innermost last (read by ``rngwrap``'s wrappers at each call)
bodies: contextvars.ContextVar[tuple[Frame, ...]] = contextvars.ContextVar("memolab_rng_frames", default=())

# Other threads draw from the global generators while a body computes: a Dask worker's
# or tornado's event loop draws from ``random`` (jitter, work stealing, ``dask.sizeof``'s
# samples, ``distributed``'s compression probe through a ``randint`` it bound at import)
# several times a second. A state that moved is then no proof that the body drew. So
# while any body is in progress and other threads run, ``random``'s global instance has
# its class swapped for one whose two primitives (``random``, ``getrandbits``: every other
# method draws through them, looked up on the instance at each draw) record a call made
# by a thread with no body of its own, with the state before and after it. A body whose
# generator moved only by such calls, one after the other from its entry state to its
# exit state, made by threads that already ran when it began, did not draw from it.
# Anything else that moved the state — a draw through ``random.random`` bound before
# memolab wrapped it, a thread the body started — breaks that chain, and counts as the
# body's draw. Three things make a record proof of the other thread's move alone:
# * a record is made under ``_lock``, and ``begin``/``end`` read the states under it, so a
#   call is wholly before or after the entry and exit states;
# * a method already running when a body begins (``random.sample``'s loop) looks its
#   primitive up at each draw, so its draws from then on are recorded too;
# * a record is kept only if replaying the call on a copy of the state before it gives
#   the state after it (``record``): a draw of the body's own, made between the two reads
#   through a function no wrapper sees, fails the replay and so breaks the chain.
#: how many bodies are in progress, in every thread (``rngwrap``'s wrappers read it at each call:
#: not 0, they tell the bodies what they do); changed under ``_lock`` by ``begin`` and ``end``
active_bodies = 0
_calls: list[tuple[str, Any, Any, Any]] = []  # (generator, token before, token after, thread)
#: every body in progress, in every thread, by ``id`` (``register``: a generator another thread's
#: watched import brought is judged from then on in each of them); changed under ``_lock``
_frames: dict[int, Frame] = {}
#: re-entrant: a finalizer run by a collection while a thread holds it may draw
_lock = threading.RLock()
#: (module, name, the library's function, its wrapper): in place while a body is in progress
_draws: list[tuple[Any, str, Any, Any]] = []
#: (instance, its class, the recording class): swapped while a body is in progress and
#: other threads run (``begin``)
_instances: list[tuple[Any, type, type]] = []
#: the code of those classes' own methods (``threadframes.settle`` looks for it in other threads' frames)
_method_codes: set[Any] = set()


#: called with True when the first body begins, False when the last ends (under ``_lock``)
_swap_hooks: list[Callable[[bool], None]] = []


def on_swap(hook: Callable[[bool], None]) -> None:
    """Call ``hook(True)`` while any body is in progress from now on, ``hook(False)`` after."""
    with _lock:
        _swap_hooks.append(hook)
        if active_bodies:
            hook(True)


def in_progress() -> bool:
    """Is a body of this context computing?"""
    return bool(bodies.get())


def add_draw(module: Any, attr: str, fn: Any, wrapper: Any) -> None:
    """``module.attr``, the library's draw function ``fn``, is ``wrapper`` while any body is in
    progress (``rngwrap.patch``): swapped in at once if one is, and at every first begin."""
    with _lock:
        _draws.append((module, attr, fn, wrapper))
        if active_bodies:
            setattr(module, attr, wrapper)


def add_recorder(inst: Any, cls: type, recorder: type) -> None:
    """``inst``'s class ``cls`` is swapped for ``recorder`` (``rngwrap.recording_class``) while
    a body is in progress and other threads run; a body's start waits for other threads to
    leave ``cls``'s own methods (``threadframes.settle``)."""
    with _lock:
        _instances.append((inst, cls, recorder))
        _method_codes.update(f.__code__ for f in vars(cls).values() if isinstance(f, types.FunctionType))


def _swap(wrapped: bool) -> None:
    for hook in _swap_hooks:
        hook(wrapped)
    for module, name, fn, wrapper in _draws:
        if getattr(module, name, None) is (fn if wrapped else wrapper):  # unless the program replaced it
            setattr(module, name, wrapper if wrapped else fn)
    if not wrapped:
        _swap_classes(False)


def _swap_classes(recording: bool) -> bool:
    """Swap the recording classes in (or out); whether any was swapped."""
    done = False
    for inst, cls, recorder in _instances:
        if type(inst) is (cls if recording else recorder):  # unless the program replaced it
            inst.__class__ = recorder if recording else cls
            done = True
    return done



@dataclass
class Outcome:
    """What a body did to the global generators."""

    #: generator -> its state at entry as a key sees it, for every generator the result depends on
    deps: dict[str, str] = field(default_factory=dict)
    #: generator -> its state at exit, for every generator the body changed, and whether that
    #: state came from a seed (a hit leaves the generator seeded or unseeded as the body did)
    exit: dict[str, tuple[Any, bool]] = field(default_factory=dict)
    #: generator -> the neutral draws (``neutral``) that alone moved it: a hit makes them again
    replay: dict[str, list[str]] = field(default_factory=dict)
    #: generator -> why the result depends on it, in words (for every generator of ``deps`` told one)
    why: dict[str, str] = field(default_factory=dict)


def begin() -> tuple[Frame, Any]:
    """A body starts: record the states, push its frame (``end`` pops it)."""
    global active_bodies
    gens = _available()
    me = threading.current_thread()
    threads = {id(t): t for t in threading.enumerate() if t is not me}
    with _lock:  # other threads' calls are recorded from here on, wholly before or after the states
        active_bodies += 1
        if active_bodies == 1:
            _swap(True)
        swapped = bool(threads) and _swap_classes(True)
    if swapped:
        threadframes.settle(_method_codes)
    with _lock:
        start = len(_calls)
        states = {n: g.get() for n, g in gens.items()}
        frame = Frame({n: (None if _unseeded(g) else states[n]) for n, g in gens.items()},
                      {n: g.token(states[n]) for n, g in gens.items()})
        _frames[id(frame)] = frame
    frame.start = start
    frame.threads = threads
    return frame, bodies.set(bodies.get() + (frame,))


def end(frame: Frame, token: Any) -> Outcome:
    """The body is over (returned or raised): what it depends on, what to restore on a hit."""
    global active_bodies
    bodies.reset(token)
    out = Outcome()
    gens = _available()
    with _lock:  # read before other threads stop being recorded
        _frames.pop(id(frame), None)
        states = {n: (g, g.get()) for n, g in gens.items()}
        window = _calls[frame.start:]
        active_bodies -= 1
        if not active_bodies:
            _calls.clear()
            _swap(False)
    for name, (gen, state) in states.items():
        settled = frame.settled.get(name)
        if settled is None and _others_only(frame, name, gen.token(state), window):
            if frame.replay.get(name):
                out.replay[name] = frame.replay[name]  # moved by neutral draws alone
            continue  # untouched by the body
        if settled is not True:
            entry = frame.entry.get(name)  # None: unseeded at entry, or imported by the body
            out.deps[name] = UNSEEDED if entry is None else gen.digest(entry)
            if name in frame.why:
                out.why[name] = frame.why[name]
        out.exit[name] = (state, not _unseeded(gen))
    return out


def _others_only(frame: Frame, name: str, now: Any, window: list[tuple[str, Any, Any, Any]]) -> bool:
    """Is every move of ``name`` from the body's entry to ``now`` a call another thread made?"""
    cur = frame.baseline.get(name)
    for n, before, after, thread in window:
        if n != name or after == cur:
            continue  # another generator's, or a call whose move the entry state already holds
        if before != cur or id(thread) not in frame.threads:
            return False
        cur = after
    return cur == now


def seeding(name: str) -> None:
    """A seed or set of ``name`` is about to happen: settle it in every body in progress."""
    frames = bodies.get()
    if not frames:
        return
    gen = _generators.get(name)
    now = gen.token(gen.get()) if gen is not None else None
    for frame in frames:
        if name not in frame.settled:
            frame.settled[name] = now is not None and now == frame.baseline.get(name)


def drew(name: str) -> None:
    """The bodies in progress drew from generator ``name`` (a value they read, ``neutral``'s undone)."""
    for frame in bodies.get():
        frame.settled.setdefault(name, False)


def neutral(name: str, op: str, before: Any, after: Any) -> None:
    """A draw ``op`` (a name ``register_replay`` gave) moved generator ``name`` from state token
    ``before`` to ``after``, and its value provably reaches no result (the caller's proof: a
    ``DataLoader``'s base seed with no workers, ``memolab.torch.loaderseed``). A body in progress
    that had not touched the generator yet still has not: the draw joins no key, and a hit of
    its result makes the same draw again (``restore``), leaving the generator where the body would."""
    for frame in bodies.get():
        if name not in frame.settled and frame.baseline.get(name) == before:
            frame.baseline[name] = after
            frame.replay.setdefault(name, []).append(op)


def reason(name: str, text: str) -> None:
    """Why a draw from generator ``name`` the body makes may reach its result, in words: the miss
    line of a call keyed by the generator's state says it (``Outcome.why``)."""
    for frame in bodies.get():
        frame.why.setdefault(name, text)


#: op -> (generator, the function making that draw again)
_replays: dict[str, tuple[str, Callable[[], None]]] = {}


def register_replay(op: str, name: str, fn: Callable[[], None]) -> None:
    _replays[op] = (name, fn)


def _replay(ops: list[str], gen: Generator) -> None:
    for op in ops:
        name, fn = _replays[op]
        before = gen.token(gen.get())
        fn()
        neutral(name, op, before, gen.token(gen.get()))  # a body in progress: as if it drew it itself


def record(name: str, primitive: Callable[..., Any], inst: Any, args: tuple[Any, ...], scratch: Any) -> Any:
    """A primitive draw by a thread with no body of its own while a body is in progress (a
    recording class's, ``rngwrap.recording_class``): recorded if replaying it on ``scratch``
    proves that it alone moved the state."""
    with _lock:
        if not active_bodies:
            return primitive(inst, *args)
        before = inst.getstate()
        out = primitive(inst, *args)
        after = inst.getstate()
        scratch.setstate(before)
        primitive(scratch, *args)
        if scratch.getstate() == after:
            gen = _generators[name]
            _calls.append((name, gen.token(before), gen.token(after), threading.current_thread()))
    return out


# -- rows and results ---------------------------------------------------------------------


class Result:
    """A stored result with the generator states its body left (restored by a hit), and the
    neutral draws it made from the others (made again by a hit)."""

    __slots__ = ("value", "deps", "exit", "replay")

    def __init__(self, value: Any, deps: dict[str, str], exit: dict[str, tuple[Any, bool]],
                 replay: dict[str, list[str]] | None = None) -> None:
        self.value = value
        self.deps = deps
        self.exit = exit
        self.replay = replay or {}

    def __reduce__(self) -> Any:
        if not self.replay:  # the form every memolab reads
            return Result, (self.value, self.deps, self.exit)
        return Result, (self.value, self.deps, self.exit, self.replay)


def restore(value: Any) -> Any:
    """A loaded result: set the generators its body changed, seeded or unseeded as the body
    left them (telling any body in progress: a result drawn from a state is a draw, one a
    body made after seeding is a seed), and return the value itself."""
    if type(value) is not Result:
        return value
    if bodies.get():
        for n in value.deps:
            drew(n)
        for n in value.exit:
            if n not in value.deps:
                seeding(n)
    gens = _available()
    for name, (state, seeded) in value.exit.items():
        gen = gens.get(name) or _import_for(name)
        if gen is not None:
            gen.set(state)
            _mark(gen, seeded)
    for name, ops in value.replay.items():
        gen = gens.get(name) or _import_for(name)
        if gen is not None and name not in value.exit and all(op in _replays for op in ops):
            _replay(ops, gen)
    return value.value


def _import_for(name: str) -> Generator | None:
    """The generator ``name`` of a module the body imported and this process has not."""
    from ..settings import hooks

    module = name.split(".")[0]
    if module not in hooks.LAZY_HOOKS["global_rng"]:
        return None
    import importlib

    try:
        importlib.import_module(module)
    except Exception:  # importing runs the module's own code
        swallowed("globalrng: _import_for")
        return None
    return _available().get(name)
