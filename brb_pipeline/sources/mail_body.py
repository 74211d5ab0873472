"""Mail bodies: the ``.emlx`` file format, MIME decoding to plain text, quote and signature cutting.

An ``.emlx`` file is a first line with the byte length of the RFC 822 message, the message
itself, then Apple's XML property list (flags). The message is parsed with the stdlib ``email``
package; the text is the first ``text/plain`` part that is not an attachment, else the first
``text/html`` part turned into text (scripts, styles and ``<blockquote>`` quotes dropped). Then
the quoted reply ("On ... wrote:" and what follows, ``>`` lines) and the signature (from a
``-- `` line) are cut, so a thread's messages do not repeat each other's text.

Nothing here logs or returns text other than the decoded body itself.
"""

from __future__ import annotations

import email
import email.policy
import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from html.parser import HTMLParser
from pathlib import Path

#: Headers that mark a mailing list or automated mail (RFC 2369, RFC 3834, common practice).
LIST_HEADERS = ("List-Id", "List-Unsubscribe", "List-Post")
_BULK_PRECEDENCE = {"bulk", "list", "junk"}
_NOREPLY = re.compile(r"^(no[-_.]?reply|do[-_.]?not[-_.]?reply|mailer-daemon|postmaster|bounces?|notifications?)"
                      r"([+-].*)?@", re.IGNORECASE)

# "On <date>, <name> wrote:" may wrap over two lines; the forms of a few mail clients' locales.
_ATTRIBUTION = re.compile(
    r"^(On\b.{0,300}?\bwrote:[ \t]*$"
    r"|Am\b.{0,300}?\bschrieb.{0,80}?:[ \t]*$"
    r"|Le\b.{0,300}?\ba écrit\s?:[ \t]*$"
    r"|El\b.{0,300}?\bescribió:[ \t]*$"
    r"|.{0,300}?tarihinde.{0,300}?şunu yazdı:[ \t]*$"
    r"|-{2,}\s*Original Message\s*-{2,}"
    r"|_{5,}[ \t]*\n[ \t]*From:)",
    re.IGNORECASE | re.MULTILINE | re.DOTALL,
)
_SIGNATURE = re.compile(r"^-- ?$", re.MULTILINE)
_MOBILE_FOOTER = re.compile(r"^Sent from my (iPhone|iPad|Android|mobile device)\s*$", re.IGNORECASE | re.MULTILINE)
_BLANK_RUN = re.compile(r"\n{3,}")


@dataclass
class Body:
    """A decoded body and what decoding it ran into (counts only).

    Attributes:
        text: the cut plain text (None when there is no text part or nothing is left).
        automated: a list/bulk/auto-submitted header is present.
        broken: the file is truncated or the message cannot be parsed (``text`` is None).
        replaced: some bytes did not decode in the declared charset and were replaced.
        html: the text came from an HTML part.
        quote_cut, signature_cut: a quoted reply / a signature was removed.
    """

    text: str | None = None
    automated: bool = False
    broken: bool = False
    replaced: bool = False
    html: bool = False
    quote_cut: bool = False
    signature_cut: bool = False


def is_noreply(address: str | None) -> bool:
    """True for ``noreply@``, ``do-not-reply@``, ``mailer-daemon@``, ``notifications@`` senders."""
    return bool(address and _NOREPLY.match(address))


def read_emlx(path: Path, read: Callable[[Path], bytes] | None = None) -> Body:
    """Decode one ``.emlx`` file into a :class:`Body` (never raises on bad content).

    Args:
        path: the ``<ROWID>.emlx`` or ``<ROWID>.partial.emlx`` file.
        read: how to get its bytes (a sealed snapshot copy); None reads the file as it is.
    """
    try:
        data = read(Path(path)) if read is not None else Path(path).read_bytes()
    except OSError:
        return Body(broken=True)
    raw = emlx_message(data)
    if raw is None:
        return Body(broken=True)
    return decode_message(raw)


def emlx_message(data: bytes) -> bytes | None:
    """The RFC 822 bytes of an ``.emlx`` file, or None when the length line is bad or the file
    holds fewer bytes than it announces (truncated)."""
    first, sep, rest = data.partition(b"\n")
    try:
        n = int(first.strip())
    except ValueError:
        return None
    if not sep or n <= 0 or len(rest) < n:
        return None
    return rest[:n]


def decode_message(raw: bytes) -> Body:
    """Decode an RFC 822 message's body to cut plain text, with its list/automated flags."""
    try:
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    except Exception:  # the parser is lenient; anything it still rejects is a broken body
        return Body(broken=True)
    if not msg.keys():
        return Body(broken=True)
    body = Body(automated=is_automated(msg))
    part, is_html = _text_part(msg)
    if part is None:
        return body
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        return Body(broken=True, automated=body.automated)
    if not isinstance(payload, bytes):
        return body
    text, body.replaced = _decode(payload, part.get_content_charset())
    if is_html:
        text, body.html = html_to_text(text), True
    body.text, body.quote_cut, body.signature_cut = cut_text(text)
    return body


def is_automated(msg: Message) -> bool:
    """A mailing list (``List-*``), bulk (``Precedence``) or auto-submitted (RFC 3834) message."""
    if any(msg.get(h) for h in LIST_HEADERS):
        return True
    if str(msg.get("Precedence", "")).strip().lower() in _BULK_PRECEDENCE:
        return True
    auto = str(msg.get("Auto-Submitted", "")).strip().lower()
    return bool(auto) and auto != "no"


def _text_part(msg: Message) -> tuple[Message | None, bool]:
    """The first inline ``text/plain`` part, else the first inline ``text/html`` part."""
    plain = html_part = None
    for part in msg.walk():
        if part.is_multipart():
            continue
        if part.get_content_disposition() == "attachment" or part.get_filename():
            continue
        ctype = part.get_content_type()
        if ctype == "text/plain" and plain is None:
            plain = part
        elif ctype == "text/html" and html_part is None:
            html_part = part
    if plain is not None:
        return plain, False
    return html_part, html_part is not None


def _decode(payload: bytes, charset: str | None) -> tuple[str, bool]:
    """Bytes in the declared charset (else UTF-8); (text, whether bytes were replaced)."""
    for cs in (charset, "utf-8"):
        if not cs:
            continue
        try:
            return payload.decode(cs), False
        except (LookupError, UnicodeDecodeError):
            continue
    try:
        return payload.decode(charset or "utf-8", "replace"), True
    except LookupError:
        return payload.decode("utf-8", "replace"), True


class _HtmlText(HTMLParser):
    """Text of an HTML body: block elements become line breaks; script, style, head and quoted
    ``<blockquote>`` content is dropped."""

    _SKIP = {"script", "style", "head", "title", "blockquote"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "hr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self._SKIP:
            self.skip += 1
        elif tag in self._BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self._BLOCK:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.out.append(data)


def html_to_text(markup: str) -> str:
    """Plain text of an HTML body (entities resolved, whitespace within lines collapsed)."""
    p = _HtmlText()
    try:
        p.feed(markup)
        p.close()
    except Exception:  # malformed markup: fall back to the tag-stripped text
        return html.unescape(re.sub(r"<[^>]+>", " ", markup))
    lines = (" ".join(line.split()) for line in "".join(p.out).split("\n"))
    return "\n".join(lines)


def cut_text(text: str) -> tuple[str | None, bool, bool]:
    """Cut the quoted reply and the signature off a plain-text body.

    Returns:
        (text or None when nothing is left, a quote was cut, a signature was cut).
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    quote = False
    m = _ATTRIBUTION.search(text)
    if m:
        text, quote = text[: m.start()], True
    kept = [line for line in text.split("\n") if not line.lstrip().startswith(">")]
    quote = quote or len(kept) < text.count("\n") + 1
    text = "\n".join(kept)
    sig = False
    for pattern in (_SIGNATURE, _MOBILE_FOOTER):
        m = pattern.search(text)
        if m:
            text, sig = text[: m.start()], True
    text = _BLANK_RUN.sub("\n\n", "\n".join(line.rstrip() for line in text.split("\n"))).strip()
    return (text or None), quote, sig
