"""The chat.db ``attributedBody`` codec: an ``NSAttributedString`` in NSArchiver's typedstream.

On recent macOS, ``message.text`` is often NULL and the text lives only in ``attributedBody``:
an ``NSAttributedString`` archived with ``NSArchiver``. The grammar (header, integers, tags,
shared-string and object tables) is read by :mod:`brb_pipeline.sources.typedstream_reader`;
this module knows what Messages puts in it.

An ``NSString`` stores ``"+"`` UTF-8 bytes; an ``NSAttributedString`` stores its string object,
then for each attribute run an ``"iI"`` pair (attribute-dictionary number, run length in UTF-16
units) followed by the dictionary itself the first time that number appears.

Decoding checks the blob against the four byte-exact prefixes Messages writes (header and class
chains up to the string's length) and slices the UTF-8 payload; anything else goes through the
general recursive parser, which reads the root object's string group.
"""

from __future__ import annotations

import struct

from brb_pipeline.sources.typedstream_reader import (
    FIRST_REF,
    HEADER,
    TAG_END,
    TAG_INT2,
    TAG_INT4,
    TAG_NEW,
    TAG_NIL,
    InvalidStream,
    Parser,
    StreamObject,
    split_encodings,
)

__all__ = ["decode_attributed_body", "encode_attributed_body"]

_MESSAGE_PART_KEY = "__kIMMessagePartAttributeName"


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------


def _int_bytes(value: int) -> bytes:
    """Encode an integer the way NSArchiver does: 1 byte, or 0x81 + int16, or 0x82 + int32 (LE)."""
    if -128 <= value <= 127 and not (-128 <= value <= -111):
        return bytes((value & 0xFF,))
    if -32768 <= value <= 32767:
        return bytes((TAG_INT2,)) + struct.pack("<h", value)
    return bytes((TAG_INT4,)) + struct.pack("<i", value)


class _Writer:
    """Minimal typedstream writer that numbers shared strings and objects like NSArchiver."""

    def __init__(self) -> None:
        self.out = bytearray(HEADER)
        self.strings: dict[bytes, int] = {}
        self.classes: dict[bytes, int] = {}
        self.n_objects = 0

    def shared_string(self, s: bytes) -> None:
        ref = self.strings.get(s)
        if ref is None:
            self.strings[s] = len(self.strings)
            self.out.append(TAG_NEW)
            self.out += _int_bytes(len(s))
            self.out += s
        else:
            self.out += _int_bytes(ref + FIRST_REF - 256)

    def class_chain(self, chain: list[tuple[bytes, int]]) -> None:
        """Write a class and its superclasses (most derived first, root class last)."""
        for name, version in chain:
            ref = self.classes.get(name)
            if ref is not None:
                self.out += _int_bytes(ref + FIRST_REF - 256)
                return
            self.classes[name] = self.n_objects
            self.n_objects += 1
            self.out.append(TAG_NEW)
            self.shared_string(name)
            self.out += _int_bytes(version)
        self.out.append(TAG_NIL)

    def begin_object(self, chain: list[tuple[bytes, int]]) -> None:
        self.out.append(TAG_NEW)
        self.n_objects += 1  # the object is numbered before its class chain
        self.class_chain(chain)

    def end_object(self) -> None:
        self.out.append(TAG_END)

    def plus_string(self, data: bytes) -> None:
        self.shared_string(b"+")
        self.out += _int_bytes(len(data))
        self.out += data


def encode_attributed_body(text: str, *, mutable: bool = False, transcription: str | None = None) -> bytes:
    """Archive ``text`` the way Messages stores a plain iMessage in ``message.attributedBody``.

    Layout: an ``NSAttributedString`` (``NSMutableAttributedString`` if ``mutable``) whose string
    is an ``NSString`` (``NSMutableString``), then one attribute run ``iI = (1, utf16_len)`` with
    the dictionary ``{"__kIMMessagePartAttributeName": NSNumber(0)}``. An empty text has no run.

    Args:
        text: the message text; any Unicode, including U+FFFC attachment placeholders.
        mutable: write the mutable class variants (also seen in real chat.db files).
        transcription: for a voice message, a second pair in the run's dictionary:
            ``"IMAudioTranscription"`` -> NSString, as Messages writes Apple's transcription.

    Returns:
        The typedstream bytes, starting ``04 0b "streamtyped" 81 e8 03``.
    """
    utf8 = text.encode("utf-8", errors="surrogatepass")
    utf16_len = len(text.encode("utf-16-le", errors="surrogatepass")) // 2
    obj = (b"NSObject", 0)
    if mutable:
        root_chain = [(b"NSMutableAttributedString", 0), (b"NSAttributedString", 0), obj]
        str_chain = [(b"NSMutableString", 1), (b"NSString", 1), obj]
    else:
        root_chain = [(b"NSAttributedString", 0), obj]
        str_chain = [(b"NSString", 1), obj]
    w = _Writer()
    w.shared_string(b"@")
    w.begin_object(root_chain)
    w.shared_string(b"@")
    w.begin_object(str_chain)
    w.plus_string(utf8)
    w.end_object()
    if utf16_len:
        w.shared_string(b"iI")
        w.out += _int_bytes(1)  # attribute dictionary number 1 (first and only)
        w.out += _int_bytes(utf16_len)
        w.shared_string(b"@")
        w.begin_object([(b"NSDictionary", 0), obj])
        w.shared_string(b"i")
        w.out += _int_bytes(2 if transcription is not None else 1)  # key/value pairs
        w.shared_string(b"@")
        w.begin_object(str_chain)  # key: NSString (class chain now a back-reference)
        w.plus_string(_MESSAGE_PART_KEY.encode("ascii"))
        w.end_object()
        w.shared_string(b"@")
        w.begin_object([(b"NSNumber", 0), (b"NSValue", 0), obj])
        # NSValue: a "*" C string holding the value's type encoding, then the value itself.
        w.shared_string(b"*")
        w.out.append(TAG_NEW)
        w.n_objects += 1  # a literal C string takes an object number
        w.shared_string(b"i")
        w.shared_string(b"i")
        w.out += _int_bytes(0)
        w.end_object()
        for word in ((TRANSCRIPTION_KEY, transcription) if transcription is not None else ()):
            w.shared_string(b"@")
            w.begin_object(str_chain)
            w.plus_string(word.encode("utf-8"))
            w.end_object()
        w.end_object()
    w.end_object()
    return bytes(w.out)


TRANSCRIPTION_KEY = "IMAudioTranscription"


def audio_transcription(blob: bytes | None) -> str | None:
    """Apple's transcription of a voice message: the NSString under ``IMAudioTranscription`` in
    one of the ``attributedBody``'s attribute dictionaries; None when there is none or the blob
    does not parse. Only called for voice-message rows (few), so the whole stream is read."""
    if not blob:
        return None
    ps = Parser(bytes(blob))
    try:
        ps.header()
        while ps.p < ps.n:
            ps.group(ps.head(), [], 1, None)
    except (InvalidStream, IndexError, ValueError, struct.error, RecursionError):
        pass  # whatever was read before the stream broke off is searched
    for o in ps.objects:
        if not (isinstance(o, StreamObject) and o.cls is not None and o.cls.is_kind_of(b"NSDictionary")):
            continue
        vals = o.values
        for i in range(len(vals) - 1):
            if _string_text(vals[i]) == TRANSCRIPTION_KEY:
                text = " ".join((_string_text(vals[i + 1]) or "").split())
                return text or None
    return None


# --------------------------------------------------------------------------------------------
# Decoder: fast path for the layouts Messages writes, general parser for everything else
# --------------------------------------------------------------------------------------------


def _fast_prefix(root_mutable: bool, string_mutable: bool) -> bytes:
    """Bytes from the header up to the root string's length prefix, written out literally.

    Shared strings are numbered ``"@"``, the root class names, then the string class names;
    objects are numbered root object, its classes, string object, its classes. The string's
    class chain ends in a back-reference to the ``NSObject`` class written by the root chain.
    """
    if root_mutable:
        root = (
            b"\x84\x84\x84\x19NSMutableAttributedString\x00"
            b"\x84\x84\x12NSAttributedString\x00"
            b"\x84\x84\x08NSObject\x00\x85"
        )
        nsobject_ref = b"\x95"  # object #3
    else:
        root = b"\x84\x84\x84\x12NSAttributedString\x00\x84\x84\x08NSObject\x00\x85"
        nsobject_ref = b"\x94"  # object #2
    if string_mutable:
        string = b"\x84\x84\x0fNSMutableString\x01\x84\x84\x08NSString\x01"
    else:
        string = b"\x84\x84\x08NSString\x01"
    # "@" new shared string; root object; "@" by reference; new string object; "+" new shared string.
    return HEADER + b"\x84\x01@" + root + b"\x92\x84" + string + nsobject_ref + b"\x84\x01+"


# Most common first: received/sent plain messages, then the mutable variants.
_FAST_PREFIXES = tuple(
    (p, len(p))
    for p in (
        _fast_prefix(False, False),
        _fast_prefix(True, True),
        _fast_prefix(True, False),
        _fast_prefix(False, True),
    )
)
_UNPACK_U16 = struct.Struct("<H").unpack_from
_UNPACK_U32 = struct.Struct("<I").unpack_from


def decode_attributed_body(blob: bytes | bytearray | memoryview | None) -> str | None:
    """Return the text of the root string archived in a chat.db ``attributedBody`` blob.

    Never raises. A truncated blob still yields its text if the string payload is complete;
    anything else unreadable (garbage, wrong header, truncated payload, a root that is not an
    attributed string or string) gives None. Invalid UTF-8 is replaced with U+FFFD.

    Args:
        blob: the raw column value (NULL arrives as None).

    Returns:
        The message text ("" for an archived empty string), or None.
    """
    if type(blob) is not bytes:
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            return None  # None (SQL NULL), or not a blob at all
        try:
            blob = bytes(blob)
        except Exception:  # e.g. a released memoryview
            return None
    for prefix, p in _FAST_PREFIXES:
        if blob.startswith(prefix):
            n = len(blob)
            if p >= n:
                break
            head = blob[p]
            if head < 0x80 or head >= FIRST_REF:  # one-byte length (read unsigned)
                start = p + 1
                length = head
            elif head == TAG_INT2 and p + 3 <= n:
                start = p + 3
                length = _UNPACK_U16(blob, p + 1)[0]
            elif head == TAG_INT4 and p + 5 <= n:
                start = p + 5
                length = _UNPACK_U32(blob, p + 1)[0]
            else:
                break
            end = start + length
            if end > n:
                return None  # payload truncated
            return blob[start:end].decode("utf-8", "replace")
    try:
        return _decode_general(blob)
    except Exception:  # defence in depth: the parser already maps bad input to None
        return None


def _string_text(o: object) -> str | None:
    """Text of an (attributed) string object, as far as it was read."""
    if not isinstance(o, StreamObject) or o.cls is None:
        return None
    if o.cls.is_kind_of(b"NSString"):
        for v in o.values:
            if type(v) is bytes:
                return v.decode("utf-8", "replace")
            break  # NSString's first value is its "+" UTF-8 bytes; anything else is unknown
        return None
    if o.cls.is_kind_of(b"NSAttributedString"):
        inner = o.values[0] if o.values else o.open_child
        if isinstance(inner, StreamObject) and inner is not o:
            return _string_text(inner)
    return None


def _decode_general(blob: bytes) -> str | None:
    """Read the root object and, if it is a string or attributed string, its string.

    Only the root's first value group is read (the ``"+"`` bytes of a string, or the string
    object of an attributed string); the attribute runs after it are not needed for the text.
    """
    ps = Parser(blob)
    root = StreamObject()
    try:
        ps.header()
        enc = ps.shared(ps.head())
        if not enc or split_encodings(enc)[0] != b"@":
            return None  # the first top-level value is not an object
        h = ps.head()
        if h != TAG_NEW:
            return None  # nil, or a reference into an empty table
        ps.objects.append(root)  # numbered before its class chain
        root.cls = ps.klass(ps.head())
        if root.cls is None:
            return None
        if root.cls.is_kind_of(b"NSString") or root.cls.is_kind_of(b"NSAttributedString"):
            ps.group(ps.head(), root.values, 1, root)
    except (InvalidStream, IndexError, ValueError, struct.error, RecursionError):
        pass  # keep whatever was read before the stream broke off
    return _string_text(root)
