"""A TCP relay that can cut a client off from the API server while the server keeps running."""

from __future__ import annotations

import contextlib
import socket
import threading


class FlakyProxy:
    """A TCP relay in front of the API server that can drop every connection and refuse new ones.

    This is how a lost API server looks to the client (resets, refused connections) while
    the server itself, shared with other tests, keeps running.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.refused = 0
        self._up = True
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._refusal = threading.Condition(self._lock)
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        """Reset every relayed connection and refuse new ones until `up`."""
        with self._lock:
            self._up = False
            doomed, self._open = self._open, []
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def up(self) -> None:
        with self._lock:
            self._up = True

    def wait_refused(self, count: int, timeout: float) -> bool:
        """Wait until the client has tried (and failed) to reconnect `count` times."""
        with self._refusal:
            return self._refusal.wait_for(lambda: self.refused >= count, timeout)

    def close(self) -> None:
        self.down()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._up:
                    self.refused += 1
                    self._refusal.notify_all()
                    conn.close()
                    continue
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._open += [conn, upstream]
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
