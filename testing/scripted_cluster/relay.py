"""A TCP relay from a listening socket inside a network namespace to a port on the host's
loopback: how the MPI Operator, alone in a namespace with only ``lo``, reaches kube-apiserver
(TLS passes through untouched). The socket is created by a thread that enters the namespace
(``setns(2)`` acts on the calling thread only) and returns; a socket keeps the namespace it was
made in, so accepting and relaying run in the host's."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def listen_in(netns: str, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` inside ``netns`` (by ``ip netns`` name)."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def run() -> None:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(64)
                made.append(sock)
            finally:
                _setns(home)
        except BaseException as err:
            failed.append(err)
        finally:
            os.close(target)
            os.close(home)

    thread = threading.Thread(target=run, name=f"enter-{netns}")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


class Relay:
    """Accept on ``listener``; each connection relayed to ``127.0.0.1:target_port`` (host)."""

    def __init__(self, listener: socket.socket, target_port: int) -> None:
        self.listener = listener
        self.target_port = target_port
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="relay", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                inner, _ = self.listener.accept()
            except OSError:
                return
            try:
                outer = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                inner.close()
                continue
            for source, sink in ((inner, outer), (outer, inner)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
