"""A minimal NBD client (fixed newstyle handshake, simple replies): reads and writes a model disk from the host.

Enough to time the nbdkit plugin without a guest (tests/vm/test_model_disks.py, benchmarks/model_disks.py).
"""

from __future__ import annotations

import socket
import struct

_REQUEST = 0x25609513
_REPLY = 0x67446698
_OPT_EXPORT_NAME = 1
_CMD_READ, _CMD_WRITE, _CMD_DISC = 0, 1, 2


class NbdClient:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        head = self._recv(18)
        if head[:16] != b"NBDMAGICIHAVEOPT":
            raise OSError(f"{path}: not a newstyle NBD server")
        self.sock.sendall(struct.pack(">I", 3))  # fixed newstyle, no zeroes
        self.sock.sendall(b"IHAVEOPT" + struct.pack(">II", _OPT_EXPORT_NAME, 0))
        self.size, _flags = struct.unpack(">QH", self._recv(10))
        self.handle = 0

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise OSError("NBD server closed the connection")
            data += chunk
        return bytes(data)

    def _request(self, cmd: int, offset: int, length: int, payload: bytes = b"") -> None:
        self.handle += 1
        self.sock.sendall(struct.pack(">IHHQQI", _REQUEST, 0, cmd, self.handle, offset, length) + payload)
        magic, error, handle = struct.unpack(">IIQ", self._recv(16))
        if magic != _REPLY or handle != self.handle or error:
            raise OSError(f"NBD request {cmd} at {offset}+{length}: error {error}")

    def read(self, offset: int, length: int) -> bytes:
        self._request(_CMD_READ, offset, length)
        return self._recv(length)

    def write(self, offset: int, data: bytes) -> None:
        self._request(_CMD_WRITE, offset, len(data), data)

    def close(self) -> None:
        self.sock.sendall(struct.pack(">IHHQQI", _REQUEST, 0, _CMD_DISC, 0, 0, 0))
        self.sock.close()
