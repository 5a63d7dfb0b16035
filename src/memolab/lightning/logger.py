"""``MemolabLogger``: Lightning's ``self.log(...)`` stored with the evaluation that logged it.

A ``Logger`` like ``TensorBoardLogger`` or ``CSVLogger`` (same place, same
convention), which writes nothing of its own: each call goes to ``memolab.log``
when it is made. Inside a memoized function its points belong to that
evaluation's run (stored with the result, shown again on a hit); outside one,
to the process run. Steps are the ``step`` Lightning passes (the global step),
and Lightning's ``epoch`` entry is logged as the scalar ``epoch`` at that step,
as the TensorBoard and CSV loggers do: it is the epoch axis.
"""
from __future__ import annotations

from argparse import Namespace
from collections.abc import Mapping
from typing import Any

try:
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the standalone package
    from pytorch_lightning.loggers import Logger  # type: ignore[assignment]  # the same class, under its old package
    from pytorch_lightning.utilities import rank_zero_only

from ..tracking import log as _log
from ..tracking.writer import SummaryWriter

__all__ = ["MemolabLogger"]


def flatten(params: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Nested dicts and ``Namespace``s as one level, keys joined with ``sep`` (as TensorBoardLogger does)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        key = f"{prefix}{k}"
        if isinstance(v, Namespace):
            v = vars(v)
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + sep, sep))
        else:
            out[key] = v
    return out


class MemolabLogger(Logger):
    """Lightning metrics and hyperparameters into memolab's logs (docs/lightning.md).

    ``Trainer(logger=MemolabLogger())``, alone or in a list beside other loggers.
    ``name`` and ``version`` (by default the id of the run logs go to) name the
    checkpoint folder ``ModelCheckpoint`` picks under ``save_dir`` (by default the
    Trainer's ``default_root_dir``): one folder per computation. ``prefix`` is put
    before every metric name, joined with ``-`` (Lightning's convention).
    ``experiment`` is a ``memolab.SummaryWriter``, so code calling
    ``self.logger.experiment.add_histogram(...)`` for TensorBoard keeps working.
    """

    def __init__(self, name: str = "memolab", version: int | str | None = None,
                 save_dir: str | None = None, prefix: str = "") -> None:
        super().__init__()
        self._name = name
        self._version = version
        self._save_dir = save_dir
        self._prefix = prefix
        self._writer: SummaryWriter | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        # read when asked (not cached): a logger made outside a memoized function and used inside
        # one names the run of the computation it is used in
        return self._version if self._version is not None else _log.current_run()

    @property
    def save_dir(self) -> str | None:
        return self._save_dir

    @property
    def experiment(self) -> SummaryWriter:
        if self._writer is None:
            self._writer = SummaryWriter()
        return self._writer

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        prefix = f"{self._prefix}-" if self._prefix else ""
        for k, v in metrics.items():
            _log.scalar(prefix + str(k), v, step)

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None, *args: Any, **kwargs: Any) -> None:
        if params is None:
            return
        if isinstance(params, Namespace):
            params = vars(params)
        _log.hparams(flatten(params))

    @rank_zero_only
    def finalize(self, status: str) -> None:
        # the end of fit/validate/test: make the points durable (a memoized call also flushes when it returns)
        _log.flush()

    def __repr__(self) -> str:
        return f"MemolabLogger(name={self._name!r})"
