"""``memolab ui`` and ``memolab export-tb``, registered into ``memolab.cli``'s command table.

``memolab.cli.build_parser`` imports this module; nothing here runs at ``import memolab``.
The store is the global ``memolab --store DIR`` option (default: the configured one).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli.common import command, options
from ..errors import swallowed


def _ui_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1); any other, e.g. 0.0.0.0 on a remote GPU box, "
                        "requires a random access token on every request (printed in the URL)")
    p.add_argument("--no-browser", action="store_true", help="do not open a web browser")


@command("ui", "serve the dashboard (logs, charts, hparams, code diffs) on 127.0.0.1")
@options(_ui_options)
def cmd_ui(args: argparse.Namespace) -> int:
    """Serve first, then say where (the URL, with its token, is the first line), then open a
    browser only where a graphical one can show (``ui.browser``), in a thread of its own."""
    import threading

    from ..cli.common import open_store
    from . import browser
    from .server import DashboardServer, is_loopback

    root = open_store(args).root  # never creates a store
    try:
        srv = DashboardServer(root, args.port, args.host)
    except OSError as e:
        print(f"memolab ui: cannot listen on {args.host}:{args.port}: {e.strerror or e} (try --port 0)", file=sys.stderr)
        return 1
    serving = threading.Thread(target=srv.serve_forever, name="memolab-ui", daemon=True)
    serving.start()
    print(f"memolab dashboard for {root}: {srv.url}  (Ctrl-C to stop)", flush=True)
    if not is_loopback(args.host):
        print(f"memolab ui: WARNING: listening on {args.host}, reachable from other machines. The store's code, "
              "arguments and logs are served to anyone with the token in the URL above; prefer an SSH tunnel "
              "(ssh -L 8765:127.0.0.1:8765 box) and the default 127.0.0.1.", file=sys.stderr, flush=True)
    if not args.no_browser:
        chosen, why = browser.choose()
        if chosen is None:
            import socket

            port = srv.server_address[1]
            print(f"(no browser opened: {why}; open the URL above" + (
                f", from another machine through ssh -L {port}:127.0.0.1:{port} {socket.gethostname()}"
                if is_loopback(args.host) else "") + ")", flush=True)
        else:
            threading.Thread(target=_open, args=(chosen, srv.url), name="memolab-ui-browser", daemon=True).start()
    try:
        while serving.is_alive():
            serving.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        srv.shutdown()
        srv.server_close()
    return 0


def _open(controller: object, url: str) -> None:
    try:
        controller.open(url)  # type: ignore[attr-defined]
    except Exception:  # webbrowser's controllers (any browser, any platform): the URL is printed
        swallowed("ui.cli: _open")


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="output directory; then: tensorboard --logdir DIR")
    p.add_argument("func", nargs="?", default=None, help="only this function (full symbol, e.g. train:fit)")


@command("export-tb", "write logged runs as TensorBoard event files (one run directory per evaluation)")
@options(_export_options)
def cmd_export_tb(args: argparse.Namespace) -> int:
    from ..cli.common import PROBLEM, CliError, Progress, open_store, resolve_function
    from ..cli.ids import split_script
    from ..tracking import tb_export

    store = open_store(args)  # never creates one: a typo in --store is an error, not an empty export
    name, script = split_script(store, args.func) if args.func is not None else (None, None)  # a.py:train
    fn = resolve_function(store, name) if name is not None else None
    out = Path(args.dir)
    if out.exists() and not out.is_dir():
        raise CliError(PROBLEM, f"export-tb: {out} is a file, not a directory: give a directory (made if missing), "
                                "e.g. tb-logs")
    try:
        with Progress("exporting runs", tb_export.count_runs(store.index, fn, script)) as bar:
            result = tb_export.export(store.index, out, fn, progress=bar.update, script=script)
    except (FileExistsError, NotADirectoryError, PermissionError, IsADirectoryError) as e:
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        raise CliError(PROBLEM, f"export-tb: cannot write the export under {out}: {e.strerror or e}{where}") from None
    removed = f"; removed {len(result.removed)} stale run director{'y' if len(result.removed) == 1 else 'ies'}" \
        if result.removed else ""
    print(f"wrote {len(result)} run(s) under {args.dir}{removed}; view them with: tensorboard --logdir {args.dir}")
    others = sorted({Path(d).parent.name for d in result} - {result.experiment}, key=lambda f: (f.startswith("_"), f))
    if result.experiment and others:
        # TensorBoard compares one experiment per logdir (tracking/tb_export.experiment_function)
        print(f"HParams compares {result.experiment}'s runs; for another function: "
              f"tensorboard --logdir {Path(args.dir) / others[0]}")
    return 0
