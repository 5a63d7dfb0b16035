"""``memolab.SummaryWriter``: the ``torch.utils.tensorboard.SummaryWriter`` API over ``memolab.log``.

Existing training code switches by changing one import. Each call logs to the
run chosen *when it is made*, not when the writer was built: a writer made at
module level and used inside memoized training still files every point under
the right evaluation. ``log_dir`` is a run, as in TensorBoard (``runs.writer_target``):
inside a memoized computation the computation's run, named after it; outside any,
one run per ``log_dir`` until ``close()``. Without a ``log_dir`` the writer logs
where ``memolab.log`` would. Nothing is written to event files (use ``memolab
export-tb`` for that).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from . import log as _log, runs as _runs
from .hparams import NOT_HPARAMS


def _label(log_dir: Any, comment: str) -> str | None:
    if log_dir is None or str(log_dir) == "":
        return None
    text: str = os.path.normpath(os.fspath(log_dir)) + (comment or "")
    return text if len(text) <= 200 else "…" + text[-199:]


class SummaryWriter:
    def __init__(self, log_dir: str | None = None, comment: str = "", purge_step: int | None = None,
                 max_queue: int = 10, flush_secs: int = 120, filename_suffix: str = "") -> None:
        self.log_dir = log_dir
        self.comment = comment
        self._closed = False
        self._label = _label(log_dir, comment)

    def _call(self, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        if self._label is None:
            fn(*args, **kwargs)
            return
        token = _runs.bind(_runs.writer_target(self._label))
        try:
            fn(*args, **kwargs)
        finally:
            _runs.unbind(token)

    def __repr__(self) -> str:
        return f"memolab.SummaryWriter(log_dir={self.log_dir!r})"

    def get_logdir(self) -> str | None:
        return self.log_dir

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, walltime: float | None = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        self._call(_log.scalar, tag, scalar_value, global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: int | None = None,
                    walltime: float | None = None) -> None:
        self._call(_log.scalars, tag_scalar_dict, global_step, main_tag=main_tag, walltime=walltime)

    def add_histogram(self, tag: str, values: Any, global_step: int | None = None, bins: Any = "tensorflow",
                      walltime: float | None = None, max_bins: int | None = None) -> None:
        self._call(_log.histogram, tag, values, global_step, bins=max_bins or bins, walltime=walltime)

    def add_image(self, tag: str, img_tensor: Any, global_step: int | None = None, walltime: float | None = None,
                  dataformats: str = "CHW") -> None:
        self._call(_log.image, tag, img_tensor, global_step, dataformats=dataformats, walltime=walltime)

    def add_images(self, tag: str, img_tensor: Any, global_step: int | None = None, walltime: float | None = None,
                   dataformats: str = "NCHW") -> None:
        # One image per sample, tagged tag/0, tag/1, ... (TensorBoard tiles them into one picture instead).
        fmt = dataformats.upper().replace("N", "")
        for i in range(len(img_tensor)):
            self._call(_log.image, f"{tag}/{i}", img_tensor[i], global_step, dataformats=fmt, walltime=walltime)

    def add_text(self, tag: str, text_string: str, global_step: int | None = None, walltime: float | None = None) -> None:
        self._call(_log.text, tag, text_string, global_step, walltime)

    def add_figure(self, tag: str, figure: Any, global_step: int | None = None, close: bool = True,
                   walltime: float | None = None) -> None:
        if isinstance(figure, list):
            for i, f in enumerate(figure):
                self._call(_log.figure, f"{tag}/{i}", f, global_step, close=close, walltime=walltime)
        else:
            self._call(_log.figure, tag, figure, global_step, close=close, walltime=walltime)

    def add_hparams(self, hparam_dict: dict[str, Any], metric_dict: dict[str, Any], hparam_domain_discrete: Any = None,
                    run_name: str | None = None, global_step: int | None = None) -> None:
        """Hyperparameters join the run's own (its arguments); metrics are logged as scalars."""
        if not isinstance(hparam_dict, Mapping) or not isinstance(metric_dict, Mapping):
            raise TypeError("add_hparams: hparam_dict and metric_dict must be dicts")
        self._call(_log.hparams, hparam_dict)
        for k, v in metric_dict.items():
            self._call(_log.scalar, k, v, global_step)

    def flush(self) -> None:
        _log.flush()

    def close(self) -> None:
        """Flush; outside a memoized computation, also end this log_dir's run (done)."""
        self._closed = True
        if self._label is not None and _runs.in_call() is None:
            _runs.end_writer_run(self._label)
        _log.flush()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# A writer handed to a memoized function cannot change its result (its logs go to the
# run either way), so it is left out of the key: a new log_dir must not cause a miss.
from ..hashing import register_opaque  # noqa: E402

register_opaque(SummaryWriter)
NOT_HPARAMS.add(SummaryWriter)  # nor is it a hyperparameter: its log_dir names the run instead
