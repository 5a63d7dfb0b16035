"""A small ML-style pipeline with two memoized steps.

Run it twice: the second run returns both steps from the store instantly,
in a new process. Edit `featurize` and only the steps that depend on it rerun.
"""
import sys
import time

import numpy as np

from memolab import memo

SEED = 0


@memo
def load_data(n: int) -> np.ndarray:
    """Pretend this reads and decodes a big dataset."""
    time.sleep(1.0)
    rng = np.random.default_rng(SEED)
    return rng.normal(size=(n, 16)).astype(np.float32)


def featurize(x: np.ndarray) -> np.ndarray:
    return np.tanh(x * 2.0)


@memo(ignore=["verbose"])
def train(data: np.ndarray, lr: float = 0.1, epochs: int = 50, verbose: bool = False) -> dict:
    """A tiny least-squares 'model' fitted by gradient descent."""
    time.sleep(1.0)
    feats = featurize(data)
    target = feats[:, 0] - feats[:, 1]
    w = np.zeros(feats.shape[1], dtype=np.float32)
    for epoch in range(epochs):
        grad = feats.T @ (feats @ w - target) / len(feats)
        w -= lr * grad
        if verbose:
            print(f"epoch {epoch}: |grad| = {np.linalg.norm(grad):.4f}")
    loss = float(np.mean((feats @ w - target) ** 2))
    return {"weights": w, "loss": loss}


if __name__ == "__main__":
    t0 = time.perf_counter()
    data = load_data(20_000)
    if "--explain" in sys.argv:  # before the call: will it hit, and if not, why?
        print(train.explain(data, lr=0.1))
    model = train(data, lr=0.1)
    took = time.perf_counter() - t0
    print(f"loss = {model['loss']:.6f}   ({took:.2f} s)")
