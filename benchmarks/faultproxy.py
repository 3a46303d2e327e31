"""A loopback TCP proxy that injects network faults between a client and a server.

Shared by adb's fault tests (tests/faults/test_faults.py) and the ``faults`` benchmark
scenario, which runs the same faults against adb and its peers. No root needed. ``FaultProxy(target_host, target_port)`` listens on 127.0.0.1
(``proxy.port``) and forwards; faults: ``cut()`` resets every open connection,
``blackhole(True)`` keeps sockets open but forwards nothing, ``delay(s)`` holds
every chunk that long, ``refuse(True)`` resets new connections at once,
``refuse_next(n)`` resets the next ``n`` new connections only, ``deaf(True)``
accepts new connections and never answers them.
"""

import socket
import struct
import threading
import time
from typing import Union

#: a forwarded pair (client, server), or a client the proxy never answers (deaf)
Pair = Union[tuple[socket.socket, socket.socket], tuple[socket.socket]]


class FaultProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.pairs: list[Pair] = []
        self.lock = threading.Lock()
        self.black = threading.Event()
        self.delay_s = 0.0
        self.refusing = self.deafness = False
        self.to_refuse = 0  # new connections still to reset (refuse_next)
        self.refused = 0  # new connections reset so far
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- faults ------------------------------------------------------------------------
    def cut(self) -> int:
        """Reset every open connection (RST), as a dead router or ``ss -K`` would;
        return how many client connections were cut."""
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)
        return len(pairs)

    def blackhole(self, on: bool = True) -> None:
        """Keep every socket open but forward nothing (a half-open peer) until turned off."""
        if on:
            self.black.set()
        else:
            self.black.clear()

    def delay(self, seconds: float) -> None:
        self.delay_s = seconds

    def refuse(self, on: bool = True) -> None:
        self.refusing = on

    def refuse_next(self, count: int) -> None:
        """Reset the next ``count`` new connections at once, then forward again."""
        with self.lock:
            self.to_refuse = count

    def deaf(self, on: bool = True) -> None:
        self.deafness = on

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()

    # -- plumbing ----------------------------------------------------------------------
    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                refuse = self.refusing or self.to_refuse > 0
                self.to_refuse = max(0, self.to_refuse - 1)
                self.refused += refuse
            if refuse:
                _reset(client)
                continue
            if self.deafness:
                with self.lock:
                    self.pairs.append((client,))
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self.lock:
                self.pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while self.black.is_set() and not self.closed:
                    time.sleep(0.01)  # swallow nothing, forward nothing: the bytes wait
                if self.delay_s:
                    time.sleep(self.delay_s)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _reset(sock: socket.socket) -> None:
    """Drop the connection at once: wake the pump blocked on it, then reset (linger 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
