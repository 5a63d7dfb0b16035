"""A TCP proxy on 127.0.0.1 that injects network faults between memolab and a server.

``FaultProxy(target_port)`` listens on a free loopback port and forwards every
connection to ``127.0.0.1:target_port``, one thread per direction. Its ``mode``
can be changed at any time and applies to connections already open:

- ``"pass"``: bytes go through (``latency`` seconds added before each chunk);
- ``"stall"``: a black hole: connections are accepted and kept open, nothing is
  forwarded either way (the kernel still acknowledges what the client sends, as
  across a silent partition or a frozen middlebox); bytes held back are delivered
  when the mode returns to ``"pass"`` (the partition heals). ``stall_after``: a
  connection forwards that many bytes (both ways together) before it stalls;
- ``reset()``: every open connection is closed with a TCP RST (``SO_LINGER`` 0);
  new connections pass (unless the mode says otherwise);
- ``"refuse"``: new connections are reset at once.

Deterministic: no randomness; the threads are daemons, ``close()`` ends them all.
"""
from __future__ import annotations

import select
import socket
import struct
import threading
import time


def _readable(sock: socket.socket, timeout: float) -> bool:
    # poll, not select: select() cannot watch a descriptor numbered 1024 or more, and a
    # long test session may hold that many (the proxy then died silently mid-suite)
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(timeout * 1000))


class _Conn:
    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client, self.upstream = client, upstream
        self.sent = 0
        self.closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        for a, b in ((self.client, self.upstream), (self.upstream, self.client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True, name="faultproxy-pump").start()

    def _stalled(self) -> bool:
        p = self.proxy
        return p.mode == "stall" and self.sent >= p.stall_after

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        held, eof = b"", False
        try:
            while not self.closed:
                if held and not self._stalled():
                    if self.proxy.latency:
                        time.sleep(self.proxy.latency)
                    n = self.proxy.stall_after - self.sent if self.proxy.mode == "stall" else len(held)
                    chunk, held = held[:max(n, 0)], held[max(n, 0):]
                    if chunk:
                        dst.sendall(chunk)
                        with self._lock:
                            self.sent += len(chunk)
                    continue
                if eof:
                    if not held:
                        break
                    time.sleep(0.02)  # stalled, with bytes to deliver once it heals
                    continue
                if not _readable(src, 0.02):
                    continue
                data = src.recv(65536)
                if not data:
                    eof = True
                held += data
        except OSError:
            pass
        self.close()

    def close(self, rst: bool = False) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.upstream):
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.latency = 0.0
        self.stall_after = 0
        self.conns: list[_Conn] = []
        self.accepted = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="faultproxy-accept")
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                if not _readable(self._sock, 0.05):
                    continue
                client, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "refuse":
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            c = _Conn(self, client, upstream)
            self.conns = [x for x in self.conns if not x.closed] + [c]
            c.start()

    # -- faults --------------------------------------------------------------------------
    def set(self, mode: str = "pass", latency: float = 0.0, stall_after: int = 0) -> None:
        assert mode in ("pass", "stall", "refuse"), mode
        self.latency, self.stall_after = latency, stall_after
        self.mode = mode

    def heal(self) -> None:
        self.set("pass")

    def reset(self) -> None:
        """Close every open connection with a TCP RST."""
        for c in list(self.conns):
            c.close(rst=True)

    def open_connections(self) -> int:
        return sum(not c.closed for c in self.conns)

    def close(self, *_: object | None) -> None:
        self._closed = True
        self.reset()
        try:
            self._sock.close()
        except OSError:
            pass
        self._thread.join(2)
