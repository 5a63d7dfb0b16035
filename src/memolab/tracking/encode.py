"""Converting logged values: images to PNG, value arrays to histograms.

The PNG encoder is a dozen lines of ``zlib`` + ``struct`` so logging images
needs neither Pillow nor torchvision; it runs on the flusher thread.
Tensors are accepted by duck typing (``.detach().cpu()``) so this module never
imports torch.
"""
from __future__ import annotations

import math
import struct
import zlib
from typing import Any


def to_numpy(x: Any) -> Any:
    import numpy as np

    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        x = x.detach().cpu()
        if hasattr(x, "float") and str(getattr(x, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def image_array(img: Any, dataformats: str | None = None, where: str = "image") -> Any:
    """A uint8 HxWxC (C in 1, 3, 4) copy of ``img``: an array, a tensor or a PIL image.

    Floats are taken to be in [0, 1] (the TensorBoard convention); ``dataformats``
    ("CHW", "HWC", "HW") says the layout, else it is guessed from where a 1/3/4
    sized axis is.
    """
    import numpy as np

    if hasattr(img, "mode") and hasattr(img, "convert"):  # PIL: palette/CMYK/16-bit modes are not pixels as such
        if img.mode not in ("L", "RGB", "RGBA"):
            img = img.convert("RGBA" if "A" in img.mode or "transparency" in getattr(img, "info", {}) else "RGB")
    a = to_numpy(img)
    if a.dtype == object:
        raise TypeError(f"{where}: cannot log {type(img).__qualname__} as an image")
    fmt = (dataformats or "").upper()
    if not fmt:
        if a.ndim == 2:
            fmt = "HW"
        elif a.ndim == 3:
            fmt = "CHW" if a.shape[0] in (1, 3, 4) and a.shape[2] not in (1, 3, 4) else "HWC"
        else:
            raise ValueError(f"{where}: an image must have 2 or 3 dimensions, got shape {tuple(a.shape)}")
    if len(fmt) != a.ndim or sorted(fmt) not in (sorted("HW"), sorted("HWC")):
        raise ValueError(f"{where}: dataformats {fmt!r} does not fit shape {tuple(a.shape)}")
    if fmt == "HW":
        a = a[:, :, None]
    else:
        a = np.transpose(a, [fmt.index(c) for c in "HWC"])
    if a.shape[2] not in (1, 3, 4):
        raise ValueError(f"{where}: an image needs 1, 3 or 4 channels, got {a.shape[2]}")
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a).copy()
    if a.dtype == bool:
        return (a.astype(np.uint8) * 255)
    f = np.nan_to_num(a.astype(np.float64), nan=0.0)
    if np.issubdtype(a.dtype, np.integer):
        return np.clip(f, 0, 255).astype(np.uint8)
    return np.clip(np.rint(f * 255.0), 0, 255).astype(np.uint8)


def image_png(a: Any) -> tuple[bytes, tuple[int, int, int]]:
    """PNG bytes of a uint8 HxWxC array, and (H, W, C)."""
    h, w, c = a.shape
    color = {1: 0, 3: 2, 4: 6}[c]  # grey, RGB, RGBA
    raw = b"".join(b"\x00" + a[y].tobytes() for y in range(h))  # filter type 0 per row

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    return png, (h, w, c)


def png_size(png: bytes) -> tuple[int, int, int]:
    """(H, W, channels) from a PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    w, h, _depth, color = struct.unpack(">IIBB", png[16:26])
    return h, w, {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(color, 3)


def histogram(values: Any, bins: Any = 64, where: str = "histogram") -> dict[str, Any]:
    """Summary of ``values``: min, max, count, sums, and bucket right edges with counts.

    Non-finite values are counted in ``nonfinite`` and left out of the buckets,
    as a single inf would otherwise stretch every bucket to uselessness.
    """
    import numpy as np

    a = to_numpy(values)
    if a.dtype == object:
        raise TypeError(f"{where}: cannot make a histogram of {type(values).__qualname__}")
    a = a.astype(np.float64, copy=False).ravel()
    finite = a[np.isfinite(a)]
    bad = int(a.size - finite.size)
    if finite.size == 0:
        return {"min": 0.0, "max": 0.0, "num": 0, "sum": 0.0, "sum_squares": 0.0, "left": 0.0,
                "limits": [], "counts": [], "nonfinite": bad}
    if isinstance(bins, str):
        bins = 64 if bins in ("tensorflow", "auto", "default") else bins
    lo, hi = float(finite.min()), float(finite.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    # Finite values can still span more than the largest double (hi - lo == inf), where numpy
    # cannot make finite bins: bin the halves (exact for doubles), then double the edges back.
    scale = 1.0 if math.isfinite(hi - lo) else 0.5
    with np.errstate(over="ignore", invalid="ignore"):
        counts, edges = np.histogram(finite * scale if scale != 1.0 else finite, bins=bins, range=(lo * scale, hi * scale))
        if scale != 1.0:
            edges = edges / scale
        # the sums of huge values overflow to +-inf: that is their float value, kept as such
        # (the sink stores it as JSON Infinity; the dashboard API sends null for it)
        total, squares = float(finite.sum()), float(np.dot(finite, finite))
    return {"min": float(finite.min()), "max": float(finite.max()), "num": int(finite.size),
            "sum": total, "sum_squares": squares,
            "left": float(edges[0]), "limits": [float(e) for e in edges[1:]],
            "counts": [int(c) for c in counts], "nonfinite": bad}
