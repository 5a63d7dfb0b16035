"""What a run is called: its own name, else a short label from the arguments that differ.

``flatten`` turns a run's nested hyperparameters (``cfg={"optim": {"lr": 0.1}}``) into
``cfg.optim.lr`` columns, as W&B does for nested configs. ``labels`` names each of a set
of runs: the name it was given (``memolab.log.name``, a ``SummaryWriter``'s log_dir, a
script's command line) or, W&B-style, the flattened arguments whose values differ between
those runs (``lr=0.01 batch=64``); the dashboard and ``memolab runs`` call it on the runs
they show, so the label depends on what is shown with it.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


def flatten(hparams: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """``{"cfg": {"optim": {"lr": 0.1}}, "seed": 1}`` -> ``{"cfg.optim.lr": 0.1, "seed": 1}``, in order."""
    out: dict[str, Any] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, Mapping) and v:
            for k, x in v.items():
                walk(f"{prefix}{sep}{k}" if prefix else str(k), x)
        elif isinstance(v, Mapping):
            out[prefix] = "{}"
        else:
            out[prefix] = v

    for k, v in hparams.items():
        walk(str(k), v)
    return out


def value_text(v: Any, width: int = 24) -> str:
    """A value as a person writes it: ``0.001``, ``1e-05``, ``True``, ``adam``; lists as JSON."""
    if isinstance(v, float):
        text = repr(v) if math.isfinite(v) else str(v)
    elif isinstance(v, (list, dict)):
        text = json.dumps(v, separators=(",", ":"), default=str)
    else:
        text = str(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def differing(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The flattened hyperparameter names whose values differ between ``rows`` (``hparams`` dicts), in order."""
    flat = [flatten(r or {}) for r in rows]
    keys: list[str] = []
    seen = set()
    for f in flat:
        for k in f:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    out = []
    for k in keys:
        vals = {json.dumps(f[k], sort_keys=True, default=repr) for f in flat if k in f}
        # a key some runs lack differs, unless it is None wherever it is (an optional argument left
        # at None next to a run where it was not an hyperparameter at all, e.g. a SummaryWriter)
        if len(vals) > 1 or (vals != {"null"} and any(k not in f for f in flat)):
            out.append(k)
    return out


def _short_keys(keys: list[str]) -> dict[str, str]:
    """The shortest dotted suffix of each key that no other key ends with (``cfg.optim.lr`` -> ``lr``)."""
    out = {}
    for k in keys:
        parts = k.split(".")
        for i in range(len(parts) - 1, -1, -1):
            suffix = ".".join(parts[i:])
            if not any(o != k and (o == suffix or o.endswith("." + suffix)) for o in keys):
                out[k] = suffix
                break
        else:
            out[k] = k
    return out


def labels(runs: Sequence[Mapping[str, Any]], width: int = 48) -> list[str]:
    """One label per run (dicts with ``id``, ``name``, ``hparams``, optionally ``eval_id``)."""
    keys = differing([r.get("hparams") or {} for r in runs])
    short = _short_keys(keys)
    out = []
    for r in runs:
        name: str | None = r.get("name")
        if name:
            out.append(name if len(name) <= width else name[: width - 1] + "…")
            continue
        flat = flatten(r.get("hparams") or {})
        parts = [f"{short[k]}={value_text(flat[k])}" for k in keys if k in flat]
        text = " ".join(parts)
        if not text:
            text = f"#{r['eval_id']}" if r.get("eval_id") else f"run {str(r.get('id'))[-6:]}"
        out.append(text if len(text) <= width else text[: width - 1] + "…")
    return out


# -- which way is better -------------------------------------------------------------------------
# A metric whose name says it measures a loss, an error or a perplexity is better lower, any other
# higher (accuracy, F1, reward), as W&B's and Aim's summaries assume; the dashboard's column
# header and ``memolab runs --sort TAG:max`` override it. charts-best.js applies the same rule.
_LOWER_ANYWHERE = ("loss", "error", "perplexity")
_LOWER_WORDS = frozenset(("err", "ppl", "mse", "mae", "rmse", "nll", "wer", "cer", "fid", "cost", "regret",
                          "latency", "distance"))


def lower_is_better(tag: str) -> bool:
    """``val/loss``, ``train_error``, ``ppl``, ``val/mse`` -> True; ``val/acc``, ``reward`` -> False."""
    t = tag.lower()
    if any(w in t for w in _LOWER_ANYWHERE):
        return True
    import re

    return any(w in _LOWER_WORDS for w in re.split(r"[^a-z0-9]+", t))


def is_system_tag(tag: str) -> bool:
    """``sys/cpu``: a system metric memolab sampled, not a result of the computation."""
    return tag.startswith("sys/")


# -- one name per function, everywhere ------------------------------------------------------------
# A script's functions are all ``__main__:NAME`` (keys do not depend on the file), so two scripts
# that each define ``train`` share a symbol. People tell them apart by file: ``a.py:train``. The
# dashboard's sidebar and titles, ``memolab ls``/``runs`` and the HParams export all say so, and
# every command that takes a function takes that name back (``cli.ids.split_script``).

def script_labels(paths: Sequence[str]) -> dict[str, str]:
    """Each script path -> the shortest tail of it no other path ends with (``train.py``, else
    ``exp1/train.py`` when ``exp2/train.py`` exists too)."""
    import os

    out: dict[str, str] = {}
    parts = {p: p.replace(os.sep, "/").split("/") for p in paths}
    for p, ps in parts.items():
        for k in range(1, len(ps) + 1):
            tail = "/".join(ps[-k:])
            if not any(o != p and "/".join(os_[-k:]) == tail for o, os_ in parts.items()):
                out[p] = tail
                break
        else:
            out[p] = p
    return out


def function_label(fn: str, script_label: str | None = None) -> str:
    """``__main__:train`` of ``a.py`` -> ``a.py:train``; any other function as it is."""
    if fn.startswith("__main__:") and script_label:
        return f"{script_label}:{fn[9:]}"
    return fn
