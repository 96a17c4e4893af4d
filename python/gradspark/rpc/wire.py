"""The parameter server's wire format: authenticated, length-prefixed binary frames.

A frame is a 12-byte header, a payload and a tag::

    header  = magic "GSPS" | version u8 | kind u8 | dtype u8 | pad u8 | payload length u32
    payload = fixed-size fields of the kind (network order) | array bytes (little-endian)
    tag     = HMAC-SHA256(secret, context | sequence u64 | header | payload)    32 bytes,
              the handshake's two frames
            = GMAC(direction key, nonce = sequence; context | header | payload)  16 bytes,
              every later frame (AES-256-GCM over no plaintext, the frame as
              associated data)

Nothing is unpickled: arrays are little-endian buffers read with
``np.frombuffer``. The dtype byte says how the array is encoded
(:mod:`gradspark.comm.compression`): dense float64 or float32; dense
float16 preceded by a float64 scale; or sparse, ``nnz`` uint32 indices
(strictly increasing) followed by ``nnz`` float64 or float32 values; or
keys alone, strictly increasing uint32 positions (a PULL asking for those
weights only: the WEIGHTS reply then holds their values, in key order). The
length prefix is checked against a per-connection limit before anything is
allocated. The handshake proves both ends hold the per-fit
secret without sending it; each direction numbers its frames, so a frame cannot
be replayed, reordered or moved to another connection::

    server -> CHALLENGE(server nonce, flags)   tagged with the secret
    client -> HELLO(worker, attempt, nonce)    tagged with the secret, context = server nonce
    both:  key = HMAC(secret, server nonce | client nonce); later frames use it

Later frames are tagged under a key per direction (HKDF-SHA256 of the session
key) with GMAC rather than HMAC: over multi-megabyte weights and gradients
HMAC-SHA256 cost 4.2 ms per 6.8 MB frame, GMAC 0.4 ms, and a resident
round tags and checks four such frames one after the other. The nonce is the
frame's sequence number, unique per key.

When the CHALLENGE's flags say ``ENCRYPTED`` (the server follows Spark's own
settings, :mod:`gradspark.rpc.security`), every frame after HELLO is sealed
instead of tagged: the payload is AES-256-GCM ciphertext under a key for its
direction (HKDF of the session key), the nonce is the frame's sequence number
and the header and context are the associated data; the 16-byte GCM tag
replaces the GMAC. A stranger on the network then sees frame kinds and
lengths, never values. The CHALLENGE is tagged with the secret, so no one
without it can turn encryption off.
"""

from __future__ import annotations

import dataclasses
import enum
import hmac
import socket
import struct
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
from cryptography.exceptions import InvalidTag

from gradspark.comm.compression import F16, F32, F64, INDEX, Encoded
from gradspark.rpc.frame_tags import TAGGING_KEYS, direction_keys, nonce, session_tag, tag

MAGIC = b"GSPS"
VERSION = 3  # 2: the CHALLENGE's flags, sealed frames; 3: GMAC after the handshake
HEADER = struct.Struct("!4sBBBxI")
TAG_SIZE = 32  # HMAC-SHA256: the handshake's frames
SESSION_TAG_SIZE = 16  # GMAC: every later frame in clear
SEAL_SIZE = 16  # AES-GCM's tag
ENCRYPTED = 1  # CHALLENGE flag: later frames are sealed
NONCE_SIZE = 32
HANDSHAKE_LIMIT = 256  # payload bytes allowed before a connection has authenticated
ERROR_LIMIT = 4096  # an ERROR frame's text, whatever the connection's array limit


class Kind(enum.IntEnum):
    CHALLENGE = 1
    HELLO = 2
    WELCOME = 3
    PULL = 4
    WEIGHTS = 5
    PUSH = 6
    ACK = 7
    DONE = 8
    ERROR = 9
    REPORT = 10


# The fixed fields of each kind; whatever follows them is the array (or ERROR's text).
FIELDS = {
    Kind.CHALLENGE: struct.Struct(f"!{NONCE_SIZE}sB"),  # server nonce, flags
    Kind.HELLO: struct.Struct(f"!II{NONCE_SIZE}s"),  # worker, task attempt, client nonce
    Kind.WELCOME: struct.Struct("!QQ"),  # clock to start at, vector length
    Kind.PULL: struct.Struct("!"),
    Kind.WEIGHTS: struct.Struct("!QQB"),  # worker's clock, version (updates applied), stop
    Kind.PUSH: struct.Struct("!QQddQ"),  # clock, version pulled, loss sum, weight sum, rows
    Kind.ACK: struct.Struct("!B"),  # accepted
    Kind.DONE: struct.Struct("!"),
    Kind.REPORT: struct.Struct("!QQQ"),  # step, attempt, what (the handler's code); then values
    Kind.ERROR: struct.Struct("!"),
}

# dtype byte -> (value dtype, sparse). 0: no array.
ENCODINGS = {1: (F64, False), 2: (F32, False), 3: (F16, False), 4: (F64, True), 5: (F32, True)}
ENCODING_CODES = {value: code for code, value in ENCODINGS.items()}
KEYS = 6  # dtype byte of a keys-only array (uint32)
SCALE = struct.Struct("<d")  # a float16 array's scale, before its values


class ProtocolError(Exception):
    """A frame that is malformed, unauthenticated, oversized or out of order."""


@dataclass
class Message:
    kind: Kind
    fields: Tuple
    array: Optional[np.ndarray] = None  # dense float64 / float32 arrays, as float64
    text: str = ""
    encoded: Optional[Encoded] = None  # float16 and sparse arrays, decoded by vector()
    keys: Optional[np.ndarray] = None  # a keys-only array, checked by keys_below()

    def keys_below(self, size: int) -> Optional[np.ndarray]:
        """The keys (None if the frame had none); ProtocolError unless strictly increasing
        and below ``size``."""
        if self.keys is not None and not _increasing_below(self.keys, size):
            raise ProtocolError(f"keys not strictly increasing below {size}")
        return self.keys

    def vector(self, size: int) -> np.ndarray:
        """The array as ``size`` float64 values; ProtocolError if it cannot be that."""
        if self.encoded is None:
            length = 0 if self.array is None else self.array.shape[0]
            if length != size:
                raise ProtocolError(f"vector of length {length}, expected {size}")
            return self.array
        indices = self.encoded.indices
        if indices is not None and not _increasing_below(indices, size):
            raise ProtocolError(f"sparse indices not strictly increasing below {size}")
        elif indices is None and self.encoded.values.shape[0] != size:
            raise ProtocolError(f"vector of length {self.encoded.values.shape[0]}, "
                                f"expected {size}")
        return dataclasses.replace(self.encoded, size=size).decode()


def _increasing_below(indices: np.ndarray, size: int) -> bool:
    return not indices.size or (int(indices[-1]) < size
                                and not np.any(np.diff(indices.astype(np.int64)) <= 0))


def _buffer(array: np.ndarray) -> memoryview:
    """The bytes of a contiguous array, without copying them."""
    return memoryview(np.ascontiguousarray(array)).cast("B")


def encode_array(array) -> Tuple[int, List]:
    """(dtype byte, buffers in order) of an ndarray (dense; uint32: keys) or an
    :class:`Encoded`. The buffers are views: a frame's array is never copied before
    it is tagged and sent (a fresh multi-megabyte copy costs more than the HMAC)."""
    if not isinstance(array, Encoded):
        if array.dtype == INDEX:
            return KEYS, [_buffer(array)]
        little = array.dtype.newbyteorder("<")
        return ENCODING_CODES[(little, False)], [_buffer(array.astype(little, copy=False))]
    code = ENCODING_CODES[(array.values.dtype, array.indices is not None)]
    parts: List = [SCALE.pack(array.scale)] if array.values.dtype == F16 else []
    if array.indices is not None:
        parts.append(_buffer(array.indices.astype(INDEX, copy=False)))
    parts.append(_buffer(array.values))
    return code, parts


def decode_array(code: int, body: bytes, kind: "Kind"):
    """The inverse of :func:`encode_array`: a dense float64 array, keys, or an Encoded."""
    if code == KEYS:
        if len(body) % INDEX.itemsize:
            raise ProtocolError(f"{kind.name} keys of {len(body)} bytes")
        return np.frombuffer(body, dtype=INDEX)
    dtype, sparse = ENCODINGS[code]
    scale = 1.0
    if dtype == F16:
        if len(body) < SCALE.size:
            raise ProtocolError(f"{kind.name} float16 array without its scale")
        (scale,) = SCALE.unpack_from(body)
        if not (np.isfinite(scale) and scale > 0):
            raise ProtocolError(f"{kind.name} float16 array with scale {scale}")
        body = body[SCALE.size:]
    entry = dtype.itemsize + (INDEX.itemsize if sparse else 0)
    if len(body) % entry:
        raise ProtocolError(f"{kind.name} array of {len(body)} bytes is not a whole "
                            f"number of {entry}-byte entries")
    count = len(body) // entry
    if sparse:
        indices = np.frombuffer(body, dtype=INDEX, count=count)
        values = np.frombuffer(body, dtype=dtype, offset=INDEX.itemsize * count)
        return Encoded(-1, values, indices)  # the size is the receiver's to check
    values = np.frombuffer(body, dtype=dtype)
    if dtype == F16:
        return Encoded(count, values, scale=scale)
    # A received body is its own (writable, aligned) buffer: float64 is used in place.
    aligned = values.flags.writeable and values.flags.aligned
    return values.astype(np.float64, copy=not aligned)


def keep_alive(sock: socket.socket, idle: int = 30, interval: int = 10, count: int = 3) -> None:
    """TCP keepalive: a peer that vanishes without closing (a host lost, a partition)
    breaks the connection after ``idle + interval * count`` s of silence, where a
    blocking read would otherwise wait for ever."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                          ("TCP_KEEPCNT", count)):
        if hasattr(socket, option):  # Linux; elsewhere the system's defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        n = sock.recv_into(view[received:])
        if n == 0:
            if received == 0 and size == HEADER.size:
                raise EOFError("connection closed")
            raise ProtocolError(f"truncated frame: connection closed after {received} of "
                                f"{size} bytes")
        received += n
    return buffer


def _send_parts(sock: socket.socket, parts: List) -> None:
    """``sendall`` of the concatenated parts, gathered by the kernel (no joined copy)."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    while views:
        sent = sock.sendmsg(views[:64])  # IOV_MAX is at least 1024 on Linux
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if views and sent:
            views[0] = views[0][sent:]


class Channel:
    """One side of a connection: frames out and in, tagged and numbered."""

    def __init__(self, sock: socket.socket, key: bytes, limit: int = HANDSHAKE_LIMIT) -> None:
        self.sock = sock
        self.key = key
        self.context = b""
        self.limit = limit  # largest payload accepted, checked before reading it
        self.sent = 0
        self.received = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.last_received_bytes = 0
        self._seal = self._open = None  # AES-GCM, once the session is encrypted
        self._tag_keys: Optional[Tuple[bytes, bytes]] = None  # GMAC (send, receive)

    @property
    def encrypted(self) -> bool:
        return self._seal is not None

    def authenticate(self, server: bool) -> None:
        """Tag every later frame with GMAC under this session's direction keys (after the
        handshake's HELLO; a session in clear)."""
        to_server, to_client = direction_keys(self.key, TAGGING_KEYS)
        self._tag_keys = (to_client, to_server) if server else (to_server, to_client)

    def next_tag(self, header: bytes, *payload) -> bytes:
        """The tag of the next frame this side sends, given its header and payload (a
        session in clear: GMAC after the handshake, HMAC during it)."""
        if self._tag_keys is not None:
            return session_tag(self._tag_keys[0], self.context, self.sent, header, *payload)
        return tag(self.key, self.context, self.sent, header, *payload)

    def encrypt(self, server: bool) -> None:
        """Seal every later frame under this session's key (after the handshake's HELLO)."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        to_server, to_client = direction_keys(self.key)
        self._seal = AESGCM(to_client if server else to_server)
        self._open = AESGCM(to_server if server else to_client)

    def send(self, kind: Kind, fields: Tuple = (), array=None, text: str = "") -> None:
        """``array``: an ndarray (sent dense) or an :class:`Encoded` message.

        The array is tagged and sent from its own buffer, so it must not change until
        ``send`` returns: every handler publishes a new map per version, never an
        array it later updates in place (the tag would no longer match).
        """
        body: List = []
        dtype = 0
        if array is not None:
            dtype, body = encode_array(array)
        elif text:
            body = [text.encode("utf-8", "replace")]
        payload = [FIELDS[kind].pack(*fields), *body]
        header = HEADER.pack(MAGIC, VERSION, int(kind), dtype,
                             sum(len(part) for part in payload))
        if self._seal is not None:  # ciphertext, then its tag
            frame = [header, self._seal.encrypt(nonce(self.sent), b"".join(payload),
                                                self.context + header)]
        else:
            frame = [header, *payload, self.next_tag(header, *payload)]
        _send_parts(self.sock, frame)
        self.sent += 1
        self.bytes_sent += sum(len(part) for part in frame)

    def recv(self) -> Message:
        header = _recv_exactly(self.sock, HEADER.size)
        magic, version, kind, dtype, length = HEADER.unpack(header)
        if magic != MAGIC or version != VERSION:
            raise ProtocolError("not a gradspark frame (bad magic or version)")
        if kind not in Kind._value2member_map_ or (dtype and dtype not in ENCODINGS
                                                   and dtype != KEYS):
            raise ProtocolError(f"unknown frame kind {kind} or dtype {dtype}")
        kind = Kind(kind)
        layout = FIELDS[kind]
        limit = max(self.limit, ERROR_LIMIT) if kind == Kind.ERROR else self.limit
        if length > limit:
            raise ProtocolError(f"frame of {length} bytes exceeds the limit of {limit}")
        if self._open is not None:
            sealed = _recv_exactly(self.sock, length + SEAL_SIZE)
            try:
                payload = self._open.decrypt(nonce(self.received), sealed,
                                             self.context + header)
            except InvalidTag:
                raise ProtocolError("authentication failed (bad tag)") from None
            size = length + SEAL_SIZE
            head, body = payload[:layout.size], memoryview(payload)[layout.size:]
        else:
            # The fields and the array are read into buffers of their own, so the array
            # is aligned and used where it lies (no copy of a multi-megabyte body).
            head = _recv_exactly(self.sock, min(length, layout.size))
            body = _recv_exactly(self.sock, length - len(head))
            if self._tag_keys is not None:
                mac = _recv_exactly(self.sock, SESSION_TAG_SIZE)
                expected = session_tag(self._tag_keys[1], self.context, self.received,
                                       header, head, body)
            else:
                mac = _recv_exactly(self.sock, TAG_SIZE)
                expected = tag(self.key, self.context, self.received, header, head, body)
            if not hmac.compare_digest(mac, expected):
                raise ProtocolError("authentication failed (bad tag)")
            size = length + len(mac)
        self.received += 1
        self.last_received_bytes = HEADER.size + size
        self.bytes_received += self.last_received_bytes
        if len(head) < layout.size:
            raise ProtocolError(f"{kind.name} frame too short ({len(head)} bytes)")
        fields = layout.unpack_from(head)
        if kind == Kind.ERROR:
            return Message(kind, fields, text=bytes(body).decode("utf-8", "replace"))
        if dtype:
            array = decode_array(dtype, body, kind)
            if dtype == KEYS:
                return Message(kind, fields, keys=array)
            if isinstance(array, Encoded):
                return Message(kind, fields, encoded=array)
            return Message(kind, fields, array)
        if body:
            raise ProtocolError(f"{kind.name} frame has {len(body)} unexpected bytes")
        return Message(kind, fields)

    def expect(self, *kinds: Kind) -> Message:
        message = self.recv()
        if message.kind == Kind.ERROR and Kind.ERROR not in kinds:
            raise ProtocolError(f"peer reported an error: {message.text}")
        if message.kind not in kinds:
            raise ProtocolError(f"expected {[k.name for k in kinds]}, got {message.kind.name}")
        return message
