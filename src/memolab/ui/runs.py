"""``memolab.runs()``: read logged runs back in Python (a notebook, a script, a report).

What W&B's ``wandb.Api().runs()``, MLflow's ``search_runs`` and TensorBoard's
``EventAccumulator`` give, over the store's own index::

    import memolab

    for run in memolab.runs("train", status="done"):
        print(run.name, run.hparams["cfg.optim.lr"], run.metrics["val/acc"])
        steps, values = run.scalars("loss").step, run.scalars("loss").value
    df = memolab.runs("train").to_pandas()          # one row per run: hparams and final metrics

Plain lists by default; pandas only when asked (``to_pandas()``, ``scalars(tag).to_pandas()``),
and only if installed: it is never a dependency of memolab. Nothing here is imported by
``import memolab``.
"""
from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterable
from typing import Any, NamedTuple

from ..key import key_of
from ..tracking import query as _query
from ..tracking.notes import Note

__all__ = ["runs", "Run", "RunList", "Scalars", "Evaluation", "Edge", "Note"]

STATUSES = ("running", "done", "failed", "interrupted", "lost")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("to_pandas() needs pandas, which memolab does not install: pip install pandas") from None
    return pandas


class Scalars(NamedTuple):
    """Every point of one tag of one run, in step order (NaN and inf as floats)."""

    tag: str
    step: list[int]
    value: list[float]
    wall: list[float]

    def __len__(self) -> int:
        return len(self.step)

    def to_pandas(self) -> Any:
        """A DataFrame with columns step, value, wall (needs pandas)."""
        return _pandas().DataFrame({"step": self.step, "value": self.value, "wall": self.wall})


class Evaluation(NamedTuple):
    """The stored evaluation a run produced: its id (as ``memolab show ID`` takes), hits, size and result summary."""

    id: int
    hits: int
    size: int | None
    result: str | None

    def _repr_html_(self) -> str:
        from .display import evaluation

        return evaluation(self)


class Edge(NamedTuple):
    """One lineage edge of a run's evaluation: in ``Run.inputs``, the evaluation (of ``fn``) an
    object at argument ``path`` came from; in ``Run.used_by``, an evaluation (of ``fn``) that took
    this one's result at its argument ``path``. ``evaluation`` is None for an input no longer stored
    (cleared, collected by ``gc``)."""

    path: str
    fn: str
    evaluation: int | None


class Run:
    """One run of a function: a computation of a memoized function, a script's process run, or a
    ``SummaryWriter(log_dir)``'s run. ``id`` is the run id (``memolab show ID`` takes it too)."""

    def __init__(self, row: dict[str, Any], index: Any) -> None:
        self._row = row
        self._index = index
        self.id: int | str = row["id"]
        self.fn: str = row["fn"]
        #: the run's own name, else the arguments that differ from the other runs of its function
        self.name: str = row.get("label") or str(row["id"])
        self.status: str = row["status"]
        #: arguments (and ``log.hparams`` values) with nested configs flattened: ``cfg.optim.lr``
        self.hparams: dict[str, Any] = dict(row.get("hparams") or {})
        #: the last value of every scalar tag
        self.metrics: dict[str, float | None] = dict(row.get("metrics") or {})
        self.started: float = row["started"]
        self.finished: float | None = row.get("finished")
        self.duration: float | None = row.get("duration")
        self.code: str | None = row.get("code")
        self.parent: int | None = row.get("parent")
        self.error: str | None = row.get("error")
        #: the script that ran it (absolute path), telling apart two scripts' ``__main__:train``
        self.script: str | None = row.get("script")
        ev = row.get("eval_id") if row.get("stored") else None
        #: the stored evaluation (None for a run that stored nothing: failed, interrupted, a process run)
        self.evaluation: Evaluation | None = (
            Evaluation(int(ev), int(row.get("hits") or 0), row.get("size"), row.get("result")) if ev else None)
        #: its tags (``memolab.log.tag``, ``memolab tag ID TAG``, the dashboard), its evaluation's included
        self.run_tags: list[str] = list(row.get("run_tags") or [])
        #: its notes (and its evaluation's), oldest first: ``Note(text, time, source, id)``
        self.notes: list[Note] = [Note(**n) for n in row.get("notes") or []]

    def __repr__(self) -> str:
        return f"<memolab.Run {self.id} {self.fn} {self.name!r} {self.status}>"

    def _repr_html_(self) -> str:
        """In a notebook: the run and its curves, one small chart per scalar tag (at most 12)."""
        from .display import run_card

        return run_card(self, [(t, self.curve(t)) for t in self.tags()[:12]])

    def curve(self, tag: str, points: int = 200) -> Scalars:
        """``tag``'s series summarised to about ``points`` points (bucket means; first and last
        exact; None for a non-finite value): for a chart. ``scalars`` has every point."""
        rid = self._run_id()
        if rid is None:
            return Scalars(tag, [], [], [])
        p = _query.scalars(self._index, rid, tag, points)
        return Scalars(tag, p["step"], p["value"], p["wall"])

    def _evaluation_row(self) -> dict[str, Any] | None:
        if self.evaluation is None:
            return None
        rows = self._index.evaluations(where="id=?", params=(self.evaluation.id,), limit=1)
        return rows[0] if rows else None

    @property
    def inputs(self) -> list[Edge]:
        """What the run's evaluation was made from: for each argument path holding a result of
        another evaluation, that evaluation (docs/cache-rules.md, "Lineage"). Empty without one."""
        from ..store import edges

        row = self._evaluation_row()
        return [] if row is None else [Edge(e["path"], e["function"], e["evaluation"])
                                        for e in edges.inputs_of(self._index, row)]

    @property
    def used_by(self) -> list[Edge]:
        """The evaluations that took this run's result as an input (oldest first)."""
        from ..store import edges

        row = self._evaluation_row()
        if row is None:
            return []
        key = key_of(row)
        return [Edge(e["path"], e["function"], e["evaluation"]) for e in edges.used_by(self._index, key)]

    def _run_id(self) -> int | None:
        return self.id if isinstance(self.id, int) else None  # "e12": an evaluation stored without a run

    def tags(self) -> list[str]:
        """The scalar tags this run logged."""
        rid = self._run_id()
        return [] if rid is None else _query.tags(self._index, [rid])["scalar"]

    def scalars(self, tag: str) -> Scalars:
        """Every point of ``tag`` (not downsampled). An unknown tag raises ``KeyError`` naming the tags there are."""
        rid = self._run_id()
        p = _query.points(self._index, rid, tag) if rid is not None else {"step": [], "value": [], "wall": []}
        if not p["step"]:
            raise KeyError(f"run {self.id} ({self.name}) logged no scalar {tag!r}; its tags: {', '.join(self.tags()) or 'none'}")
        return Scalars(tag, p["step"], p["value"], p["wall"])

    @property
    def traceback(self) -> str | None:
        """A failed or interrupted run's traceback (its last 20,000 characters)."""
        rid = self._run_id()
        return None if rid is None else _query.failure(self._index, rid)["traceback"]

    @property
    def output(self) -> str | None:
        """The tail (16,000 characters) of what a failed or interrupted computation printed."""
        rid = self._run_id()
        return None if rid is None else _query.failure(self._index, rid)["output"]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "fn": self.fn, "name": self.name, "status": self.status, "started": self.started,
                "finished": self.finished, "duration": self.duration, "code": self.code, "error": self.error,
                "script": self.script, "run_tags": self.run_tags, "notes": [n._asdict() for n in self.notes],
                "evaluation": self.evaluation._asdict() if self.evaluation else None,
                "inputs": [e._asdict() for e in self.inputs], "used_by": [e._asdict() for e in self.used_by],
                "hparams": self.hparams, "metrics": self.metrics}


class RunList(list[Run]):
    """A list of runs, newest first, with ``to_pandas()``."""

    def _repr_html_(self) -> str:
        """In a notebook: a table, one row per run, final metrics in columns."""
        from .display import runs_table

        return runs_table(self)

    def to_pandas(self) -> Any:
        """One row per run: id, fn, name, status, started, duration, the hparams, then the final metrics."""
        rows = []
        for r in self:
            d: dict[str, Any] = {"id": r.id, "fn": r.fn, "name": r.name, "status": r.status, "started": r.started,
                                 "duration": r.duration, "evaluation": r.evaluation.id if r.evaluation else None,
                                 "run_tags": ",".join(r.run_tags)}
            d.update(r.hparams)
            d.update(r.metrics)
            rows.append(d)
        return _pandas().DataFrame(rows)


def runs(fn: Any = None, *, status: None | str | Iterable[str] = None, name: str | None = None,
         tag: str | None = None, store: Any = None, limit: int | None = None) -> RunList:
    """The runs of ``fn`` (a memoized function, its full symbol ``pkg.mod:train``, or an unambiguous
    suffix such as ``train``; a script's function as ``a.py:train``; a script's process runs as
    ``train.py``), or of every function, newest first.

    ``status``: one of running, done, failed, interrupted, lost (or several); ``name``: a regular
    expression searched in the run's name; ``tag``: only runs carrying this tag (theirs or their
    evaluation's); ``store``: a store directory (default: the configured one);
    ``limit``: at most that many runs. Stored evaluations that have no run are included
    (their ``id`` is ``"e<evaluation id>"``).
    """
    from ..store import get_store

    if store is not None:
        from pathlib import Path

        root = Path(store).expanduser()
        if not (root / "index.sqlite").is_file():  # reading never creates a store
            raise FileNotFoundError(f"memolab.runs: no store at {root}")
        st = get_store(root)
    else:
        st = get_store()
    index = st.index
    symbol = script = None
    if fn is not None:
        symbol = getattr(fn, "symbol", None)
        if symbol is None:
            if not isinstance(fn, str):
                raise TypeError(f"memolab.runs: fn must be a memoized function or a name, got {type(fn).__qualname__}")
            from ..tracking import resolve

            # the CLI's resolver: a.py:train, __main__:train, pkg.mod:train, train; ambiguous -> LookupError
            found = resolve.resolve(index, fn, who="memolab.ui.runs")
            symbol, script = found.fn, found.script
    wanted = None
    if status is not None:
        wanted = {status} if isinstance(status, str) else set(status)
        bad = wanted - set(STATUSES)
        if bad:
            raise ValueError(f"memolab.runs: unknown status {', '.join(sorted(bad))} (one of {', '.join(STATUSES)})")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"memolab.runs: limit must be a non-negative int, got {limit!r}")
    pattern = re.compile(name) if name is not None else None
    out = RunList()
    for row in _query.runs(index, symbol):
        if wanted is not None and row["status"] not in wanted:
            continue
        if script is not None and row.get("script") != script:
            continue
        r = Run(row, index)
        if pattern is not None and not pattern.search(r.name):
            continue
        if tag is not None and tag not in r.run_tags:
            continue
        out.append(r)
        if limit is not None and len(out) >= limit:
            break
    return out


class _CallableModule(types.ModuleType):
    # ``import memolab.ui.runs`` makes the attribute ``memolab.runs`` this module (the import system
    # sets it after the package's lazy ``__getattr__`` returned the function): calling it must
    # still work.
    def __call__(self, *args: Any, **kwargs: Any) -> RunList:
        return runs(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
