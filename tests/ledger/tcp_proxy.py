"""A loopback TCP proxy that can pause a server or cut a reply: faults without privileges."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Proxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``mode`` is changed by the test.

    ``"forward"``: pass bytes both ways. ``"pause"``: hold every byte (a
    paused or partitioned server). ``"cut"``: pass requests, and on the first
    reply close the client's side without passing it on (the connection drops
    after the server has committed). ``"drop"``: on the next request, close
    both sides without passing it on (the request never arrives).
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.mode = "forward"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, reply: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            while data and self.mode == "pause":
                time.sleep(0.01)
            if not reply and data and self.mode == "drop":
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()
                return
            if reply and data and self.mode == "cut":
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_RDWR)
                dst.close()
                return
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.mode = "forward"
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
