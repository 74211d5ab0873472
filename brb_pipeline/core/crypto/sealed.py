"""The sealed-file format: ``BRBSEAL1`` + a 12-byte random nonce + AES-256-GCM ciphertext and tag.

One nonce per write (a file is never appended to in place), so a 96-bit random nonce under one
key is safe for far more writes than a home ever makes. The tag authenticates the whole file: a
truncated, damaged or wrong-key file is refused, never half-read.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
from collections.abc import Iterable
from typing import BinaryIO

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from brb_pipeline.core.errors import EncryptionKeyError, StoreError

MAGIC = b"BRBSEAL1"
NONCE_BYTES = 12
KEY_BYTES = 32
#: Plaintext bytes encrypted per step by :func:`seal_to`: bounds the extra memory of a large write.
STREAM_STEP = 8 << 20


def subkey(key: bytes, purpose: str) -> bytes:
    """A 256-bit key for one purpose (files, DuckDB, the key check) derived from the data key."""
    return hmac.new(key, b"brb-pipeline " + purpose.encode(), hashlib.sha256).digest()


def key_check(key: bytes) -> str:
    """A public fingerprint of ``key``: tells a wrong key from the right one, reveals nothing."""
    return subkey(key, "key check").hex()[:32]


def is_sealed(head: bytes) -> bool:
    """Whether bytes (at least the first 8 of a file) start a sealed file."""
    return head[: len(MAGIC)] == MAGIC


def seal(key: bytes, data: bytes) -> bytes:
    """``data`` encrypted under the files subkey of ``key`` (in memory: :func:`seal_to` writes it)."""
    out = io.BytesIO()
    seal_to(key, [data], out)
    return out.getvalue()


def seal_to(key: bytes, parts: Iterable[bytes | bytearray | memoryview], out: BinaryIO) -> None:
    """Write the sealed form of the concatenated ``parts`` to ``out``, step by step.

    The one writer of the format: ``MAGIC``, a random nonce, the AES-256-GCM ciphertext (with
    ``MAGIC`` as associated data) and its tag, as :func:`unseal` reads it. Step by step, so no
    second copy of the data is made in memory: a snapshot of a large chat.db is sealed in place.
    """
    nonce = os.urandom(NONCE_BYTES)
    enc = Cipher(algorithms.AES(subkey(key, "files")), modes.GCM(nonce)).encryptor()
    enc.authenticate_additional_data(MAGIC)
    out.write(MAGIC + nonce)
    for part in parts:
        view = memoryview(part).cast("B")
        for i in range(0, len(view), STREAM_STEP):
            out.write(enc.update(view[i:i + STREAM_STEP]))
    out.write(enc.finalize())
    out.write(enc.tag)


def unseal(key: bytes, blob: bytes, what: str = "a file") -> bytes:
    """The plaintext of a sealed blob.

    Raises:
        StoreError: not a sealed file (or cut short).
        EncryptionKeyError: the tag does not verify: a different key, or a damaged file.
    """
    if not is_sealed(blob) or len(blob) < len(MAGIC) + NONCE_BYTES + 16:
        raise StoreError(f"{what} is not a brb encrypted file (or was cut short)")
    nonce = bytes(blob[len(MAGIC): len(MAGIC) + NONCE_BYTES])
    body = memoryview(blob)[len(MAGIC) + NONCE_BYTES:]  # a view: no copy of a large file
    try:
        return AESGCM(subkey(key, "files")).decrypt(nonce, body, MAGIC)
    except Exception:  # cryptography's InvalidTag: the key is not this file's, or it was altered
        raise EncryptionKeyError(f"{what} cannot be decrypted with this home's key (a different key, "
                                 "or the file was damaged)") from None
