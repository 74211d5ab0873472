"""Forgotten people out of the snapshot's Mail bodies (``.emlx`` files), beside the Envelope
Index scrub of :mod:`brb_pipeline.privacy.scrub`.

A removed message's body files are deleted. A message that stays in a thread where a forgotten
person wrote or was written to is rewritten: a header field naming one of their addresses loses
it (an address list keeps the others; any other field naming it is dropped), and the body becomes
the text brb reads from it (quoted reply and signature already cut, so a reply quoting their
mail does not keep their words), as one UTF-8 ``text/plain`` part. Reading the rewritten file
gives the same text, so the ingestion of what stays is unchanged; a reply that is nothing but a
quote (read whole, see ``mail_body.cut_text``) is emptied, as the quote may be theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from email.utils import formataddr, getaddresses
from pathlib import Path

from brb_pipeline.sources.mail import body_files
from brb_pipeline.sources.sqlite_ro import FileIO
from brb_pipeline.sources.mail_body import decode_message, emlx_message

#: Header fields holding address lists (RFC 5322 and the delivery headers mail servers add).
_ADDRESS_FIELDS = {
    b"from", b"to", b"cc", b"bcc", b"reply-to", b"sender", b"resent-from", b"resent-to", b"resent-cc",
    b"resent-bcc", b"resent-sender", b"return-path", b"delivered-to", b"x-original-to",
    b"disposition-notification-to", b"return-receipt-to",
}
_TEXT_PLAIN = (b"MIME-Version: 1.0", b'Content-Type: text/plain; charset="utf-8"', b"Content-Transfer-Encoding: 8bit")

IsGone = Callable[[str], bool]


def scrub_bodies(version_dir: Path, doomed: set[int], touched: set[int], is_gone: IsGone,
                 addresses: Iterable[str], io: FileIO | None = None) -> int:
    """Delete the body files of ``doomed`` messages and rewrite those of ``touched`` ones.

    Args:
        version_dir: the snapshot's Mail version folder (``.../Mail/V10``).
        doomed: ROWIDs of the messages removed from the index.
        touched: ROWIDs of the messages kept in a thread a forgotten person was part of.
        is_gone: whether an address (as written in a header) belongs to a forgotten person.
        addresses: their addresses as the index spells them (matched case-insensitively).
        io: reads and writes sealed body files (None: plain files).

    Returns:
        Body files deleted or rewritten.
    """
    needles = {a.lower().encode("utf-8") for a in addresses if a}
    n = 0
    for rowid, _partial, path in list(body_files(version_dir)):
        if rowid in doomed:
            path.unlink()
            n += 1
        elif rowid in touched:
            data = io.read(path) if io is not None else path.read_bytes()
            new = scrubbed_emlx(data, is_gone, needles)
            if new is None:  # truncated or unparsable: nothing brb could read from it is lost
                path.unlink()
            elif new != data and io is not None:
                io.write(path, new)
            elif new != data:
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(new)
                tmp.replace(path)
            n += new != data
    return n


def scrubbed_emlx(data: bytes, is_gone: IsGone, needles: set[bytes]) -> bytes | None:
    """An ``.emlx`` file rewritten as :func:`scrub_bodies` describes, or None when it cannot be
    read (truncated, no length line, no parsable message)."""
    raw = emlx_message(data)
    if raw is None:
        return None
    body = decode_message(raw)
    if body.broken:
        return None
    head, nl = _head(raw)
    fields = [f for f in (_scrub_field(f, is_gone, needles, nl) for f in _fields(head)) if f is not None]
    # a reply that is all quote is read whole (nothing is cut from it): the quote may be theirs
    text = "" if body.quote_kept else (body.text or "")
    message = b"".join(fields) + nl.join((*_TEXT_PLAIN, b"", b"")) + text.encode("utf-8")
    trailer = data[len(data.partition(b"\n")[0]) + 1 + len(raw):]
    return f"{len(message)}\n".encode() + message + trailer


def _head(raw: bytes) -> tuple[bytes, bytes]:
    """The header block (each line with its line end) and the message's line end."""
    ends = [(i, sep) for sep in (b"\r\n\r\n", b"\n\n") if (i := raw.find(sep)) >= 0]
    if not ends:
        nl = b"\r\n" if b"\r\n" in raw else b"\n"
        return (raw if raw.endswith(nl) else raw + nl), nl
    i, sep = min(ends)
    nl = sep[: len(sep) // 2]
    return raw[: i + len(nl)], nl


def _fields(head: bytes) -> list[bytes]:
    """Header fields, each with its folded continuation lines."""
    fields: list[bytes] = []
    for line in head.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += line
        else:
            fields.append(line)
    return fields


def _scrub_field(field: bytes, is_gone: IsGone, needles: set[bytes], nl: bytes) -> bytes | None:
    """The field without the forgotten addresses (None: drop it). ``Content-*`` fields go: the
    body is replaced by plain text."""
    name, _, value = field.partition(b":")
    key = name.strip().lower()
    if key.startswith(b"content-") or key == b"mime-version":
        return None
    low = field.lower()
    mentioned = any(n in low for n in needles)
    if key not in _ADDRESS_FIELDS:
        return None if mentioned else field
    pairs = getaddresses([" ".join(value.decode("utf-8", "replace").split())])
    kept = [(n, a) for n, a in pairs
            if a and not is_gone(a) and not any(x in f"{n} {a}".lower().encode("utf-8") for x in needles)]
    if not mentioned and len(kept) == len(pairs):
        return field
    if not kept:
        return None
    return name + b": " + ", ".join(formataddr(p) for p in kept).encode("utf-8") + nl
