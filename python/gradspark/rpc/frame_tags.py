"""The keys and tags that authenticate (or seal) the parameter server's frames.

The wire format (:mod:`gradspark.rpc.wire`) uses HMAC-SHA256 under the per-fit
secret for the handshake's two frames, then per-session keys: GMAC tags for
frames in clear, AES-256-GCM for sealed ones, each with one key per direction
(HKDF-SHA256 of the session key) and the frame's sequence number as nonce.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Tuple

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def tag(key: bytes, context: bytes, sequence: int, header: bytes, *payload) -> bytes:
    """The HMAC of a frame; ``payload`` may come in parts (the same tag as joined)."""
    mac = hmac.new(key, context, hashlib.sha256)
    mac.update(sequence.to_bytes(8, "big"))
    mac.update(header)
    for part in payload:
        mac.update(part)
    return mac.digest()


def session_tag(key: bytes, context: bytes, sequence: int, header: bytes, *payload) -> bytes:
    """The GMAC of a frame after the handshake (AES-256-GCM with the frame as associated
    data and no plaintext; ``key`` is the sending direction's): ``payload`` may come in
    parts (the same tag as joined)."""
    mac = Cipher(algorithms.AES(key), modes.GCM(nonce(sequence))).encryptor()
    for part in (context, header, *payload):
        if len(part):
            mac.authenticate_additional_data(memoryview(part).cast("B"))
    mac.finalize()
    return mac.tag


def session_key(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, server_nonce + client_nonce, hashlib.sha256).digest()


def direction_keys(key: bytes, info: bytes = b"gradspark-ps aes-256-gcm v2"
                   ) -> Tuple[bytes, bytes]:
    """(client-to-server, server-to-client) AES-256 keys of a session key: one key per
    direction, so the two directions' sequence numbers never share a nonce. ``info``
    keeps the sealing keys apart from the tagging ones."""
    both = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=info).derive(key)
    return both[:32], both[32:]


TAGGING_KEYS = b"gradspark-ps gmac v3"


def nonce(sequence: int) -> bytes:
    """The 96-bit AES-GCM nonce of the frame numbered ``sequence`` in its direction."""
    return bytes(4) + sequence.to_bytes(8, "big")
