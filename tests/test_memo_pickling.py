"""A memoized function sent to another process (Dask, Ray, process pools) keeps its key.

``MemoFunction.__reduce__``: by reference when its module exposes it (the other
process imports the module and gets the very same memo), by value for one in
``__main__`` (cloudpickle carries the function; the memo is rebuilt around it).
The store handle and in-process copies never travel.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import cloudpickle

from conftest import SRC
from memolab import memo
from memolab.calls.memo import MemoFunction


@memo(ignore=["verbose"], version="3")
def scaled(x: int, verbose: bool = False) -> int:
    return 3 * x


class Model:
    def __init__(self, w: int) -> None:
        self.w = w

    @memo
    def predict(self, x: int) -> int:
        return self.w * x


def test_a_module_level_memo_pickles_by_reference(tmp_store):
    assert scaled(2) == 6  # the store is open: its connections must not travel
    data = pickle.dumps(scaled)
    assert b"memolab.calls.memo" in data and len(data) < 200  # a name, not the function's code
    assert pickle.loads(data) is scaled
    bound = pickle.loads(pickle.dumps(Model(2).predict))
    assert bound(5) == 10


def _run(code: str, data: bytes) -> str:
    cp = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=data, capture_output=True, check=True,
                        env=dict(os.environ, PYTHONPATH=SRC))
    return cp.stdout.decode().strip()


def test_a_main_memo_pickles_by_value_and_keeps_its_key(tmp_store):
    ns = {"__name__": "__main__"}
    exec(textwrap.dedent("""
        from memolab import memo
        def helper(x):
            return x + 1
        @memo(ignore=["verbose"])
        def f(x, verbose=False):
            return helper(x) * 2
    """), ns)
    f = ns["f"]
    assert f(1) == 4
    data = cloudpickle.dumps(f)
    out = _run("""
        import sys, cloudpickle
        f = cloudpickle.loads(sys.stdin.buffer.read())
        print(type(f).__name__, f.ignore == {"verbose"}, f.key(1))
    """, data)
    assert out == f"MemoFunction True {f.key(1)}"
    assert isinstance(cloudpickle.loads(data), MemoFunction)
