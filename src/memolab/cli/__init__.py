"""The ``memolab`` command line: look into a store and keep it healthy.

Output is for people: aligned tables, sizes and durations in human units.
Subcommands register themselves with ``@command`` (``cli.common``) so that other
modules add theirs without touching the parser plumbing; this module only builds
the parser from the registry and runs the chosen command.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import MemolabError, swallowed
from .common import (  # noqa: F401
    COMMANDS,
    OK,
    PROBLEM,
    USAGE,
    CliError,
    Progress,
    command,
    confirm,
    emit_json,
    human_age,
    human_bytes,
    human_seconds,
    options,
    parse_age,
    parse_size,
    resolve_function,
    short_name,
    store_root,
    table,
)


class Parser(argparse.ArgumentParser):
    """Usage errors are one line on stderr (``memolab ls: argument --limit: must be 1 or more, got -3``),
    exit 2, as every other error of the command line is one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"memolab: {self.prog.replace('memolab ', '', 1) + ': ' if ' ' in self.prog else ''}"
                         f"{message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    store_help = "store directory (default: $MEMOLAB_STORE or <workspace>/.memolab)"
    p = Parser(prog="memolab", description="Inspect and maintain a memolab store.",
                                epilog="exit status: 0 ok, 1 a problem found or something not found, 2 usage")
    p.add_argument("--store", metavar="DIR", help=store_help)
    p.add_argument("--version", action="version", version=f"memolab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    # registered in this order, the order `memolab --help` lists them in (not sorted)
    # isort: off
    from . import store_commands  # noqa: F401  (registers `ls`, `show`, `why`, `clear`, `gc`)
    from . import run_commands  # noqa: F401  (registers `runs`)
    from . import accept_commands  # noqa: F401  (registers `accept`)
    from . import note_commands  # noqa: F401  (registers `tag` and `note`)
    from . import keep_commands  # noqa: F401  (registers `keep` and `unkeep`)
    from . import snapshot_commands  # noqa: F401  (registers `snapshot` and `restore`)
    from ..ui import cli as _ui_cli  # noqa: F401  (registers `ui` and `export-tb`)
    from . import doctor as _doctor  # noqa: F401  (registers `doctor`)
    from . import team_commands as _team_cli  # noqa: F401  (registers `remote`, `sync`, `pull`)
    # isort: on
    for name, (fn, configure, help_) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        # `memolab ls --store DIR` as well as `memolab --store DIR ls`; SUPPRESS keeps a
        # --store given before the command when none is given after it
        sp.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
        configure(sp)
        sp.set_defaults(_fn=fn)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_fn", None):
        parser.print_help()
        return USAGE

    port = getattr(args, "port", None)
    if port is not None and not 0 <= port <= 65535:  # bind() would raise OverflowError
        print(f"memolab: --port must be 0..65535 (0: any free port), got {port}", file=sys.stderr)
        return USAGE
    try:
        code = int(args._fn(args) or 0)
        sys.stdout.flush()  # here, so that a reader gone (`| head`) is caught below, not at exit
        return code
    except CliError as e:
        sys.stdout.flush()
        print(f"memolab: {e}", file=sys.stderr)
        return e.code
    except BrokenPipeError:  # `memolab ls | head`
        # the interpreter flushes stdout again at exit and would print a second BrokenPipeError
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            swallowed("cli: main")
        return 0
    except KeyboardInterrupt:
        return 130
    except MemolabError as e:  # an unusable store, a bad location: one line, no traceback
        print(f"memolab: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # the CLI's last line: one line instead of a traceback (MEMOLAB_DEBUG=1 raises)
        if os.environ.get("MEMOLAB_DEBUG"):
            raise
        print(f"memolab: error: {type(e).__name__}: {e}\n(`memolab --store DIR doctor` checks the store; "
              "MEMOLAB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
