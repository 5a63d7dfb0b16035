"""``memolab ui`` and ``memolab export-tb``, registered into ``memolab.cli``'s command table.

``memolab.cli.build_parser`` imports this module; nothing here runs at ``import memolab``.
The store is the global ``memolab --store DIR`` option (default: the configured one).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import config
from ..cli import command, options


def _root(args: argparse.Namespace) -> Path:
    return Path(args.store) if getattr(args, "store", None) else config.store_path()


def _ui_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765; 0 = any free port)")
    p.add_argument("--no-browser", action="store_true", help="do not open a web browser")


@command("ui", "serve the dashboard (logs, charts, hparams, code diffs) on 127.0.0.1")
@options(_ui_options)
def cmd_ui(args: argparse.Namespace) -> int:
    from .server import DashboardServer

    root = _root(args)
    if not (root / "index.sqlite").exists():
        print(f"memolab ui: no store at {root} (nothing memoized yet? set MEMOLAB_STORE or --store)", file=sys.stderr)
        return 2
    try:
        srv = DashboardServer(root, args.port)
    except OSError as e:
        print(f"memolab ui: cannot listen on 127.0.0.1:{args.port}: {e.strerror or e} (try --port 0)", file=sys.stderr)
        return 2
    print(f"memolab dashboard for {root}: {srv.url}  (Ctrl-C to stop)", flush=True)
    if not args.no_browser:
        import webbrowser

        webbrowser.open(srv.url)
    try:
        srv.serve_forever()
    finally:
        srv.server_close()
    return 0


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="output directory; then: tensorboard --logdir DIR")
    p.add_argument("func", nargs="?", default=None, help="only this function (full symbol, e.g. train:fit)")


@command("export-tb", "write logged runs as TensorBoard event files (one run directory per evaluation)")
@options(_export_options)
def cmd_export_tb(args: argparse.Namespace) -> int:
    from ..store import get_store
    from ..tracking import query, tb_export

    root = _root(args)
    if not (root / "index.sqlite").exists():
        print(f"memolab export-tb: no store at {root}", file=sys.stderr)
        return 2
    index = get_store(root).index
    if args.func is not None:
        known = [f["fn"] for f in query.functions(index)]
        if args.func not in known:
            print(f"memolab export-tb: no function {args.func!r} in {root} (known: {', '.join(known) or 'none'})",
                  file=sys.stderr)
            return 2
    dirs = tb_export.export(index, Path(args.dir), args.func)
    print(f"wrote {len(dirs)} run(s) under {args.dir}; view them with: tensorboard --logdir {args.dir}")
    return 0
