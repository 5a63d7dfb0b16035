"""``memolab ui`` and ``memolab export-tb``, as functions ``cli.py`` wires in."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence


def add_ui_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("ui", help="serve the dashboard on 127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="port (0: any free port)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--store", default=None, help="store directory (default: the configured one)")
    p.set_defaults(func=run_ui)


def add_export_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("export-tb", help="write the logs as TensorBoard event files")
    p.add_argument("dir", help="output directory (then: tensorboard --logdir DIR)")
    p.add_argument("func", nargs="?", default=None, help="only this function (its symbol, e.g. train:fit)")
    p.add_argument("--store", default=None, help="store directory (default: the configured one)")
    p.set_defaults(func=run_export)


def _store_root(arg: Optional[str]) -> Path:
    from .. import config

    return Path(arg) if arg else config.store_path()


def run_ui(args: argparse.Namespace) -> int:
    from .server import DashboardServer

    root = _store_root(args.store)
    if not (root / "index.sqlite").exists():
        print(f"memolab ui: no store at {root} (nothing memoized yet, or set MEMOLAB_STORE / --store)", file=sys.stderr)
        return 2
    srv = DashboardServer(root, args.port)
    print(f"memolab dashboard for {root}: {srv.url}  (Ctrl-C to stop)", flush=True)
    if not args.no_browser:
        import webbrowser

        webbrowser.open(srv.url)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


def run_export(args: argparse.Namespace) -> int:
    from ..store import get_store
    from ..tracking import query, tb_export

    root = _store_root(args.store)
    if not (root / "index.sqlite").exists():
        print(f"memolab export-tb: no store at {root}", file=sys.stderr)
        return 2
    index = get_store(root).index
    if args.func is not None and args.func not in {f["fn"] for f in query.functions(index)}:
        known = ", ".join(f["fn"] for f in query.functions(index)) or "none"
        print(f"memolab export-tb: no function {args.func!r} in {root} (known: {known})", file=sys.stderr)
        return 2
    dirs = tb_export.export(index, Path(args.dir), args.func)
    print(f"wrote {len(dirs)} run(s) under {args.dir}; view with: tensorboard --logdir {args.dir}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Standalone entry (until wired into ``memolab.cli``): ``python -m memolab.ui.cli ui|export-tb ...``."""
    ap = argparse.ArgumentParser(prog="memolab")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_ui_parser(sub)
    add_export_parser(sub)
    args = ap.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
