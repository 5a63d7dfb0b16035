"""``memolab.SummaryWriter``: the ``torch.utils.tensorboard.SummaryWriter`` API over ``memolab.log``.

Existing training code switches by changing one import. Each call logs to the
run that is current *when it is made* (the memoized function being computed,
else the process run), not the run current when the writer was built: a writer
made at module level and used inside memoized training still files every point
under the right evaluation. ``log_dir`` and the other file options are accepted
and kept only as a label, since nothing is written to event files (use
``memolab export-tb`` for that).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from . import log as _log


class SummaryWriter:
    def __init__(self, log_dir: Optional[str] = None, comment: str = "", purge_step: Optional[int] = None,
                 max_queue: int = 10, flush_secs: int = 120, filename_suffix: str = "") -> None:
        self.log_dir = log_dir
        self.comment = comment
        self._closed = False

    def __repr__(self) -> str:
        return f"memolab.SummaryWriter(log_dir={self.log_dir!r})"

    def get_logdir(self) -> Optional[str]:
        return self.log_dir

    def add_scalar(self, tag: str, scalar_value: Any, global_step: Optional[int] = None, walltime: Optional[float] = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        _log.scalar(tag, scalar_value, global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: Optional[int] = None,
                    walltime: Optional[float] = None) -> None:
        _log.scalars(tag_scalar_dict, global_step, main_tag=main_tag, walltime=walltime)

    def add_histogram(self, tag: str, values: Any, global_step: Optional[int] = None, bins: Any = "tensorflow",
                      walltime: Optional[float] = None, max_bins: Optional[int] = None) -> None:
        _log.histogram(tag, values, global_step, bins=max_bins or bins, walltime=walltime)

    def add_image(self, tag: str, img_tensor: Any, global_step: Optional[int] = None, walltime: Optional[float] = None,
                  dataformats: str = "CHW") -> None:
        _log.image(tag, img_tensor, global_step, dataformats=dataformats, walltime=walltime)

    def add_images(self, tag: str, img_tensor: Any, global_step: Optional[int] = None, walltime: Optional[float] = None,
                   dataformats: str = "NCHW") -> None:
        # One image per sample, tagged tag/0, tag/1, ... (TensorBoard tiles them into one picture instead).
        fmt = dataformats.upper().replace("N", "")
        for i in range(len(img_tensor)):
            _log.image(f"{tag}/{i}", img_tensor[i], global_step, dataformats=fmt, walltime=walltime)

    def add_text(self, tag: str, text_string: str, global_step: Optional[int] = None, walltime: Optional[float] = None) -> None:
        _log.text(tag, text_string, global_step, walltime)

    def add_figure(self, tag: str, figure: Any, global_step: Optional[int] = None, close: bool = True,
                   walltime: Optional[float] = None) -> None:
        if isinstance(figure, list):
            for i, f in enumerate(figure):
                _log.figure(f"{tag}/{i}", f, global_step, close=close, walltime=walltime)
        else:
            _log.figure(tag, figure, global_step, close=close, walltime=walltime)

    def add_hparams(self, hparam_dict: Dict[str, Any], metric_dict: Dict[str, Any], hparam_domain_discrete: Any = None,
                    run_name: Optional[str] = None, global_step: Optional[int] = None) -> None:
        """Hyperparameters join the run's own (its arguments); metrics are logged as scalars."""
        if not isinstance(hparam_dict, Mapping) or not isinstance(metric_dict, Mapping):
            raise TypeError("add_hparams: hparam_dict and metric_dict must be dicts")
        _log.hparams(hparam_dict)
        for k, v in metric_dict.items():
            _log.scalar(k, v, global_step)

    def flush(self) -> None:
        _log.flush()

    def close(self) -> None:
        self._closed = True
        _log.flush()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# A writer handed to a memoized function cannot change its result (its logs go to the
# run either way), so it is left out of the key: a new log_dir must not cause a miss.
from ..hashing import register_opaque  # noqa: E402

register_opaque(SummaryWriter)
