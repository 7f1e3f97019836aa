"""A TCP proxy that a test puts between a portal process and PostgreSQL or Redis, to take that
service away and give it back without touching the real one (which other tests share): while
cut, every connection through it is closed and every new one is closed at once, as a server
that went down would."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class OutageProxy:
    """Forwards 127.0.0.1:<port> to (host, port) until cut(); restore() lets it through again."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name="outage-proxy").start()

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        try:
            while not self._cut.is_set():
                for key, _ in selector.select(timeout=0.5):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._open -= {a, b}
