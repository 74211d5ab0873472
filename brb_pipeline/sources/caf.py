"""The length of a Core Audio Format (``.caf``) file from its header chunks, never its audio.

Messages stores a voice message as a ``.caf`` attachment (``uti`` ``com.apple.coreaudio-format``)
and chat.db keeps no length for it anywhere: no column of ``message`` or ``attachment`` holds
one, and the attachment ranges of ``attributedBody`` carry the transfer guid, the file name, an
inline size and the transcription, not a duration. So a voice message's length needs its file;
it is read only when the person opted in (``voice_lengths``), and then only its header.

Apple's CAF layout (Core Audio Format Specification): an 8-byte file header (``caff``, version
1, flags), then chunks, each a 4-character type and a big-endian signed 64-bit size. ``desc``
(first) holds the sample rate (float64), format id, flags, bytes per packet, frames per packet,
channels and bits per channel (uint32 each). A variable-packet format (Opus, AAC) has a ``pakt``
chunk whose first fields are the packet count (int64), the valid frames (int64), the priming and
the remainder frames (int32 each). A constant one has bytes and frames per packet, and the
``data`` chunk's size (-1 while it runs to the end of the file; 4 bytes of it are an edit count).

Only these few fields are read, with seeks past every other chunk: at most a few hundred bytes
of any file, whatever its size.
"""

from __future__ import annotations

import os
import struct

_MAX_CHUNKS = 64  # a real voice message has a handful; more is not a CAF file we can trust
_MAX_SECONDS = 24 * 3600


def caf_seconds(path: str | os.PathLike) -> float | None:
    """The length in seconds of the CAF file at ``path``, or None when it cannot be told
    (not a CAF file, no ``desc``, a zero sample rate, no frame count, unreadable). Never raises
    for a bad file; reads header fields only."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if f.read(8)[:4] != b"caff":
                return None
            return _walk(f, size)
    except (OSError, struct.error, ValueError, OverflowError):
        return None


def _walk(f, size: int) -> float | None:
    rate = bytes_per_packet = frames_per_packet = None
    valid_frames = data_bytes = None
    pos = 8
    for _ in range(_MAX_CHUNKS):
        head = f.read(12)
        if len(head) < 12:
            break
        kind, length = head[:4], struct.unpack(">q", head[4:])[0]
        body = pos + 12
        if kind == b"desc":
            rate, _fmt, _flags, bytes_per_packet, frames_per_packet = struct.unpack(">d4sIII", f.read(24))
        elif kind == b"pakt":
            packets, valid, priming, remainder = struct.unpack(">qqii", f.read(24))
            valid_frames = valid if valid > 0 else (
                packets * frames_per_packet - priming - remainder if packets > 0 and frames_per_packet else None)
        elif kind == b"data":
            data_bytes = (size - body if length < 0 else length) - 4  # the edit count
        if length < 0:  # only data may run to the end of the file
            break
        pos = body + length
        if pos >= size:
            break
        f.seek(pos)
    return _seconds(rate, bytes_per_packet, frames_per_packet, valid_frames, data_bytes)


def _seconds(rate: float | None, bytes_per_packet: int | None, frames_per_packet: int | None,
             valid_frames: int | None, data_bytes: int | None) -> float | None:
    if not rate or rate <= 0:
        return None
    frames = valid_frames
    if frames is None and bytes_per_packet and frames_per_packet and data_bytes and data_bytes > 0:
        frames = data_bytes // bytes_per_packet * frames_per_packet
    if not frames or frames <= 0:
        return None
    seconds = frames / rate
    return seconds if seconds <= _MAX_SECONDS else None


def write_caf(path: str | os.PathLike, seconds: float, *, rate: float = 48_000.0, opus: bool = True) -> None:
    """A minimal CAF file of ``seconds`` (for the demo and tests): Opus-like with a ``pakt``
    chunk (20 ms packets), or 16-bit mono PCM without one. The audio bytes are zeros."""
    frames = int(round(seconds * rate))
    if opus:
        fpp = int(rate // 50)
        packets = -(-frames // fpp)
        desc = struct.pack(">d4sIIIII", rate, b"opus", 0, 0, fpp, 1, 0)
        pakt = struct.pack(">qqii", packets, frames, 0, packets * fpp - frames) + bytes(packets)
        data = struct.pack(">I", 0) + bytes(packets * 8)
        chunks = [(b"desc", desc), (b"pakt", pakt), (b"data", data)]
    else:
        desc = struct.pack(">d4sIIIII", rate, b"lpcm", 12, 2, 1, 1, 16)
        chunks = [(b"desc", desc), (b"data", struct.pack(">I", 0) + bytes(frames * 2))]
    with open(path, "wb") as f:
        f.write(b"caff" + struct.pack(">HH", 1, 0))
        for kind, body in chunks:
            f.write(kind + struct.pack(">q", len(body)) + body)
