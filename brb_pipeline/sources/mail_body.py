"""Mail bodies: the ``.emlx`` file format, MIME decoding to plain text, quote and signature cutting.

An ``.emlx`` file is a first line with the byte length of the RFC 822 message, the message
itself, then Apple's XML property list (flags). The message is parsed with the stdlib ``email``
package; the text is the first ``text/plain`` part that is not an attachment, else the first
``text/html`` part turned into text (scripts, styles and ``<blockquote>`` quotes dropped). Then
the quoted reply (from an attribution line such as "On ... wrote:" in one of the supported
languages, a separator or Outlook's header block; ``>`` lines) and the signature (from a ``-- ``
line) are cut, so a thread's messages do not repeat each other's text; a cut that would leave
nothing keeps the text.

Nothing here logs or returns text other than the decoded body itself.
"""

from __future__ import annotations

import email
import email.header
import email.policy
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from html.parser import HTMLParser
from pathlib import Path

#: Headers that mark a mailing list or automated mail (RFC 2369, RFC 3834, common practice).
LIST_HEADERS = ("List-Id", "List-Unsubscribe", "List-Post")
_BULK_PRECEDENCE = {"bulk", "list", "junk"}
_NOREPLY = re.compile(r"^(no[-_.]?reply|do[-_.]?not[-_.]?reply|mailer-daemon|postmaster|bounces?|notifications?)"
                      r"([+-].*)?@", re.IGNORECASE)

# What mail clients put above a quoted reply, per language: each pattern is matched against one
# whole line, or two lines joined when the client wrapped a long attribution; a candidate must
# hold a digit (a date) or be followed by a ">" quote, so "On Monday he wrote:" in prose stays.
_ATTRIBUTIONS = (
    r"On\b.{3,250}\bwrote\s?:",  # English: Apple Mail, Gmail, Thunderbird
    r"Am\b.{3,250}\bschrieb\b.{0,150}:",  # German: "Am 05.03.2024 um 10:00 schrieb Ana <a@b>:"
    r"Le\b.{3,250}\ba\s+écrit\s?:",  # French (Gmail puts a no-break space before the colon)
    r"El\b.{3,250}\bescribió\s?:",  # Spanish
    r"Il\b.{3,250}\bha\s+scritto\s?:",  # Italian: "Il giorno mar 5 mar 2024 alle ore 10:00 ... ha scritto:"
    r"(Em|No dia|Às)\b.{3,250}\bescreveu\s?:",  # Portuguese
    r"Op\b.{3,250}\b(?:schreef\b.{0,150}|het\s+volgende\s+geschreven\s?):",  # Dutch (Gmail, Apple Mail)
    r".{3,250}\btarihinde\b.{0,250}\bşu(?:nu|nları)\s+yazdı\s?:",  # Turkish: Gmail puts the name first, Apple the date
    r"\d{4}年\d{1,2}月\d{1,2}日.{0,200}<[^<>\s]+@[^<>\s]+>\s?[:：]",  # Japanese Gmail
    r"\d{4}/\d{1,2}/\d{1,2}.{0,200}の?メール\s?[:：]",  # Japanese Apple Mail: "2024/03/05 10:00、Ana <a@b>のメール:"
)
_ATTRIBUTION = re.compile(r"^[ \t]*(?:" + "|".join(_ATTRIBUTIONS) + r")[ \t]*$", re.IGNORECASE)
# A separator line some clients put above a forwarded or quoted message (no date needed).
_SEPARATOR = re.compile(
    r"^[ \t]*-{2,}\s*(Original Message|Ursprüngliche Nachricht|Message d'origine|Mensaje original|"
    r"Messaggio originale|Mensagem original|Oorspronkelijk bericht|Orijinal İleti|元のメッセージ)\s*-{2,}[ \t]*$",
    re.IGNORECASE)
# Outlook's header block: a "From:" line, a "Sent:"/"Date:" line within the next two and a
# "To:"/"Subject:" line within the next four.
_HEADER_FROM = re.compile(r"^[ \t]*\*?(From|De|Von|Van|Da|Kimden|差出人)\*?[ \t]*[:：].+", re.IGNORECASE)
_HEADER_SENT = re.compile(r"^[ \t]*\*?(Sent|Date|Envoyé|Gesendet|Datum|Enviado|Fecha|Inviato|Data|Verzonden|"
                          r"Gönderildi|Gönderilme|Tarih|送信日時|日付)\*?[ \t]*[:：]", re.IGNORECASE)
_HEADER_TO = re.compile(r"^[ \t]*\*?(To|Subject|À|Objet|An|Betreff|Para|Asunto|A|Oggetto|Assunto|Aan|Onderwerp|Kime|"
                        r"Konu|宛先|件名)\*?[ \t]*[:：]", re.IGNORECASE)
_RULE = re.compile(r"^[ \t]*_{5,}[ \t]*$")
_SIGNATURE = re.compile(r"^-- ?$", re.MULTILINE)
# "Sent from my iPhone" as iOS writes it in the languages above.
_MOBILE_FOOTER = re.compile(
    r"^(Sent from my (iPhone|iPad|Android|mobile device)|Envoyé de mon (iPhone|iPad)|Von meinem (iPhone|iPad) gesendet"
    r"|Enviado desde mi (iPhone|iPad)|Inviato da (iPhone|iPad)|Enviado do meu (iPhone|iPad)"
    r"|Verstuurd vanaf mijn (iPhone|iPad)|(iPhone|iPad)'umdan gönderildi|(iPhone|iPad)から送信)\s*$",
    re.IGNORECASE | re.MULTILINE)
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
        quote_kept: cutting the quote would have left nothing, so the text was kept whole.
        files: the attachment parts as ``(file name, MIME type, size or None)``: read from the
            part headers (``Content-Disposition``'s ``filename``/``size``, ``Content-Type``'s
            ``name``), never from the part's bytes.
    """

    text: str | None = None
    automated: bool = False
    broken: bool = False
    replaced: bool = False
    html: bool = False
    quote_cut: bool = False
    signature_cut: bool = False
    quote_kept: bool = False
    files: list = field(default_factory=list)


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
    body = Body(automated=is_automated(msg), files=attachment_parts(msg))
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
    body.text, body.quote_cut, body.signature_cut, body.quote_kept = _cut(text)
    return body


def is_automated(msg: Message) -> bool:
    """A mailing list (``List-*``), bulk (``Precedence``) or auto-submitted (RFC 3834) message."""
    if any(msg.get(h) for h in LIST_HEADERS):
        return True
    if str(msg.get("Precedence", "")).strip().lower() in _BULK_PRECEDENCE:
        return True
    auto = str(msg.get("Auto-Submitted", "")).strip().lower()
    return bool(auto) and auto != "no"


def attachment_parts(msg: Message) -> list[tuple[str, str, int | None]]:
    """``(name, MIME type, size)`` of each attachment part, from its headers only (RFC 2183's
    ``size`` parameter when the sender wrote one, else None); parts without a name are left out."""
    out = []
    for part in msg.walk():
        if part.is_multipart() or not (part.get_content_disposition() == "attachment" or part.get_filename()):
            continue
        name = _header_words(part.get_filename())
        if not name:
            continue
        size = part.get_param("size", header="content-disposition")
        size_n = int(size) if isinstance(size, str) and size.strip().isdigit() else None
        out.append((name, part.get_content_type(), size_n))
    return out


def _header_words(value: object) -> str | None:
    """A header value with RFC 2047 encoded words decoded (``=?utf-8?q?...?=``); None when empty."""
    if not value:
        return None
    try:
        text = str(email.header.make_header(email.header.decode_header(str(value))))
    except Exception:  # a malformed encoded word: keep what was written
        text = str(value)
    return text.strip() or None


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


def quote_start(lines: list[str]) -> tuple[int, int] | None:
    """Where a quoted reply starts: (its first line, the line after its attribution), or None.

    The first line is an attribution (one line or two when wrapped), a separator, or Outlook's
    header block (with the rule line just above it); only after an attribution is the second
    index past it (a separator or header block runs into the quoted message itself).
    """
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _SEPARATOR.match(line):
            return i, i
        if (_HEADER_FROM.match(line) and any(_HEADER_SENT.match(x) for x in lines[i + 1:i + 3])
                and any(_HEADER_TO.match(x) for x in lines[i + 2:i + 5])):
            return (i - 1 if i and _RULE.match(lines[i - 1]) else i), i
        if line.lstrip().startswith(">"):
            continue
        if _ATTRIBUTION.match(line) and _dated_or_quoting(lines, i, i + 1):
            return i, i + 1
        if (nxt and not nxt.lstrip().startswith(">") and _ATTRIBUTION.match(line.rstrip() + " " + nxt.lstrip())
                and _dated_or_quoting(lines, i, i + 2)):
            return i, i + 2
    return None


def _dated_or_quoting(lines: list[str], start: int, stop: int) -> bool:
    """An attribution candidate (``lines[start:stop]``) holds a digit (a date), or the next
    non-blank line is a ``>`` quote ("Ana wrote:" with no date, then the quote)."""
    if re.search(r"\d", " ".join(lines[start:stop])):
        return True
    after = next((x for x in lines[stop:] if x.strip()), "")
    return after.lstrip().startswith(">")


def cut_text(text: str) -> tuple[str | None, bool, bool]:
    """Cut the quoted reply and the signature off a plain-text body.

    The quote starts at a whole line (see :func:`quote_start`); ``>`` lines go too. A cut never
    removes a whole message: when cutting the quote would leave nothing (a reply that is all
    quote, or a line taken for an attribution by mistake), the text is kept whole
    (``Body.quote_kept`` says so).

    Returns:
        (text or None when nothing is left, a quote was cut, a signature was cut).
    """
    text, quote, sig, _kept = _cut(text)
    return text, quote, sig


def _cut(text: str) -> tuple[str | None, bool, bool, bool]:
    """(text, quote cut, signature cut, quote kept): see :func:`cut_text`."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    found = quote_start(lines)
    start, after = found if found else (len(lines), len(lines))
    quoted = [line.lstrip().startswith(">") for line in lines]
    out, sig = _unsigned("\n".join(x for x, q in zip(lines[:start], quoted) if not q))
    if out or not (found or any(quoted)):
        return out, bool(found) or any(quoted[:start]), sig, False
    if after > start and after < len(lines) and quoted[after]:
        # the attribution on top of a quote answered below it (bottom posting): the answer is the text
        out, sig = _unsigned("\n".join(x for x, q in zip(lines[after:], quoted[after:]) if not q))
        if out:
            return out, True, sig, False
    whole, sig = _unsigned(text)  # the cut would leave nothing: keep the message whole
    return whole, False, sig, bool(whole)


def _unsigned(text: str) -> tuple[str | None, bool]:
    """The text without its signature and mobile footer, blank runs folded; None when empty."""
    sig = False
    for pattern in (_SIGNATURE, _MOBILE_FOOTER):
        m = pattern.search(text)
        if m:
            text, sig = text[: m.start()], True
    text = _BLANK_RUN.sub("\n\n", "\n".join(line.rstrip() for line in text.split("\n"))).strip()
    return (text or None), sig
