"""A small learning-rate sweep, memoized and logged: what the dashboard's sweep views are for.

Three learning rates x four seeds of a toy model trained for 400 steps (pure Python: no data to
download, a second or two in all), each a memoized call of ``train`` that logs ``train/loss``,
``val/loss`` and ``val/acc``, names its run and notes what it is. A fifth learning rate diverges:
its run fails (the dashboard ends its lines with a cross, its page shows the traceback).

Run it twice: the second time every run is a hit. ``examples/screenshots.py`` photographs its
store (grouped by ``lr``, the best run, a run's page).

    python examples/sweep.py
"""
from __future__ import annotations

import math
import random

import memolab


@memolab.memo
def train(lr: float, seed: int, steps: int = 400) -> dict:
    rng = random.Random(seed)  # a generator of its own: the key holds the seed, not a global state
    w, floor = 2.0 + rng.random(), 0.05 + 0.02 * rng.random()
    memolab.log.name(f"lr={lr} seed={seed}")
    if seed == 0:
        memolab.log.tag("baseline")
        memolab.log.note("the first seed of each learning rate: compare the others with it")
    loss = val = acc = float("nan")
    for step in range(steps):
        # gradient descent on w**2 with a noisy gradient: a small lr converges slowly, a large one
        # settles on a higher floor (its noise), one too large diverges
        w -= lr * 0.05 * w * (1 + rng.gauss(0, 0.3))
        if lr > 1:
            w *= 1.12  # past the stable range: the iterate grows
        loss = w * w + floor + lr * 0.4 * abs(rng.gauss(0, 1))
        if not math.isfinite(loss) or loss > 100:
            raise FloatingPointError(f"loss diverged at step {step} (lr={lr})")
        memolab.log.scalar("train/loss", loss, step)
        if step % 10 == 9:
            val = loss * (1.1 + 0.1 * rng.random()) + 0.02
            acc = 1 / (1 + val)
            memolab.log.scalar("val/loss", val, step)
            memolab.log.scalar("val/acc", acc, step)
    return {"val/loss": val, "val/acc": acc}


def main() -> None:
    for lr in (0.3, 0.1, 0.03):
        for seed in range(4):
            print(f"lr={lr} seed={seed}: val/loss {train(lr, seed)['val/loss']:.4f}")
    try:
        train(1.2, 0)
    except FloatingPointError as e:
        print(f"lr=1.2 seed=0: failed ({e})")


if __name__ == "__main__":
    main()
