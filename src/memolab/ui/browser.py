"""Whether, and with which browser, ``memolab ui`` opens the dashboard.

Only a graphical browser, and only where one can show: Python's ``webbrowser`` falls back to
console browsers (``www-browser``, ``links``, ``lynx``, ``w3m``) when there is no display,
and one of those takes over the terminal the server runs in (issue 41: ``memolab ui`` on a
headless box with w3m installed hung before it served anything). So the dashboard is opened

* not over SSH (``SSH_CONNECTION``, ``SSH_CLIENT``, ``SSH_TTY``): the browser would start on
  the remote box; the printed URL, through ``ssh -L``, is the way there;
* on Linux and the other Unixes but macOS, only with a display (``DISPLAY`` or
  ``WAYLAND_DISPLAY``);
* never with a text browser, even one named in ``BROWSER``;

and always after the server answers (the caller starts it first) and in a thread of its
own, so a browser that blocks cannot stop the dashboard.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["TEXT_BROWSERS", "why_not", "choose"]

#: browsers that draw in the terminal they are started from (Debian's ``www-browser`` is by
#: policy a text-mode one; ``x-www-browser`` is the graphical alternative)
TEXT_BROWSERS = frozenset({"www-browser", "links", "links2", "elinks", "lynx", "w3m", "browsh", "carbonyl",
                           "netrik", "edbrowse"})

#: graphical browsers tried, in order, when the default one is a text browser
_GRAPHICAL = ("xdg-open", "gio", "x-www-browser", "firefox", "chromium", "chromium-browser", "google-chrome",
              "brave-browser", "microsoft-edge", "epiphany", "konqueror", "falkon")


def why_not(env: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why no browser can show the dashboard here (one line), or None."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get("SSH_CONNECTION") or env.get("SSH_CLIENT") or env.get("SSH_TTY"):
        return "this is an SSH session"
    if platform.startswith(("win", "darwin")):
        return None
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return "no graphical display here (DISPLAY and WAYLAND_DISPLAY are unset)"
    return None


def _program(controller: Any) -> str:
    """The program a ``webbrowser`` controller runs: ``w3m`` for ``GenericBrowser('w3m %s')``."""
    name = str(getattr(controller, "name", "") or "")  # (its ``args`` are the arguments: ["%s"])
    first = name.split()[0] if name.split() else name
    return os.path.basename(first)


def choose() -> tuple[Any | None, str | None]:
    """(a ``webbrowser`` controller of a graphical browser, None), or (None, why not)."""
    why = why_not()
    if why is not None:
        return None, why
    import webbrowser

    try:
        default = webbrowser.get()
    except webbrowser.Error:
        return None, "no browser was found"
    if _program(default) not in TEXT_BROWSERS:
        return default, None
    if os.environ.get("BROWSER"):  # the user's own choice: not second-guessed with another program
        return None, f"BROWSER names a text browser ({_program(default)}), which would take over this terminal"
    for name in _GRAPHICAL:
        try:
            b = webbrowser.get(name)
        except webbrowser.Error:
            continue
        if _program(b) not in TEXT_BROWSERS:
            return b, None
    return None, f"the only browser here is a text browser ({_program(default)}), which would take over this terminal"
