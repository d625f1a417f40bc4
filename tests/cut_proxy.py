"""A loopback TCP proxy whose connections can be cut without closing them: a network blip between a peer and its
broker (the bytes stop flowing both ways, no side hears of it), while new connections pass."""

from __future__ import annotations

import selectors
import socket
import threading
from types import TracebackType


class CutProxy:
    """Forward ``127.0.0.1:<port>`` to ``target`` (``tcp://127.0.0.1:N``); :meth:`cut` stops the connections open
    now (held open, their bytes dropped from then on); connections made later pass. A context manager."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._pairs: dict[socket.socket, socket.socket] = {}  # each end to the other
        self._cut: set[socket.socket] = set()  # ends whose bytes are dropped
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cut-proxy", daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        """Connections made through the proxy so far that are still open."""
        with self._lock:
            return len(self._pairs) // 2

    def cut(self) -> None:
        """Stop every connection open now: what either side sends on it is dropped from now on."""
        with self._lock:
            self._cut.update(self._pairs)

    def _run(self) -> None:
        while not self._closing.is_set():
            for key, _ in self._selector.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                else:
                    self._forward(sock)

    def _accept(self) -> None:
        try:
            inbound, _ = self._listener.accept()
        except BlockingIOError:
            return
        outbound = socket.create_connection(self._target, timeout=10)
        for end in (inbound, outbound):
            end.setblocking(True)
            end.settimeout(10)
            self._selector.register(end, selectors.EVENT_READ, None)
        with self._lock:
            self._pairs[inbound], self._pairs[outbound] = outbound, inbound

    def _forward(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        with self._lock:
            other, cut = self._pairs.get(sock), sock in self._cut
        if other is None:
            return
        if not data:
            self._drop(sock, other)
        elif not cut:
            try:
                other.sendall(data)
            except OSError:
                self._drop(sock, other)

    def _drop(self, *ends: socket.socket) -> None:
        with self._lock:
            for end in ends:
                self._pairs.pop(end, None)
                self._cut.discard(end)
        for end in ends:
            self._selector.unregister(end)
            end.close()

    def close(self) -> None:
        self._closing.set()
        self._thread.join(10)
        with self._lock:
            ends = list(self._pairs)
            self._pairs.clear()
        for end in [*ends, self._listener]:
            end.close()
        self._selector.close()

    def __enter__(self) -> CutProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
