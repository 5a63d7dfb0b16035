"""The store as it grows: hit, miss, `ls` and `gc --dry-run` at 1 to 1M entries, and 8 processes hitting at once.

Per store size (``--sizes``, default 1, 10k, 100k, 1M stored evaluations of the
benchmarked function; all but one are synthetic rows inserted directly, with
real inline payloads, as the issue allows):

* **hit read from the store**: ``f(0)`` with this process's in-memory copies
  dropped before each call, so every hit looks the key up in the index and
  loads the result (a small int, stored inline); the median of the child's
  ``--hits`` hits, and (a second table) the fastest median of 5 consecutive
  blocks of them: this shared machine's CPU speed swings about 1.7x in blocks of
  seconds (a pure-Python loop alone does), so the median over all hits depends
  on which speed a child ran at, the best block much less;
* **miss with a small result**: ``f(new x)``: lease, miss explanation (nearest
  stored evaluation), pickling, record, run bookkeeping; the median of the
  child's ``--misses`` misses, and in the second table the fastest median of 5
  blocks of them, as for hits; a third table gives their mean, which a rare
  slow miss moves and a median does not;
* **`memolab ls`** and **`memolab gc --dry-run`**: a fresh ``python -m memolab``
  process each, wall time including interpreter start-up.

joblib.Memory does the same hits and misses at ``--joblib-sizes`` (default 1
and 10k; a million joblib entries are a million directories), in its own child
processes and, in a third table, in one process with memolab, the two
alternating blocks of calls (20 hits or 5 misses), so that both run at the
same machine speed: its ratios are medians over block pairs. Within a round the
libraries run back to back (interleaved); figures are the median over
``--rounds`` rounds of each round's median, spread (min–max over rounds) in
brackets. Each fill is written back to disk (``os.sync()``, untimed) before the
measurements on it. Then ``--procs`` processes × ``--proc-hits`` hits on 50 keys, all
read from the store, started together: total hits per second, same for joblib.

``--inline-sweep`` measures the inline threshold instead: miss and
hit-from-store cost of a result of 1 KiB … 256 KiB stored inline vs in a blob
file (what ``memolab.store.local.INLINE_MAX`` is chosen from).

    python benchmarks/store_scaling.py [--sizes 1,10000,100000,1000000] [--rounds 3]
    python benchmarks/store_scaling.py --inline-sweep
    python benchmarks/store_scaling.py --reads --sizes 1000,100000,1000000 [--doctor-max 100000] [--keep DIR]
                                       [--hits 1000] [--misses 300] [--rounds 3]
    python benchmarks/store_scaling.py --miss-tail --keep DIR --sizes 1000,1000000 [--misses 300] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, statistics, sys, time, warnings
warnings.simplefilter("ignore")
lib, mode, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
arg = json.loads(sys.argv[4])
os.chdir(workdir)
if lib == "memolab":
    from memolab import memo, configure
    configure(store=os.path.join(workdir, "store"))
    deco = memo
elif lib == "paired":  # both libraries wrap the same f below (its source lines included)
    from memolab import memo, configure
    from joblib import Memory
    configure(store=os.path.join(workdir, "store"))
    deco = lambda fn: fn
else:
    from joblib import Memory
    deco = Memory(os.path.join(workdir, "joblib"), verbose=0).cache

@deco
def f(x):
    return x + 1

def forget():
    pass

def store_hits(n, cpu=None, lost=None):
    # the seconds of n hits of f(0), each read from the store (this process's copy dropped); with
    # cpu and lost, each hit's own CPU time too and whether it lost the CPU midway (an involuntary
    # context switch: on a loaded machine another job's time slice, ~4 ms, lands inside that hit)
    import resource
    f(0)
    out = []
    for _ in range(n):
        forget()
        r = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
        c = time.thread_time()
        t = time.perf_counter()
        f(0)
        out.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.thread_time() - c)
            lost.append(resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - r)
    return out

if lib in ("memolab", "paired"):
    from memolab.store import get_store
    forget = get_store().forget

def fill_memolab(n):
    # n - 1 synthetic evaluations of f with other arguments, then one real one (x = 0). Written in
    # SQL from one real row (a recursive CTE: a million rows in seconds, not minutes of Python); the
    # rows carry the real row's inline payload (the result 1) under their own argument digests
    from memolab.store import get_store
    f(-1)
    store = get_store()
    now = time.time()
    with store.index.write() as c:
        c.execute(
            "WITH RECURSIVE seq(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM seq WHERE i < ?) "
            "INSERT INTO evaluations(fn, code, args, schema, status, payload, payload_size, buffers, size, started, "
            "finished, duration, host, python, versions, snapshot, code_refs, inline) "
            "SELECT e.fn, e.code, printf('%032x', i), e.schema, 'done', e.payload, e.payload_size, e.buffers, e.size, "
            "? - i, ? - i, 0.001, 'bench', e.python, e.versions, "
            "json_set(e.snapshot, '$.args.x', json_array(printf('%032x', i), CAST(-i AS TEXT))), e.code_refs, e.inline "
            "FROM seq, (SELECT * FROM evaluations WHERE status = 'done' ORDER BY id LIMIT 1) e",
            (n - 1, now, now))
    f(0)

def add_runs():
    # a run (with a final metric) per synthetic evaluation, as real calls record them (--reads)
    with get_store().index.write() as c:
        c.execute("INSERT INTO runs(id, fn, code, args, schema, started, finished, updated, status, hparams, "
                  "eval_id, host) SELECT id + 1099511627776, fn, code, args, schema, started, finished, finished, "
                  "'done', json_object('x', -id), id, 'bench' FROM evaluations e "
                  "WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.eval_id = e.id)")
        c.execute("INSERT INTO scalar_tags(run, tag, n, last_step, last_value, last_wall, first_step, ordered) "
                  "SELECT id, 'val/loss', 1, 0, eval_id * 1e-6, finished, 0, 1 FROM runs WHERE id > 1099511627776")

if mode == "fill":
    n = arg["n"]
    if lib == "memolab":
        fill_memolab(n)
        if arg.get("runs"):
            add_runs()
    else:
        for x in range(1 - n, 1):
            f(x)
    for x in range(1, 51):  # the keys the multi-process hits read
        f(x)
    print(json.dumps({}))
elif mode == "measure":
    hits = store_hits(arg["hits"])
    if lib == "memolab":
        last = get_store().index.conn().execute("SELECT MAX(id) FROM evaluations").fetchone()[0]
    base = 10**9 + arg["round"] * 10**6
    f(base - 1)  # untimed: a process's first miss imports what misses use (both libraries)
    misses = []
    for i in range(arg["misses"]):
        t = time.perf_counter()
        f(base + i)
        misses.append(time.perf_counter() - t)
    if lib == "memolab":  # keep the store at its size for the next round
        store = get_store()
        store.flush_hits()
        with store.index.write() as c:
            c.execute("DELETE FROM evaluations WHERE id > ?", (last,))
    # the fastest block of hits too: this shared machine's CPU speed swings 1.7x in blocks
    # of seconds (a pure-Python loop alone does), which the median over all hits mixes in
    def fastest(ts):
        k = max(1, len(ts) // 5)
        return min(statistics.median(ts[i:i + k]) for i in range(0, len(ts) - k + 1, k))
    print(json.dumps({"hit": statistics.median(hits), "hit_best": fastest(hits), "miss": statistics.median(misses),
                      "miss_best": fastest(misses), "miss_mean": statistics.mean(misses)}))
elif mode == "calls":
    # --reads: every hit's and every miss's time (the median and the tail: p99), then the store
    # put back at its size (the misses' evaluations and the runs they recorded deleted; the
    # kept counts follow by their triggers)
    t_start = time.time()
    cpu, lost = [], []
    hits = store_hits(arg["hits"], cpu, lost)
    last = get_store().index.conn().execute("SELECT MAX(id) FROM evaluations").fetchone()[0]
    base = 4 * 10**9 + arg["round"] * 10**6
    f(base - 1)  # untimed: a process's first miss imports what misses use
    misses = []
    for i in range(arg["misses"]):
        t = time.perf_counter()
        f(base + i)
        misses.append(time.perf_counter() - t)
    store = get_store()
    store.flush_hits()
    with store.index.write() as c:
        c.execute("DELETE FROM runs WHERE eval_id > ? OR (started >= ? AND host <> 'bench')", (last, t_start))
        c.execute("DELETE FROM evaluations WHERE id > ?", (last,))
    def q(ts, p):
        ts = sorted(ts)
        return ts[min(len(ts) - 1, int(p * len(ts)))]
    kept = [t for t, k in zip(hits, lost, strict=True) if not k]
    print(json.dumps({"hit": statistics.median(hits), "hit_p99": q(hits, 0.99), "hit_p99_kept": q(kept, 0.99),
                      "hit_cpu_p99": q(cpu, 0.99), "hit_lost": sum(1 for k in lost if k),
                      "miss": statistics.median(misses), "miss_p99": q(misses, 0.99)}))
elif mode == "paired":
    # Both libraries in one process, alternating blocks of calls: a pair of blocks
    # lasts milliseconds, so both run at the machine's same speed (it swings 1.7x in
    # blocks of seconds). Ratios are memolab's block median over joblib's next to it.
    libs = {"memolab": memo(f), "joblib": Memory(os.path.join(workdir, "joblib"), verbose=0).cache(f)}
    for g in libs.values():
        g(0), g(0)
    last = get_store().index.conn().execute("SELECT MAX(id) FROM evaluations").fetchone()[0]
    base = 2 * 10**9 + arg["round"] * 10**6  # keys no other child computed
    out = {}
    for what, block, n_blocks in (("hit", 20, arg["hits"] // 20), ("miss", 5, arg["misses"] // 5)):
        meds = {"memolab": [], "joblib": []}
        for b in range(n_blocks):
            for name in (("memolab", "joblib") if b % 2 == 0 else ("joblib", "memolab")):
                g, ts = libs[name], []
                for i in range(block):
                    x = 0 if what == "hit" else base + b * block + i
                    forget()
                    t = time.perf_counter()
                    g(x)
                    ts.append(time.perf_counter() - t)
                meds[name].append(statistics.median(ts))
        out[what] = {name: statistics.median(v) for name, v in meds.items()}
        out[what]["ratio"] = statistics.median(m / j for m, j in zip(meds["memolab"], meds["joblib"]))
    store = get_store()
    store.flush_hits()
    with store.index.write() as c:
        c.execute("DELETE FROM evaluations WHERE id > ?", (last,))
    print(json.dumps(out))
elif mode == "tail":
    # --miss-tail: every miss's time (not a median: the tail is the question), with SQLite's
    # automatic WAL checkpoint as memolab leaves it or turned off on this process's connection;
    # then one explicit checkpoint of what the misses wrote, timed (what an automatic one costs)
    from memolab.store import get_store
    f(0)
    base = 3 * 10**9 + arg["round"] * 10**7 + (0 if arg["auto"] else 10**6)
    f(base - 1)  # untimed: a process's first miss imports what misses use
    conn = get_store().index.conn()
    if not arg["auto"]:
        conn.execute("PRAGMA wal_autocheckpoint=0")
    wal = os.path.join(workdir, "store", "index.sqlite-wal")
    ts, sizes = [], []
    for i in range(arg["misses"]):
        t = time.perf_counter()
        f(base + i)
        ts.append(time.perf_counter() - t)
        sizes.append(os.path.getsize(wal) if os.path.exists(wal) else 0)
    t = time.perf_counter()
    ck = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    ck_s = time.perf_counter() - t
    if not arg["auto"]:
        conn.execute("PRAGMA wal_autocheckpoint=1000")
    ts.sort()
    q = lambda p: ts[min(len(ts) - 1, int(p * len(ts)))]
    print(json.dumps({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": ts[-1], "wal_max": max(sizes),
                      "checkpoint_s": ck_s, "checkpoint_pages": ck[2]}))
elif mode == "procs":
    f(1)
    while time.time() < arg["start"]:
        time.sleep(0.001)
    t0 = time.time()
    for i in range(arg["hits"]):
        forget()
        f(1 + i % 50)
    print(json.dumps({"t0": t0, "t1": time.time()}))
elif mode == "sweep":
    import memolab.store.local as ms
    out = {}
    for size in arg["sizes"]:
        value = os.urandom(size)  # bytes pickle in-band: the whole result is the payload
        for how, limit in (("inline", 1 << 30), ("blob", 0)):
            ms.INLINE_MAX = limit
            @memo
            def g(i, size=size, how=how):
                return value[:-8] + i.to_bytes(8, "little")  # distinct bytes: no blob is deduplicated
            miss, hit = [], []
            for i in range(arg["n"]):
                t = time.perf_counter(); g(i); miss.append(time.perf_counter() - t)
            for i in range(arg["n"]):
                forget()
                t = time.perf_counter(); g(i); hit.append(time.perf_counter() - t)
            out[f"{size}:{how}"] = [statistics.median(miss), statistics.median(hit)]
    print(json.dumps(out))
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def child(workdir: str, lib: str, mode: str, arg: dict, wait: bool = True):
    script = os.path.join(workdir, "..", "child.py")
    # --keep: the stores' folder is not the run's temporary one, and its child.py may be an older one
    if not os.path.exists(script) or open(script).read() != CHILD:
        open(script, "w").write(CHILD)
    cmd = [sys.executable, script, lib, mode, workdir, json.dumps(arg)]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=7200)
    if cp.returncode != 0:
        raise RuntimeError(f"{lib} {mode}: {cp.stderr.strip()[-2000:]}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def cli_time(workdir: str, *args: str) -> float:
    e = env()
    e["MEMOLAB_STORE"] = os.path.join(workdir, "store")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "memolab", *args], capture_output=True, text=True, env=e, check=True)
    return time.perf_counter() - t


READS = r"""
import json, os, sys, time, urllib.request
from memolab.ui.server import serve_in_thread
srv, _ = serve_in_thread(os.environ["MEMOLAB_STORE"])
fn = "__main__%3Af"
def get(path):
    req = urllib.request.Request(srv.link("api/" + path).split("?token=")[0].split("&token=")[0],
                                 headers={"Authorization": "Bearer " + srv.token})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return r.read()
def first_load(rows):  # the page's requests on arrival at f, its runs window `rows` long: (seconds, bytes)
    t = time.perf_counter()
    sent = 0
    for path in ("info", "heartbeat", "ids", "functions", f"runs?fn={fn}&limit={rows}"):
        body = get(path)
        sent += len(body)
    ids = [r["id"] for r in json.loads(body)["rows"] if isinstance(r["id"], int)][:1000]
    sent += len(get(f"metrics?fn={fn}&runs=" + ",".join(map(str, ids))))
    return time.perf_counter() - t, sent
# what the page asks now: the rows a 1000-px screen shows and a margin (app.js screenRows: 56);
# before: a fixed window of 2,000
first, sent = first_load(56)
window, window_bytes = first_load(2000)
t = time.perf_counter()
get(f"best?fn={fn}&tag=val%2Floss&dir=min")
best = time.perf_counter() - t
# the first request by an argument indexes the runs written since (tracking/argindex.py): timed apart
t = time.perf_counter()
get(f"runs?fn={fn}&limit=1&sort=a%3Ax")
indexing = time.perf_counter() - t
t = time.perf_counter()
groups = len(get(f"groups?fn={fn}&by=x&tag=val%2Floss"))
grouped = time.perf_counter() - t
t = time.perf_counter()
get(f"runs?fn={fn}&limit=56&sort=a%3Ax&dir=desc")
by_arg = time.perf_counter() - t
t = time.perf_counter()
hp = len(get(f"hparams?fn={fn}&limit=2000"))
print(json.dumps({"first": first, "bytes": sent, "hparams": time.perf_counter() - t, "hparams_bytes": hp,
                  "window": window, "window_bytes": window_bytes, "best": best, "groups": grouped,
                  "groups_bytes": groups, "indexing": indexing, "by_arg": by_arg}))
"""


#: --reads: the rows of its table (issue 52 §1's), each a measurement's key and what it is
READ_ROWS = [
    ("hit", "hit read from the store, trivial (median of the child's hits)"),
    ("hit_p99", "hit read from the store, p99"),
    ("hit_p99_kept", "hit read from the store, p99 of the hits that kept the CPU throughout"),
    ("hit_cpu_p99", "hit read from the store, p99 of each hit's own CPU time"),
    ("hit_lost", "hits that lost the CPU midway (another job's time slice inside them), of the child's hits"),
    ("miss", "miss, small result (median of the child's misses)"),
    ("miss_p99", "miss, small result, p99"),
    ("ls", "`memolab ls`"),
    ("ls f", "`memolab ls f` (prints the newest 50)"),
    ("show", "`memolab show ID` (one evaluation with its run)"),
    ("runs", "`memolab runs f --limit 20`"),
    ("gc", "`memolab gc --older-than 30d --dry-run`"),
    ("gc real", "`memolab gc --older-than 30d` (real; nothing is that old: the decision, no deletion)"),
    ("doctor", "`memolab doctor`"),
    ("first", "dashboard first load (its 6 API requests, a 1000-px screen of runs)"),
    ("bytes", "dashboard first load, bytes sent"),
    ("hparams", "dashboard HParams tab (`api/hparams?limit=2000`)"),
    ("window", "dashboard first load with the old fixed window of 2,000 runs"),
    ("best", "dashboard best run (`api/best`)"),
    ("groups", "dashboard group statistics, a group per run (`api/groups`, 200 listed)"),
    ("by_arg", "dashboard screen of runs sorted by an argument (`api/runs?sort=a:x`, 56 rows)"),
    ("indexing", "dashboard first request by an argument (indexes the runs written since it last did)"),
]


def reads_once(args: argparse.Namespace, n: int, d: str, r: int, into: dict[str, list[float]]) -> None:
    """One round of ``--reads`` on the store of ``n`` entries in ``d``: the hits and misses, each
    command in a fresh process, the dashboard's requests (a fresh process serving them)."""
    out = child(d, "memolab", "calls", {"hits": args.hits, "misses": args.misses, "round": r})
    for k, v in out.items():
        into.setdefault(k, []).append(v)
    for name, argv in (("ls f", ["ls", "f"]), ("show", ["show", "1"]), ("runs", ["runs", "f", "--limit", "20"]),
                       ("ls", ["ls"]), ("gc", ["gc", "--older-than", "30d", "--dry-run"]),
                       ("doctor", ["doctor"] if n <= args.doctor_max else []),
                       ("gc real", ["gc", "--older-than", "30d", "--yes"])):
        if argv:
            into.setdefault(name, []).append(cli_time(d, *argv))
    e = env()
    e["MEMOLAB_STORE"] = os.path.join(d, "store")
    cp = subprocess.run([sys.executable, "-c", READS], capture_output=True, text=True, env=e, timeout=7200)
    if cp.returncode:
        raise RuntimeError(cp.stderr[-2000:])
    for k, v in json.loads(cp.stdout.strip().splitlines()[-1]).items():
        into.setdefault(k, []).append(v)


def reads(args: argparse.Namespace, root: str) -> None:
    """``--reads``: what reading costs at each size (every evaluation with a run and a final metric,
    as real calls leave them): issue 52 §1's table. A hit's and a miss's median and p99, `ls`,
    `ls FUNC`, `show ID`, `runs FUNC --limit 20`, `gc --older-than 30d` (dry run and real),
    `doctor`, and the dashboard's first load (the requests the page makes), HParams tab, best run
    and group statistics. The sizes take turns within each round (their order reversed every
    other round), so the ratio of two sizes in one round is taken at one machine speed."""
    sizes = [int(s) for s in args.sizes.split(",")]
    dirs: dict[int, str] = {}
    for n in sizes:
        d = os.path.join(args.keep or root, f"r{n}")
        t = time.perf_counter()
        if not os.path.exists(os.path.join(d, "filled")):  # --keep: a store built before is reused
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
            child(d, "memolab", "fill", {"n": n, "runs": True})
            open(os.path.join(d, "filled"), "w").close()
            print(f"<!-- filled {n:,} (with runs) in {time.perf_counter() - t:.1f} s -->", flush=True)
        else:
            print(f"<!-- {n:,}: the store --keep built before, reused -->", flush=True)
        dirs[n] = d
    os.sync()
    got: dict[int, dict[str, list[float]]] = {n: {} for n in sizes}
    for r in range(args.rounds):
        for n in (sizes if r % 2 == 0 else sizes[::-1]):
            t = time.perf_counter()
            reads_once(args, n, dirs[n], r, got[n])
            print(f"<!-- round {r + 1}/{args.rounds}, {n:,} entries: {time.perf_counter() - t:.0f} s, load average "
                  f"{os.getloadavg()[0]:.1f} -->", flush=True)
    print()
    print(f"reads at store size (issue 52 §1): every stored evaluation with a run and a final metric, as real calls "
          f"leave them; {args.rounds} rounds, the sizes taking turns within each; {args.hits} hits and {args.misses} "
          "misses a round in one process; each command a fresh process (interpreter start included); median (min–max) "
          f"over rounds; a shared 2-core machine, load average {os.getloadavg()[0]:.1f} at the end")
    print()
    print("| operation | " + " | ".join(f"{n:,} entries" for n in sizes) + " |")
    print("|" + "---|" * (len(sizes) + 1))
    for key, label in READ_ROWS:
        if key == "bytes":
            row = [f"{med(got[n][key]) / 1e3:,.0f} KB" if got[n].get(key) else "-" for n in sizes]
        elif key == "hit_lost":
            row = [f"{med(got[n][key]):g} ({min(got[n][key])}–{max(got[n][key])})" if got[n].get(key) else "-"
                   for n in sizes]
        else:
            row = [cell(got[n].get(key, [])) for n in sizes]
        print(f"| {label} | " + " | ".join(row) + " |")
    if len(sizes) > 1:
        lo = sizes[0]
        print()
        print(f"each size against {lo:,} entries: the ratio within each round (both measured in it), median (min–max) "
              "over rounds; 1.00 = as fast as the small store")
        print()
        print("| operation | " + " | ".join(f"{n:,} / {lo:,}" for n in sizes[1:]) + " |")
        print("|" + "---|" * len(sizes))
        for key, label in READ_ROWS:
            row = []
            for n in sizes[1:]:
                rs = [a / b for a, b in zip(got[n].get(key, []), got[lo].get(key, []), strict=False) if b]
                row.append(f"{statistics.median(rs):,.2f} ({min(rs):,.2f}–{max(rs):,.2f})" if rs else "-")
            print(f"| {label} | " + " | ".join(row) + " |")


def fmt(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:,.1f} µs"
    if s < 1:
        return f"{s * 1e3:,.2f} ms"
    return f"{s:,.2f} s"


def med(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def cell(vals: list[float]) -> str:
    if not vals:
        return "-"
    if len(vals) == 1:
        return fmt(vals[0])
    return f"{fmt(med(vals))} ({fmt(min(vals))}–{fmt(max(vals))})"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:,.2f}" if a and b else "-"


def scaling(args: argparse.Namespace, root: str) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    jsizes = {int(s) for s in args.joblib_sizes.split(",")} if args.joblib_sizes else set()
    print(f"store size scaling; {args.rounds} interleaved rounds, median of rounds (min–max); {args.hits} hits and "
          f"{args.misses} misses per round; a shared 2-core machine: other jobs ran meanwhile, read the spread")
    print()
    print("| stored entries | memolab hit from store | joblib hit | memolab / joblib | memolab miss, small result "
          "| joblib miss | memolab / joblib | `memolab ls` | `gc --dry-run` |")
    print("|" + "---|" * 9)
    first_miss = None
    best: list[tuple] = []
    paired: list[tuple] = []
    means: list[tuple] = []
    for n in sizes:
        d = os.path.join(root, f"n{n}")
        os.makedirs(d)
        open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
        t = time.perf_counter()
        child(d, "memolab", "fill", {"n": n})
        fill_s = time.perf_counter() - t
        libs = ["memolab"] + (["joblib"] if n in jsizes else [])
        if "joblib" in libs:
            child(d, "joblib", "fill", {"n": n})
        # untimed: write the fill back to disk before measuring. The 1M fill leaves about
        # 0.5 GB of dirty pages; right after it, hits ran 2x slower on these 2 cores, on a
        # 1-entry store in the same process too (the write-back competing for the CPU)
        os.sync()
        res: dict[str, dict[str, list[float]]] = {lib: {"hit": [], "hit_best": [], "miss": [], "miss_best": [],
                                                        "miss_mean": []} for lib in libs}
        ls, gc = [], []
        pair: list[dict] = []
        for r in range(args.rounds):
            for lib in libs:
                out = child(d, lib, "measure", {"hits": args.hits, "misses": args.misses, "round": r})
                res[lib]["hit"].append(out["hit"])
                res[lib]["hit_best"].append(out["hit_best"])
                res[lib]["miss"].append(out["miss"])
                res[lib]["miss_best"].append(out["miss_best"])
                res[lib]["miss_mean"].append(out["miss_mean"])
            if "joblib" in libs:
                pair.append(child(d, "paired", "paired", {"hits": args.hits, "misses": args.misses, "round": r}))
            ls.append(cli_time(d, "ls"))
            gc.append(cli_time(d, "gc", "--dry-run"))
        m, j = res["memolab"], res.get("joblib", {"hit": [], "hit_best": [], "miss": [], "miss_best": [], "miss_mean": []})
        best.append((n, m["hit_best"], j["hit_best"], m["miss_best"], j["miss_best"]))
        means.append((n, m["miss_mean"], j["miss_mean"]))
        if pair:
            paired.append((n, pair))
        if first_miss is None:
            first_miss = med(m["miss"])
        print(f"| {n:,} | {cell(m['hit'])} | {cell(j['hit'])} | {ratio(med(m['hit']), med(j['hit']))} "
              f"| {cell(m['miss'])} | {cell(j['miss'])} | {ratio(med(m['miss']), med(j['miss']))} "
              f"| {cell(ls)} | {cell(gc)} |", flush=True)
        print(f"<!-- filled {n:,} in {fill_s:.1f} s; miss vs the smallest store: "
              f"{ratio(med(m['miss']), first_miss)}x -->", flush=True)
        if n == sizes[0]:
            procs_d = d  # the processes hit the smallest store
    print()
    print(f"the fastest of 5 blocks in each child ({args.hits // 5} hits, {args.misses // 5} misses a block: the "
          "machine at full speed; same statistic for both):")
    print()
    print("| stored entries | memolab hit | joblib hit | memolab / joblib | memolab miss | joblib miss | memolab / joblib |")
    print("|---|---|---|---|---|---|---|")
    for n, mb, jb, mm, jm in best:
        print(f"| {n:,} | {cell(mb)} | {cell(jb)} | {ratio(med(mb), med(jb))} "
              f"| {cell(mm)} | {cell(jm)} | {ratio(med(mm), med(jm))} |")
    print()
    print("the mean of each child's misses (a median hides the rare slow miss, such as one that waits for a WAL "
          "checkpoint's fsyncs; median (min–max) over rounds):")
    print()
    print("| stored entries | memolab miss, mean | joblib miss, mean | memolab / joblib |")
    print("|---|---|---|---|")
    for n, mm, jm in means:
        print(f"| {n:,} | {cell(mm)} | {cell(jm)} | {ratio(med(mm), med(jm))} |")
    print()
    print("both libraries in one process, alternating blocks (20 hits, 5 misses a block; a pair of blocks runs at one "
          "machine speed); ratio = median over block pairs of memolab's block median over joblib's, then median (min–max) "
          "over rounds:")
    print()
    print("| stored entries | memolab hit | joblib hit | memolab / joblib | memolab miss | joblib miss | memolab / joblib |")
    print("|---|---|---|---|---|---|---|")
    for n, pair in paired:
        c = {(w, k): [p[w][k] for p in pair] for w in ("hit", "miss") for k in ("memolab", "joblib", "ratio")}
        rc = {w: f"{med(c[(w, 'ratio')]):.2f} ({min(c[(w, 'ratio')]):.2f}–{max(c[(w, 'ratio')]):.2f})" for w in ("hit", "miss")}
        print(f"| {n:,} | {cell(c[('hit', 'memolab')])} | {cell(c[('hit', 'joblib')])} | {rc['hit']} "
              f"| {cell(c[('miss', 'memolab')])} | {cell(c[('miss', 'joblib')])} | {rc['miss']} |")
    print()
    procs(args, procs_d)


def procs(args: argparse.Namespace, d: str) -> None:
    if not os.path.exists(os.path.join(d, "joblib")):
        child(d, "joblib", "fill", {"n": 1})
    rates: dict[str, list[float]] = {"memolab": [], "joblib": []}
    for _ in range(args.rounds):
        for lib in ("memolab", "joblib"):
            start = time.time() + 3.0  # after every child has imported
            ps = [child(d, lib, "procs", {"hits": args.proc_hits, "start": start}, wait=False) for _ in range(args.procs)]
            outs = []
            for p in ps:
                so, se = p.communicate(timeout=1800)
                if p.returncode != 0:
                    raise RuntimeError(se[-2000:])
                outs.append(json.loads(so.strip().splitlines()[-1]))
            span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
            rates[lib].append(args.procs * args.proc_hits / span)
    m, j = med(rates["memolab"]), med(rates["joblib"])
    print(f"{args.procs} processes × {args.proc_hits} hits on 50 keys, all read from the store, started together "
          f"({args.rounds} interleaved rounds, median (min–max) hits/s):")
    print()
    print("| | memolab | joblib | memolab / joblib |")
    print("|---|---|---|---|")
    cells = [f"{med(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})" for v in (rates["memolab"], rates["joblib"])]
    print(f"| hits/s | {cells[0]} | {cells[1]} | {ratio(m, j)} |")


def sweep(args: argparse.Namespace, root: str) -> None:
    d = os.path.join(root, "sweep")
    os.makedirs(d)
    open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
    sizes = [1 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10]
    runs = [child(d, "memolab", "sweep", {"sizes": sizes, "n": args.sweep_n}) for _ in range(args.rounds)]
    print(f"inline vs blob by result size ({args.rounds} rounds of {args.sweep_n} calls, median of rounds)")
    print()
    print("| result | miss inline | miss blob | hit inline | hit blob |")
    print("|---|---|---|---|---|")
    for s in sizes:
        vals = {how: [r[f"{s}:{how}"] for r in runs] for how in ("inline", "blob")}
        row = [fmt(med([v[k] for v in vals[how]])) for k in (0, 1) for how in ("inline", "blob")]
        print(f"| {s >> 10} KiB | {row[0]} | {row[1]} | {row[2]} | {row[3]} |")


def miss_tail(args: argparse.Namespace, root: str) -> None:
    """``--miss-tail``: the tail of a miss (p50/p90/p99/max of ``--misses`` misses a child) on copies
    of the stores ``--reads --keep DIR`` built (the kept ones stay as they are), with SQLite's
    automatic WAL checkpoint on (as memolab leaves it) and off, sizes alternating within each round;
    and what one checkpoint of the WAL the misses wrote costs at each size."""
    sizes = [int(s) for s in args.sizes.split(",")]
    dirs = {}
    for n in sizes:
        src = os.path.join(args.keep, f"r{n}", "store")
        if not os.path.exists(src):
            raise SystemExit(f"no kept store at {src}: build it with --reads --keep {args.keep} --sizes {n}")
        d = os.path.join(root, f"r{n}")
        os.makedirs(d)
        open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
        shutil.copytree(src, os.path.join(d, "store"))
        dirs[n] = d
    os.sync()
    got: dict[tuple[int, bool], list[dict]] = {}
    for r in range(args.rounds):
        for auto in (True, False):
            for n in sizes:
                got.setdefault((n, auto), []).append(
                    child(dirs[n], "memolab", "tail", {"misses": args.misses, "round": r, "auto": auto}))
    print(f"a miss's tail: {args.misses} misses a child, {args.rounds} rounds, sizes alternating; ms, "
          "median over rounds (min–max); a shared 2-core machine")
    print()
    print("| stored entries | WAL checkpoint | p50 | p90 | p99 | max | WAL at most | one checkpoint of the misses' WAL |")
    print("|" + "---|" * 8)
    for auto in (True, False):
        for n in sizes:
            rows = got[(n, auto)]
            def cell(k: str, rows: list[dict] = rows) -> str:
                return (f"{statistics.median(x[k] for x in rows) * 1e3:.2f} "
                        f"({min(x[k] for x in rows) * 1e3:.2f}–{max(x[k] for x in rows) * 1e3:.2f})")
            print(f"| {n:,} | {'automatic' if auto else 'off'} | {cell('p50')} | {cell('p90')} | {cell('p99')} "
                  f"| {cell('max')} | {max(x['wal_max'] for x in rows) / 1e6:.1f} MB | {cell('checkpoint_s')} "
                  f"({max(x['checkpoint_pages'] for x in rows)} pages) |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10000,100000,1000000")
    ap.add_argument("--joblib-sizes", default="1,10000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hits", type=int, default=1000)
    ap.add_argument("--misses", type=int, default=100)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--proc-hits", type=int, default=2000)
    ap.add_argument("--inline-sweep", action="store_true")
    ap.add_argument("--reads", action="store_true", help="time the reading commands and the dashboard instead")
    ap.add_argument("--doctor-max", type=int, default=100_000, help="--reads: run doctor up to this size")
    ap.add_argument("--sweep-n", type=int, default=50)
    ap.add_argument("--keep", default=None, help="--reads: build the stores under this folder and keep them "
                    "(a store already there is reused: a million rows take minutes to write)")
    ap.add_argument("--miss-tail", action="store_true", help="the tail of a miss (p99) on copies of the stores "
                    "--reads --keep DIR built, WAL checkpoint on and off")
    ap.add_argument("--dir", default=None, help="where to build the stores (default: a temporary directory)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="memolab-scaling-", dir=args.dir)
    try:
        open(os.path.join(root, "child.py"), "w").write(CHILD)
        if args.inline_sweep:
            sweep(args, root)
        elif args.miss_tail:
            miss_tail(args, root)
        elif args.reads:
            reads(args, root)
        else:
            scaling(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
