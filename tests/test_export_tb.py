"""`memolab export-tb` writes event files that TensorBoard's own reader reads back point for point."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import memolab
from memolab import memo
from memolab.store import get_store
from memolab.tracking import query, tb_export

ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
SIZE = {"scalars": 0, "images": 0, "histograms": 0, "tensors": 0, "compressedHistograms": 0}


def load(run_dir):
    ea = ea_mod.EventAccumulator(str(run_dir), size_guidance=SIZE)
    ea.Reload()
    return ea


def test_crc32c_known_vectors():
    # RFC 3720 B.4 test vectors: a wrong table would corrupt every record
    assert tb_export.crc32c(b"\x00" * 32) == 0x8A9136AA
    assert tb_export.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert tb_export.crc32c(bytes(range(32))) == 0x46DD794E
    assert tb_export.crc32c(b"123456789") == 0xE3069283


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
    assert names[0].startswith("lr=0.02,steps=200__done_") and names[1].startswith("lr=0.1,steps=200__done_")

    index = get_store().index
    for run in query.runs(index, train.symbol):
        (d,) = [d for d in dirs if d.name.endswith(f"_{run['id']}")]
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
        for h, o in zip(hs, ours_h):
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
        assert b"| lr |" in hp.tensor_proto.string_val[0]


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
    run_dirs = sorted(p for p in (out / "__main__.job").iterdir())
    assert [d.name.split("__")[0] for d in run_dirs] == ["k=1", "k=2"]
    assert [e.value for e in load(run_dirs[1]).Scalars("x")] == [0.0, 2.0, 4.0, 6.0, 8.0]
    bad = project.run("-m", "memolab", "export-tb", str(out), "nope:fn", check=False)
    assert bad.returncode == 2 and "no function 'nope:fn'" in bad.stderr and "__main__:job" in bad.stderr
