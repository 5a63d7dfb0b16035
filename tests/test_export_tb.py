"""`memolab export-tb` writes event files that TensorBoard's own reader reads back point for point."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import memolab
from conftest import require, require_tool
from memolab import memo
from memolab.store import get_store
from memolab.tracking import query, tb_export

ea_mod = require("tensorboard.backend.event_processing.event_accumulator")
SIZE = {"scalars": 0, "images": 0, "histograms": 0, "tensors": 0, "compressedHistograms": 0}


def load(run_dir):
    ea = ea_mod.EventAccumulator(str(run_dir), size_guidance=SIZE)
    ea.Reload()
    return ea


@pytest.mark.parametrize("crc", [tb_export.crc32c, tb_export.crc32c_py])
def test_crc32c_known_vectors(crc):
    # RFC 3720 B.4 test vectors: a wrong table would corrupt every record
    assert crc(b"\x00" * 32) == 0x8A9136AA
    assert crc(b"\xff" * 32) == 0x62A8AB43
    assert crc(bytes(range(32))) == 0x46DD794E
    assert crc(b"123456789") == 0xE3069283


def test_native_crc32c_is_used_when_installed():
    require("google_crc32c")
    assert tb_export.CRC32C_NATIVE  # the `tb` extra: ~1000x the pure-Python loop


def test_export_roundtrip_every_point(tmp_store, tmp_path):
    rng = np.random.default_rng(1)
    weights = [rng.normal(i, 1.0, size=500) for i in range(3)]
    img = rng.integers(0, 256, size=(6, 9, 3), dtype=np.uint8)

    @memo
    def train(lr, steps=200):
        for s in range(steps):
            memolab.log.scalar("loss", lr * np.exp(-s / 50), step=s)
            if s % 10 == 0:
                memolab.log.scalars({"train": s * lr, "val": float("nan") if s == 30 else -s * lr}, step=s, main_tag="acc")
        for i, w in enumerate(weights):
            memolab.log.histogram("w", w, step=i * 100, bins=30)
        memolab.log.image("sample", img, step=7)
        memolab.log.text("notes", f"lr is {lr}\nsecond line", step=3)
        return lr

    train(0.1)
    train(0.02)
    out = tmp_path / "tb"
    dirs = tb_export.export(get_store().index, out, train.symbol)
    assert len(dirs) == 2
    names = sorted(d.name for d in dirs)
    assert names[0].startswith("lr=0.02,steps=200__code-") and names[1].startswith("lr=0.1,steps=200__code-")
    assert all("__done_eval" in n for n in names)  # the evaluation id the CLI takes

    index = get_store().index
    for run in query.runs(index, train.symbol):
        (d,) = [d for d in dirs if d.name == tb_export.run_dirname(run)]
        ea = load(d)
        tags = ea.Tags()
        ours = query.all_scalars(index, run["id"])
        assert sorted(tags["scalars"]) == sorted(ours) == ["acc/train", "acc/val", "loss"]
        for tag, pts in ours.items():
            theirs = ea.Scalars(tag)
            assert [e.step for e in theirs] == [p[0] for p in pts]
            assert [e.wall_time for e in theirs] == pytest.approx([p[1] for p in pts], abs=1e-6)
            # simple_value is a float32 in the Summary proto
            np.testing.assert_array_equal(np.array([e.value for e in theirs], dtype=np.float32),
                                          np.array([p[2] for p in pts], dtype=np.float32))
        assert np.isnan(ea.Scalars("acc/val")[3].value)

        hs = ea.Histograms("w")
        ours_h = query.events(index, run["id"], "histogram", "w")
        assert [h.step for h in hs] == [0, 100, 200]
        for h, o in zip(hs, ours_h, strict=False):
            hv = h.histogram_value
            assert (hv.min, hv.max, hv.num, hv.sum) == (o["meta"]["min"], o["meta"]["max"], o["meta"]["num"], o["meta"]["sum"])
            assert list(hv.bucket_limit) == o["meta"]["limits"] and list(hv.bucket) == o["meta"]["counts"]

        (im,) = ea.Images("sample")
        assert (im.step, im.width, im.height) == (7, 9, 6)
        from PIL import Image

        assert (np.asarray(Image.open(io.BytesIO(im.encoded_image_string))) == img).all()

        (txt,) = ea.Tensors("notes")
        assert txt.step == 3 and txt.tensor_proto.string_val[0].decode() == f"lr is {run['hparams']['lr']}\nsecond line"
        (hp,) = ea.Tensors("hparams")
        table = hp.tensor_proto.string_val[0].decode()
        # a header row and a separator: TensorBoard renders it as a table, not a paragraph
        assert table.splitlines()[:2] == ["| argument | value |", "|---|---|"] and "| lr |" in table


def test_export_tb_command(project, tmp_path):
    project.write("job.py", """
        import memolab
        from memolab import memo

        @memo
        def job(k):
            for i in range(5):
                memolab.log.scalar("x", k * i)
            return k

        job(1); job(2)
    """)
    project.run("job.py")
    out = tmp_path / "tb"
    cp = project.run("-m", "memolab", "export-tb", str(out), "__main__:job")
    assert "wrote 2 run(s)" in cp.stdout
    run_dirs = sorted(p for p in (out / "job.py.job").iterdir())  # a script's function: as the dashboard names it
    assert [d.name.split("__")[0] for d in run_dirs] == ["k=1", "k=2"]
    assert [e.value for e in load(run_dirs[1]).Scalars("x")] == [0.0, 2.0, 4.0, 6.0, 8.0]
    bad = project.run("-m", "memolab", "export-tb", str(out), "nope:fn", check=False)
    assert bad.returncode == 1 and "no function matches 'nope:fn'" in bad.stderr


def _session_groups(logdir):
    """What TensorBoard's HParams tab shows, computed by the hparams plugin's own backend."""
    from tensorboard import context as tb_context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

    mux = pem.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    ctx = base_plugin.TBContext(logdir=str(logdir), multiplexer=mux,
                                data_provider=data_provider.MultiplexerDataProvider(mux, str(logdir)))
    bctx = backend_context.Context(ctx)
    exp = get_experiment.Handler(tb_context.RequestContext(), bctx, "", api_pb2.GetExperimentRequest()).run()
    req = api_pb2.ListSessionGroupsRequest(allowed_statuses=[1, 2, 3, 0], start_index=0, slice_size=100)
    return exp, list_session_groups.Handler(tb_context.RequestContext(), bctx, "", req).run()


def test_hparams_tab_has_every_run_with_arguments_and_final_metrics(tmp_store, tmp_path):
    @memo
    def fit(lr, opt="adam", wd=False):
        for s in range(5):
            memolab.log.scalar("loss", lr * (5 - s), step=s)
            memolab.log.scalar("val/acc", s / 5, step=s)
        if opt == "bad":
            raise RuntimeError("diverged")
        return lr

    fit(0.1)
    fit(0.2, opt="sgd", wd=True)
    with pytest.raises(RuntimeError):
        fit(0.3, opt="bad")
    out = tmp_path / "tb"
    tb_export.export(get_store().index, out)
    exp, res = _session_groups(out)
    assert {h.name: h.type for h in exp.hparam_infos} == {"lr": 3, "opt": 1, "wd": 2}  # FLOAT64, STRING, BOOL
    assert sorted(m.name.tag for m in exp.metric_infos) == ["loss", "val/acc"]
    groups = {g.hparams["lr"].number_value: g for g in res.session_groups}
    assert sorted(groups) == [0.1, 0.2, 0.3]
    g = groups[0.2]
    assert g.hparams["opt"].string_value == "sgd" and g.hparams["wd"].bool_value is True
    final = {m.name.tag: m.value for m in g.metric_values}
    assert final == pytest.approx({"loss": 0.2, "val/acc": 0.8})
    assert [s.status for s in groups[0.1].sessions] == [1] and [s.status for s in groups[0.3].sessions] == [2]


def test_reexport_removes_runs_that_are_gone_and_keeps_foreign_files(tmp_store, tmp_path):
    @memo
    def a(k):
        memolab.log.scalar("x", float(k))
        return k

    @memo
    def b(k):
        memolab.log.scalar("y", float(k))
        return k

    a(1), a(2), b(1)
    out = tmp_path / "tb"
    dirs = tb_export.export(get_store().index, out)
    assert len(dirs) == 3
    old_a = sorted(d for d in dirs if d.parent.name.endswith(".a"))
    (b1,) = [d for d in dirs if d.parent.name.endswith(".b")]
    (b1 / "notes.txt").write_text("mine")  # a file the user put there
    a.clear()
    b.clear()
    a(1)
    # exporting one function removes only that function's stale runs
    again = tb_export.export(get_store().index, out, a.symbol)
    # both old runs of `a` are gone (a(1) was recomputed: a new evaluation, a new directory)
    assert len(again) == 1 and sorted(again.removed) == old_a and not any(d.exists() for d in old_a)
    assert b1.exists()
    again = tb_export.export(get_store().index, out)
    assert again.removed == [b1] and (b1 / "notes.txt").read_text() == "mine"
    assert not list(b1.glob("events.out.tfevents.*"))


def test_evaluations_differing_only_in_code_get_distinct_names(project, tmp_path):
    src = """
        import memolab
        from memolab import memo

        @memo
        def job(k):
            memolab.log.scalar("x", k * FACTOR)
            return k

        job(1)
    """
    project.write("job.py", src.replace("FACTOR", "1"))
    project.run("job.py")
    project.write("job.py", src.replace("FACTOR", "2"))
    project.run("job.py")
    out = tmp_path / "tb"
    project.run("-m", "memolab", "export-tb", str(out), "job")
    names = sorted(p.name for p in (out / "job.py.job").iterdir())
    assert len(names) == 2 and names[0] != names[1]
    assert {n.split("__")[0] for n in names} == {"k=1"} and all("__code-" in n for n in names)


def test_scalar_fast_path_writes_the_same_bytes(tmp_path):
    pts = [(0, 1.5, 0.25), (7, 2.5, float("nan")), (2**40, 3.5, -1e30), (-3, 4.0, float("inf"))]
    a, b = tb_export.EventFileWriter(tmp_path / "a"), tb_export.EventFileWriter(tmp_path / "b")
    for step, wall, value in pts:
        a.add(wall, step, tb_export.summary_value("train/loss", simple=value))
    b.add_scalars("train/loss", pts)
    a._f.flush(), b._f.flush()
    import struct

    def after_first(raw):  # the file_version record carries the writer's own wall time
        return raw[struct.unpack("<Q", raw[:8])[0] + 16:]

    assert after_first(a._tmp.read_bytes()) == after_first(b._tmp.read_bytes()) != b""
    a.abort(), b.abort()


WHOLE_STORE = """
import memolab
from memolab import memo

@memo
def fit(lr, opt="adam"):
    for s in range(5):
        memolab.log.scalar("loss", lr * (5 - s), step=s)
        memolab.log.scalar("val/acc", s / 5 + lr, step=s)
    return lr

@memo
def other(k, width=3):
    memolab.log.scalar("y", float(k))
    return k

for lr in (0.1, 0.01, 0.001):
    fit(lr)
    fit(lr, "sgd")
other(1)
other(2, 5)
memolab.log.scalar("outside", 1.0)  # the script's process run
w = memolab.SummaryWriter("runs/exp1")
w.add_scalar("z", 1.0)
w.close()
"""


def test_a_whole_store_export_keeps_hparams_comparable_and_log_dir_names(project):
    """A whole-store export of two functions (and a script's process and writer runs): TensorBoard
    reads one HParams experiment per logdir, and its parallel-coordinates view draws only the
    sessions with a value in every column shown. The experiment listed every function's arguments
    and metrics (lr of one, k of the other), so it drew no line at all (issue 40). Now it is the
    function with the most runs: each of its sessions has every column. Run directories are named
    after a script's function as the dashboard names it (job.py.fit) and keep a run's log_dir name."""
    project.write("job.py", WHOLE_STORE)
    project.run("job.py")
    out = project.root / "tb"
    cp = project.run("-m", "memolab", "export-tb", str(out))
    assert "HParams compares job.py.fit's runs; for another function: tensorboard --logdir" in cp.stdout
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["_process.job.py_", "job.py.fit", "job.py.other"]
    assert any(p.name.startswith("runs_exp1__done_run") for p in (out / "_process.job.py_").iterdir())
    exp, res = _session_groups(out)
    assert sorted(h.name for h in exp.hparam_infos) == ["lr", "opt"]
    assert sorted(m.name.tag for m in exp.metric_infos) == ["loss", "val/acc"]
    drawn = [g for g in res.session_groups if all(h.name in g.hparams for h in exp.hparam_infos)
             and {m.name.tag for m in g.metric_values} >= {m.name.tag for m in exp.metric_infos}]
    assert len(drawn) == 6  # every run of fit: what the parallel-coordinates view draws
    # one function's own logdir compares its runs (TensorBoard computes its experiment from them)
    exp, res = _session_groups(out / "job.py.other")
    assert sorted(h.name for h in exp.hparam_infos) == ["k", "width"] and len(res.session_groups) == 2


def test_tensorboards_parallel_coordinates_view_draws_a_whole_store_export(project):
    """The same export in TensorBoard's own page (tensorboard on 127.0.0.1, Debian's Chromium):
    its parallel-coordinates plot holds a line for each of fit's six runs (none before)."""
    sync_api = require("playwright.sync_api")
    chromium = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
    require_tool("chromium", chromium)
    import socket
    import time

    project.write("job.py", WHOLE_STORE)
    project.run("job.py")
    out = project.root / "tb"
    project.run("-m", "memolab", "export-tb", str(out))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(out), "--port", str(port),
                           "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
            pg = browser.new_page(viewport={"width": 1400, "height": 900})
            deadline = time.monotonic() + 60
            while True:  # until tensorboard answers
                try:
                    pg.goto(f"http://127.0.0.1:{port}/#hparams", timeout=5000)
                    pg.wait_for_selector("text=PARALLEL COORDINATES VIEW", timeout=15000)
                    break
                except Exception:
                    if time.monotonic() > deadline or tb.poll() is not None:
                        raise
                    time.sleep(0.5)
            pg.click("text=PARALLEL COORDINATES VIEW")
            plot = """() => { const find = (root, out = []) => { for (const e of root.querySelectorAll('*')) {
                if (e.tagName === 'TF-HPARAMS-PARALLEL-COORDS-PLOT') out.push(e); if (e.shadowRoot) find(e.shadowRoot, out); }
                return out; }; const p = find(document)[0];
                return p && p.sessionGroups ? [p._validSessionGroups.length, p.sessionGroups.length] : null; }"""
            pg.wait_for_function(plot, timeout=30000)
            assert pg.evaluate(plot) == [6, 10]
            browser.close()
    finally:
        os.killpg(tb.pid, 15)
        tb.wait(30)


def test_hparams_view_opens_on_the_varying_arguments_and_no_empty_root_run(tmp_store, tmp_path):
    """A sweep (issue 54): TensorBoard shows the experiment's first hparams and hides the rest;
    sorted by name it opened on the constant ``batch``/``ds`` with ``lr``, ``opt`` and ``seed``
    hidden. The varying arguments come first, marked ``differs``. The experiment's event file at
    the logdir's root made an empty run ``.``, listed first in every tab: it lives beside a run's
    events now, and a re-export removes the root file an earlier export left."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    @memo
    def sweep(batch, ds, lr, opt, seed):
        memolab.log.scalar("val/loss", lr * (seed + 1))
        return lr

    for opt in ("adam", "sgd"):
        for lr in (0.1, 0.01):
            sweep(64, {"name": "mnist", "size": 100}, lr, opt, 0)
    sweep(64, {"name": "mnist", "size": 100}, 0.1, "adam", 1)
    out = tmp_path / "tb"
    out.mkdir()
    legacy = out / "events.out.tfevents.0000000001.host.memolab"  # what an earlier export left at the root
    legacy.write_bytes(tb_export.record(tb_export.event(1.0, 0, file_version="brain.Event:2")))
    tb_export.export(get_store().index, out)
    exp, res = _session_groups(out)
    assert [(h.name, h.differs) for h in exp.hparam_infos] == [
        ("lr", True), ("opt", True), ("seed", True), ("batch", False), ("ds.name", False), ("ds.size", False)]
    assert len(res.session_groups) == 5
    mux = pem.EventMultiplexer()
    mux.AddRunsFromDirectory(str(out))
    mux.Reload()
    runs = sorted(mux.Runs())
    assert "." not in runs and len(runs) == 5 and not legacy.exists()
    assert not list(out.glob("events.out.tfevents.*"))
    # a re-export of one run keeps the experiment; clearing the function leaves no experiment behind
    tb_export.export(get_store().index, out, sweep.symbol)
    exp, _ = _session_groups(out)
    assert [h.name for h in exp.hparam_infos][:3] == ["lr", "opt", "seed"]
    assert len(list(out.rglob("events.out.tfevents.*.memolab-hparams"))) == 1
    sweep.clear()
    tb_export.export(get_store().index, out)
    assert not list(out.rglob("events.out.tfevents.*"))
