"""PyTorch objects: memolab vs peers, side by side, one run.

One function per row group (``ROWS``); each returns a titled table. Add a row
group by writing a function and appending it to ``ROWS``.

1. ``row_model_adam``: hashing a ~25M-parameter model + its Adam state
   (~300 MB of tensors): memolab ``hash_value``, ``joblib.hash``,
   ``torch.save`` to BytesIO + xxh3 of the bytes, and raw xxh3 over the same
   tensor bytes (one thread: the practical limit). Target: memolab >= 70% of raw.
2. ``row_repeat_key``: the key of a memoized ~500 MB dataset and a loader over
   it, passed again and again to memoized functions (``hash_arguments``): in
   the process that computed it, in a process that loaded it from the store,
   and with the identity cache off (what every call would cost without it).
   Target: < 50 µs.
3. ``row_repeat_state``: the key of ~100 MB of model state passed again and
   again, unchanged: a module (and its Adam state), a ``state_dict()`` of it, and
   a module whose ``state_dict()`` was held before anything was hashed (aliases
   of its parameters: rehashed, docs/torch.md "Identity caches"), and the
   identity cache off. Run it on the code before and after a change to the
   identity rules.
4. ``row_hooks``: a memoized call's hit on a small MLP without hooks, with a
   forward hook on the model, with one on each layer, with a process-wide hook
   registered; and the key of the same model scripted (TorchScript archive).

Rounds are interleaved (every variant once per round), and each cell is the
median with the min–max spread.

    python benchmarks/torch_objects.py [--rounds 7] [--mib 500] [--params 25]

The machine is usually shared: quote ratios, and the load average printed.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
warnings.simplefilter("ignore")

import torch  # noqa: E402
import xxhash  # noqa: E402

import memolab  # noqa: E402
from memolab import hashing  # noqa: E402
from memolab.hashing import identity  # noqa: E402

Table = tuple[str, Sequence[str], list[Sequence[str]]]


# -- measuring ----------------------------------------------------------------------------

def interleaved(variants: dict[str, Callable[[], object]], rounds: int, inner: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each variant; every round runs every variant once (``inner`` calls)."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn()  # warm up (lazy registration, page faults)
    for _ in range(rounds):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out[k].append((time.perf_counter() - t0) / inner)
    return out


def cell(samples: list[float], scale: float, fmt: str = "{:.1f}") -> str:
    med = statistics.median(samples) * scale
    return f"{fmt.format(med)} ({fmt.format(min(samples) * scale)}–{fmt.format(max(samples) * scale)})"


def render(table: Table) -> str:
    title, header, rows = table
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# -- 1. a 25M-parameter model + Adam ---------------------------------------------------------

def build_model(params_m: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    width = 2048
    layers = max(1, round(params_m * 1e6 / (width * width + width)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def _tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = [p.detach() for p in model.parameters()]
    for st in opt.state.values():
        out += [v for v in st.values() if isinstance(v, torch.Tensor)]
    return out


def row_model_adam(args: argparse.Namespace) -> Table:
    model, opt = build_model(args.params)
    tensors = _tensors(model, opt)
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    nparams = sum(p.numel() for p in model.parameters())
    from memolab.torch.tensors import raw_bytes

    def raw():
        h = xxhash.xxh3_128()
        for t in tensors:
            h.update(raw_bytes(t.contiguous()))
        return h.digest()

    def torch_save():
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
        return xxhash.xxh3_128(buf.getbuffer()).digest()

    variants = {
        "raw xxh3_128 over the tensor bytes, 1 thread (limit)": raw,
        "**memolab** hash_value((model, opt))": lambda: hashing.hash_value((model, opt)),
        "torch.save → BytesIO + xxh3_128": torch_save,
    }
    try:
        import joblib

        # joblib.hash((model, opt)) raises (it sorts the Adam state's tensor keys): hash the state dicts
        variants["joblib.hash(state dicts)"] = lambda: joblib.hash((model.state_dict(), opt.state_dict()))
    except ImportError:
        pass
    res = interleaved(variants, args.rounds)
    limit = statistics.median(res[next(iter(variants))])
    rows = []
    for k, s in res.items():
        med = statistics.median(s)
        rows.append((k, cell(s, 1e3), f"{nbytes / med / 2**30:.2f}", f"{limit / med:.2f}"))
    title = (f"Hashing a {nparams / 1e6:.1f}M-parameter model + Adam state ({nbytes / 2**20:.0f} MiB of tensors); "
             f"ms median (min–max) over {args.rounds} interleaved rounds")
    return title, ("hasher", "ms", "GiB/s", "vs raw xxh3"), rows


# -- 2. repeat key of a memoized dataset and loader ------------------------------------------

@memolab.memo
def load_dataset(mib: int):
    rows = mib * 2**20 // (4 * 256)  # float32 rows of 256 features, plus an int64 label per row
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.rand(rows, 256, generator=g),
                                          torch.randint(0, 10, (rows,), generator=g))


@memolab.memo
def make_loader(ds, batch_size: int):
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True,
                                       generator=torch.Generator().manual_seed(0))


def _repeat_key_variants(mib: int) -> dict[str, Callable[[], object]]:
    ds = load_dataset(mib)
    dl = make_loader(ds, 256)
    return {"dataset": lambda: hashing.hash_arguments([("ds", ds)]),
            "loader": lambda: hashing.hash_arguments([("dl", dl)])}


def _child_load(args: argparse.Namespace) -> None:
    """Run in a fresh process: load the results from the store (timed), then time their keys."""
    memolab.configure(store=args.store)
    t0 = time.perf_counter()
    variants = _repeat_key_variants(args.mib)
    load_s = time.perf_counter() - t0
    res = interleaved(variants, args.rounds, inner=3)
    res["load"] = [load_s]
    print(json.dumps(res))


def _run_child(args: argparse.Namespace, store: str, env: dict[str, str]) -> dict[str, list[float]]:
    cp = subprocess.run([sys.executable, __file__, "--child-load", "--store", store, "--mib", str(args.mib),
                         "--rounds", str(args.rounds)], capture_output=True, text=True, timeout=900,
                        env=dict(os.environ, **env))
    if cp.returncode != 0:
        raise SystemExit(cp.stderr)
    return json.loads(cp.stdout.strip().splitlines()[-1])


def row_repeat_key(args: argparse.Namespace) -> Table:
    with tempfile.TemporaryDirectory() as store:
        memolab.configure(store=store)
        variants = _repeat_key_variants(args.mib)  # computed here: a miss, stored
        here = interleaved(variants, args.rounds, inner=3)
        identity.enabled = False
        off = interleaved(variants, args.rounds)
        identity.enabled = True
        loaded = _run_child(args, store, {})
    rows = []
    for what in ("dataset", "loader"):
        rows.append((f"memoized {what}, in the process that computed it", cell(here[what], 1e6), "–"))
        rows.append((f"memoized {what}, in a process that loaded it from the store", cell(loaded[what], 1e6),
                     f"{loaded['load'][0] * 1e3:.0f}" if what == "dataset" else "–"))
        rows.append((f"memoized {what}, identity cache off (full rehash)", cell(off[what], 1e6), "–"))
    title = (f"Repeat key of a memoized {args.mib} MiB TensorDataset and a DataLoader over it "
             f"(hash_arguments), µs median (min–max) over {args.rounds} interleaved rounds; "
             "first load (both hits) in a fresh process, ms")
    return title, ("argument", "key, µs", "first load, ms"), rows


# -- 3. repeat key of unchanged model state ---------------------------------------------------

def row_repeat_state(args: argparse.Namespace) -> Table:
    model, opt = build_model(args.state_mb / 4)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    hashing.hash_arguments([("m", model), ("opt", opt)])  # the module and its optimizer first: their storages proven
    sd = model.state_dict()  # made afterwards: its aliases share that proof
    held, _ = build_model(args.state_mb / 4)
    held_sd = held.state_dict()  # aliases held before anything was hashed: neither is provable

    def off(x):
        identity.enabled = False
        try:
            return hashing.hash_arguments([("x", x)])
        finally:
            identity.enabled = True

    variants = {
        "a module": lambda: hashing.hash_arguments([("m", model)]),
        "a module + its Adam state": lambda: hashing.hash_arguments([("m", model), ("opt", opt)]),
        "its state_dict(), made after the module was hashed": lambda: hashing.hash_arguments([("sd", sd)]),
        "a state_dict() made before anything was hashed": lambda: hashing.hash_arguments([("sd", held_sd)]),
        "its module (a state_dict() of it held since before)": lambda: hashing.hash_arguments([("m", held)]),
        "a module, identity cache off (full rehash)": lambda: off(model),
    }
    res = interleaved(variants, args.rounds, inner=3)
    rows = [(k, cell(s, 1e6)) for k, s in res.items()]
    title = (f"Repeat key of unchanged model state, {nbytes / 2**20:.0f} MiB of parameters (hash_arguments), "
             f"µs median (min–max) over {args.rounds} interleaved rounds")
    return title, ("argument", "key, µs"), rows


# -- 4. a hit with module hooks -----------------------------------------------------------------

STEER = torch.zeros(256)


@memolab.memo
def _predict(model, x):
    return model(x)


def row_hooks(args: argparse.Namespace) -> Table:
    """A memoized call's hit (in this process's memory) on a 12-layer MLP, without hooks, with a
    steering hook on the model, with one on every layer, with a process-wide hook; and the key
    of the same model scripted with TorchScript (hashed by its saved archive)."""
    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(12)])

    x = torch.ones(1, 256)
    plain, top, every = mlp(), mlp(), mlp()
    top.register_forward_hook(lambda m, i, o: o + STEER)
    for layer in every:
        layer.register_forward_hook(lambda m, i, o: o + STEER)
    scripted = torch.jit.script(mlp())
    with tempfile.TemporaryDirectory() as store:
        memolab.configure(store=store)
        variants: dict[str, Callable[[], object]] = {
            "no hooks": lambda: _predict(plain, x),
            "a forward hook on the model": lambda: _predict(top, x),
            "a forward hook on each of 12 layers": lambda: _predict(every, x),
        }
        res = interleaved(variants, args.rounds, inner=20)
        handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)
        try:
            res.update(interleaved({"no hooks, a process-wide hook registered": lambda: _predict(plain, x)},
                                   args.rounds, inner=20))
        finally:
            handle.remove()
        res.update(interleaved({"key of the model (hash_arguments)": lambda: hashing.hash_arguments([("m", plain)]),
                                "key of it scripted (torch.jit.script)":
                                    lambda: hashing.hash_arguments([("m", scripted)])}, args.rounds, inner=5))
    base = statistics.median(res["no hooks"])
    rows = [(k, cell(s, 1e6), f"{statistics.median(s) / base:.2f}" if "key of" not in k else "–")
            for k, s in res.items()]
    title = (f"A memoized call's hit with module hooks (12 × Linear(256, 256), 0.8M parameters), "
             f"µs median (min–max) over {args.rounds} interleaved rounds")
    return title, ("call", "µs", "vs no hooks"), rows


#: the row groups, in print order; add yours here
ROWS: list[Callable[[argparse.Namespace], Table]] = [row_model_adam, row_repeat_key, row_repeat_state, row_hooks]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--mib", type=int, default=500, help="size of the memoized dataset")
    ap.add_argument("--params", type=float, default=25, help="model size in millions of parameters")
    ap.add_argument("--state-mb", type=float, default=100, help="parameter size of row_repeat_state, in MB")
    ap.add_argument("--only", default="", help="comma-separated row functions to run")
    ap.add_argument("--child-load", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_load:
        _child_load(args)
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# memolab torch objects benchmark: torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores, load average {load:.1f}, hash threads {hashing.hash_threads()}\n")
    only = {s for s in args.only.split(",") if s}
    for row in ROWS:
        if only and row.__name__ not in only:
            continue
        print(render(row(args)))
        print()


if __name__ == "__main__":
    main()
