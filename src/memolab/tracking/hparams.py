"""A run's hyperparameters: the arguments of a computation as its run records them.

``hparam_value``: what the hparams table keeps of one argument (a JSON scalar as itself, a
small nested config kept nested within a budget, anything else a short typed summary);
``NOT_HPARAMS``: the argument types that are no hyperparameter. Read by ``runs.begin`` (a
computation's arguments) and ``log.hparams`` (what the user logs).
"""
from __future__ import annotations

from typing import Any

from ..errors import swallowed

#: argument types that are no hyperparameter (they cannot change the result: left out of the key
#: too); ``writer.py`` adds ``SummaryWriter``
NOT_HPARAMS: set = set()


def hparam_value(v: Any, _depth: int = 0) -> Any:
    """JSON scalars stay themselves (so the hparams table sorts numbers as numbers). A nested
    config (dicts, dataclasses, namespaces; short lists of scalars) stays nested, so readers
    flatten it to ``optim.lr`` columns (``names.flatten``), when it is small: at most 200 values,
    6 levels, and 8 values that are not config-like (a ``Path``, an enum: each a short repr). Anything
    else (a state_dict of tensors, a dataset) is one short repr, as it always was: repr'ing each of
    hundreds of tensors would slow every computation's start."""
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return v if len(v) <= 200 else v[:197] + "..."
    if _depth == 0 and _config_cost(v, 0, [0]) <= _CONFIG_BUDGET:
        return _config_value(v, 0)
    return _shown(v)


def _shown(v: Any) -> str:
    """A model, a dataset, a tensor as a typed summary (``Net(1.2 K params)``), as every face shows it."""
    from ..calls.summary import text

    return text(v)


_CONFIG_BUDGET = 200
_OTHER_COST = 25  # a leaf that is not a scalar: 8 of them fit


def _scalar_list(v: Any) -> bool:
    return type(v) in (list, tuple) and len(v) <= 20 and all(
        x is None or isinstance(x, (bool, int, float, str)) for x in v)


def _config_cost(v: Any, depth: int, spent: list) -> int:
    """What keeping ``v`` nested costs (stops counting past the budget)."""
    if spent[0] > _CONFIG_BUDGET:
        return spent[0]
    if v is None or isinstance(v, (bool, int, float, str)):
        spent[0] += 1
    elif _scalar_list(v):
        spent[0] += max(1, len(v))
    else:
        items = _config_items(v) if depth < 6 else None
        if items is None:
            spent[0] += _OTHER_COST if depth else _CONFIG_BUDGET + 1  # the value itself is no config
        else:
            spent[0] += 1
            for _, x in items:
                _config_cost(x, depth + 1, spent)
                if spent[0] > _CONFIG_BUDGET:
                    break
    return spent[0]


def _config_value(v: Any, depth: int) -> Any:
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return v if len(v) <= 200 else v[:197] + "..."
    if _scalar_list(v):
        return [_config_value(x, depth + 1) for x in v]
    items = _config_items(v) if depth < 6 else None
    if items is not None:
        return {str(k): _config_value(x, depth + 1) for k, x in items}
    return _shown(v)


def _config_items(v: Any) -> list | None:
    """(key, value) pairs of a config-like value, or None: a dict (or any Mapping, as OmegaConf's),
    a dataclass instance, an ``argparse.Namespace``/``SimpleNamespace``."""
    from collections.abc import Mapping

    try:
        if isinstance(v, Mapping):
            return list(v.items()) if len(v) <= 200 else None
        fields = getattr(type(v), "__dataclass_fields__", None)
        if isinstance(fields, dict) and not isinstance(v, type):
            return [(k, getattr(v, k)) for k, f in fields.items() if getattr(f, "repr", True)]
        if type(v).__name__ in ("Namespace", "SimpleNamespace") and hasattr(v, "__dict__"):
            return list(vars(v).items())
    except Exception:  # the user's config object's own code (a Mapping's __len__, a dataclass property)
        swallowed("tracking.runs: _config_items")
        return None
    return None
