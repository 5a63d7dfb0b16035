"""Short, bounded text of any value, for tables, explanations and summaries.

Its own module, below everything that shows values (``memo``, ``summary``,
``tracking``), so none of them imports another for it.
"""
from __future__ import annotations

import re
import reprlib
from typing import Any

from ..errors import swallowed

__all__ = ["short_repr", "is_secret_name", "mask_secrets", "mask_repr", "MASKED", "human_bytes", "human_seconds", "human_age"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 8
_repr.maxlevel = 3

#: the address in a default repr (``<Foo object at 0x7f…>``): different in every process, so two
#: runs with equal arguments would show different values (and a run label, the arguments that
#: differ, would be nothing but addresses)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")


def short_repr(obj: Any) -> str:
    """A one-line, bounded repr for tables and explanations; values of fields whose names
    say they are secrets are masked (``mask_repr``)."""
    try:
        text = _repr.repr(obj)
    except Exception:  # the user's __repr__
        swallowed("text: short_repr")
        return f"<{type(obj).__qualname__}>"
    return mask_repr(_ADDRESS.sub("", " ".join(text.split())))


# -- secrets: never recorded for display in plain text ------------------------------------------
# memolab records arguments for display (run hyperparameters, an evaluation's argument reprs,
# the dashboard, export-tb, the team's logs bundles). A field whose name says it holds a secret
# (``hub_token``, ``password``, ``api_key``, ``aws_secret_access_key``, ``credentials`` ...) is
# shown as MASKED there, as transformers' own ``TrainingArguments`` repr does; keys are not
# affected (an argument's digest is one-way: the value still decides the key).

#: what a secret's value is shown as
MASKED = "<masked>"
#: a name holding one of these words names a secret
_SECRET_WORDS = frozenset(("password", "passwd", "passphrase", "secret", "secrets", "credential", "credentials",
                           "auth", "authorization", "apikey", "privatekey", "cookie", "cookies"))
#: ... and so does one holding one of these pairs of words (``api_key``, ``private_key``, ``access_key``)
_SECRET_PAIRS = frozenset((("api", "key"), ("private", "key"), ("secret", "key"), ("access", "key"),
                           ("signing", "key"), ("hmac", "key"), ("encryption", "key"), ("session", "key"),
                           ("client", "secret"), ("ssh", "key")))
#: a name ending in ``token`` names one (``hub_token``, ``access_token``), except a tokenizer's
#: special tokens (``pad_token="<pad>"``), which are text, not secrets
_SPECIAL_TOKENS = frozenset(("pad", "bos", "eos", "unk", "sep", "cls", "mask", "sos", "start", "end", "begin",
                             "special", "additional"))
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_secret_name(name: Any) -> bool:
    """Does a field, key or argument named ``name`` hold a secret? (``max_tokens``, ``tokenizer``,
    ``author``, ``pad_token`` do not.)"""
    if not isinstance(name, str) or not name:
        return False
    words = [w.lower() for w in _WORD.findall(name)]
    if not words:
        return False
    if _SECRET_WORDS.intersection(words) or any(p in _SECRET_PAIRS for p in zip(words, words[1:], strict=False)):
        return True
    return words[-1] == "token" and not (len(words) > 1 and words[-2] in _SPECIAL_TOKENS)


def _maskable(v: Any) -> bool:
    return v is not None and not isinstance(v, bool)  # None and True/False tell nothing (``use_auth_token=True``)


def mask_secrets(value: Any, name: Any = None) -> Any:
    """``value`` (plain JSON-like data: dicts, lists, scalars) with the values of secret-named
    keys masked, at any depth; ``name``: the name ``value`` itself goes by."""
    if name is not None and is_secret_name(name) and _maskable(value):
        return MASKED
    if isinstance(value, dict):
        return {k: mask_secrets(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


# ``name='value'`` (a dataclass's or a namespace's repr, keyword arguments) and ``'name': 'value'``
# (a dict's): the value is a quoted string (escapes included) or a bare token
_FIELD = re.compile(r"""(?P<q>['"]?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)(?P<sep>\s*[:=]\s*)"""
                    r"""(?P<value>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|b'(?:[^'\\]|\\.)*'?|(?![{\[(<])[^,)}\]\s]+)""")


def _mask_field(m: re.Match[str]) -> str:
    value = m.group("value")
    if not is_secret_name(m.group("name")) or value in ("None", "True", "False"):
        return m.group(0)
    return f"{m.group('q')}{m.group('name')}{m.group('q')}{m.group('sep')}{MASKED!r}"


def mask_repr(text: str) -> str:
    """``text`` (a repr) with the values of secret-named fields masked: ``Cfg(lr=0.1,
    api_key='sk-…')`` -> ``Cfg(lr=0.1, api_key='<masked>')``, ``{'password': 'x'}`` likewise."""
    if "=" not in text and ":" not in text:
        return text
    return _FIELD.sub(_mask_field, text)


def mask_args(args: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """An argument snapshot (``{name: [digest, repr]}``) with secrets masked: an argument whose
    name says it is one shows MASKED, any other's repr is masked inside (``mask_repr``)."""
    out: dict[str, list[Any]] = {}
    for n, v in args.items():
        if isinstance(v, list) and len(v) == 2 and isinstance(v[1], str):
            v = [v[0], MASKED if is_secret_name(n) and v[1] not in ("None", "True", "False") else mask_repr(v[1])]
        out[n] = v
    return out


def human_bytes(n: float | None) -> str:
    """THE size formatter of every face (the log, notebooks, the CLI, the dashboard's summaries; the
    page's JavaScript ``fmtBytes`` mirrors it): decimal units, as disks, clouds and the dashboard
    count, ``1.3 GB`` (1 KB = 1000 B); ``parse_size`` takes both ``GB`` and ``GiB`` back."""
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def human_seconds(s: float | None, empty: str = "-") -> str:
    """THE duration formatter of every face (the log, the CLI, notebooks, ``max_age`` messages):
    ``350 µs``, ``12 ms``, ``4.2 s``, then the two largest units, the smaller one left out when it is
    zero: ``2m 05s``, ``1h``, ``2d 01h``. ``None`` (not recorded) is ``empty``; a negative span
    (another machine's clock) counts as 0."""
    if s is None:
        return empty
    s = max(0.0, float(s))
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    n = int(round(s))
    for unit, size, small, step in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if n >= size:
            big, rest = divmod(n, size)
            part = rest // step
            return f"{big}{unit} {part:02d}{small}" if part else f"{big}{unit}"
    return f"{n}s"  # pragma: no cover (59.95 s and up round to 60: "1m")


def human_age(t: float | None, now: float | None = None, empty: str = "-") -> str:
    """THE age formatter of every face (CLI tables, notebooks): ``just now``, ``5 min ago``, ``3 h ago``,
    ``2 d ago``, then the date."""
    import datetime as _dt
    import time

    if not t:
        return empty
    d = (now or time.time()) - t
    if d < 60:
        return "just now"
    if d < 3600:
        return f"{int(d // 60)} min ago"
    if d < 86400:
        return f"{int(d // 3600)} h ago"
    if d < 30 * 86400:
        return f"{int(d // 86400)} d ago"
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d")


def did_you_mean(word: str, choices: Any) -> str:
    """`` (did you mean ignore?)`` for a misspelt ``word`` among ``choices``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
