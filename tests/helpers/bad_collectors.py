"""TCP servers on 127.0.0.1 that misbehave as a broken collector does: ``blackhole`` accepts and never
answers, ``reset`` accepts and resets the connection at once, ``garbage`` answers every request with
bytes that are neither HTTP/2 (gRPC) nor HTTP/1. ``become(mode)`` changes how it misbehaves mid-run (one run
sees several kinds of broken collector); ``seen`` counts the connections of each mode. Bounded: daemon threads, at
most 64 connections held, closed by :meth:`BadCollector.close`."""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter


class BadCollector:
    def __init__(self, mode: str) -> None:
        assert mode in ("blackhole", "reset", "garbage")
        self.mode = mode
        self._srv = socket.create_server(("127.0.0.1", 0))
        self._srv.settimeout(0.5)
        self.port = self._srv.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self.connections = 0
        self.seen: Counter[str] = Counter()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            self.seen[self.mode] += 1
            if self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            elif self.mode == "garbage":
                try:
                    conn.settimeout(2)
                    conn.recv(65536)
                    conn.sendall(b"\x00\xffnot a protocol\r\n\r\n" * 64)
                except OSError:
                    pass
                conn.close()
            else:
                self._held.append(conn)
                if len(self._held) > 64:
                    self._held.pop(0).close()

    def become(self, mode: str) -> None:
        """Misbehave as ``mode`` from the next connection on; the held ones are closed (the client reconnects)."""
        assert mode in ("blackhole", "reset", "garbage")
        self.mode = mode
        held, self._held = self._held, []
        for conn in held:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        for conn in self._held:
            conn.close()
        self._srv.close()

    def __enter__(self) -> BadCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
