"""Read and write the legacy NSArchiver "typedstream" format used by chat.db ``attributedBody``.

On recent macOS, ``message.text`` is often NULL and the text lives only in ``attributedBody``:
an ``NSAttributedString`` archived with ``NSArchiver``. Format facts used here:

* Header: streamer version ``0x04``, signature length ``0x0b``, ``b"streamtyped"`` (little
  endian; ``b"typedstream"`` would be big endian), system version ``1000`` as ``81 e8 03``.
* Integers: one signed byte, unless the value falls in the tag range ``0x80..0x91`` or outside
  ``-128..127``; then ``0x81`` + int16 or ``0x82`` + int32 (``0x83`` + float/double for reals).
* Tags: ``0x84`` new, ``0x85`` nil, ``0x86`` end of object. Any other head byte is an integer;
  as a reference, ``0x92`` is entry 0 of a table.
* Two tables: shared strings (type encodings and class names) and objects (objects, classes,
  C strings), each numbered in order of first appearance; an object gets its number before its
  class chain is read.
* A class is ``0x84`` + shared-string name + version integer + its superclass (another new class,
  a reference, or ``0x85`` nil).
* Values come in groups prefixed by a shared type-encoding string (``"@"`` object, ``"+"`` byte
  string with a length prefix, ``"i"``/``"I"`` integers, ``"*"`` C string, ...).

An ``NSString`` stores ``"+"`` UTF-8 bytes; an ``NSAttributedString`` stores its string object,
then for each attribute run an ``"iI"`` pair (attribute-dictionary number, run length in UTF-16
units) followed by the dictionary itself the first time that number appears.
"""

from __future__ import annotations

import struct

__all__ = ["decode_attributed_body", "encode_attributed_body"]

_HEADER = b"\x04\x0bstreamtyped\x81\xe8\x03"

_TAG_INT2 = 0x81
_TAG_INT4 = 0x82
_TAG_FLOAT = 0x83
_TAG_NEW = 0x84
_TAG_NIL = 0x85
_TAG_END = 0x86
_FIRST_REF = 0x92  # reference numbers are stored biased so 0 -> 0x92 (first value above the tags)

_MESSAGE_PART_KEY = "__kIMMessagePartAttributeName"


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------


def _int_bytes(value: int) -> bytes:
    """Encode an integer the way NSArchiver does: 1 byte, or 0x81 + int16, or 0x82 + int32 (LE)."""
    if -128 <= value <= 127 and not (-128 <= value <= -111):
        return bytes((value & 0xFF,))
    if -32768 <= value <= 32767:
        return bytes((_TAG_INT2,)) + struct.pack("<h", value)
    return bytes((_TAG_INT4,)) + struct.pack("<i", value)


class _Writer:
    """Minimal typedstream writer that numbers shared strings and objects like NSArchiver."""

    def __init__(self) -> None:
        self.out = bytearray(_HEADER)
        self.strings: dict[bytes, int] = {}
        self.classes: dict[bytes, int] = {}
        self.n_objects = 0

    def shared_string(self, s: bytes) -> None:
        ref = self.strings.get(s)
        if ref is None:
            self.strings[s] = len(self.strings)
            self.out.append(_TAG_NEW)
            self.out += _int_bytes(len(s))
            self.out += s
        else:
            self.out += _int_bytes(ref + _FIRST_REF - 256)

    def class_chain(self, chain: list[tuple[bytes, int]]) -> None:
        """Write a class and its superclasses (most derived first, root class last)."""
        for name, version in chain:
            ref = self.classes.get(name)
            if ref is not None:
                self.out += _int_bytes(ref + _FIRST_REF - 256)
                return
            self.classes[name] = self.n_objects
            self.n_objects += 1
            self.out.append(_TAG_NEW)
            self.shared_string(name)
            self.out += _int_bytes(version)
        self.out.append(_TAG_NIL)

    def begin_object(self, chain: list[tuple[bytes, int]]) -> None:
        self.out.append(_TAG_NEW)
        self.n_objects += 1  # the object is numbered before its class chain
        self.class_chain(chain)

    def end_object(self) -> None:
        self.out.append(_TAG_END)

    def plus_string(self, data: bytes) -> None:
        self.shared_string(b"+")
        self.out += _int_bytes(len(data))
        self.out += data


def encode_attributed_body(text: str, *, mutable: bool = False) -> bytes:
    """Archive ``text`` the way Messages stores a plain iMessage in ``message.attributedBody``.

    Layout: an ``NSAttributedString`` (``NSMutableAttributedString`` if ``mutable``) whose string
    is an ``NSString`` (``NSMutableString``), then one attribute run ``iI = (1, utf16_len)`` with
    the dictionary ``{"__kIMMessagePartAttributeName": NSNumber(0)}``. An empty text has no run.

    Args:
        text: the message text; any Unicode, including U+FFFC attachment placeholders.
        mutable: write the mutable class variants (also seen in real chat.db files).

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
        w.out += _int_bytes(1)  # one key/value pair
        w.shared_string(b"@")
        w.begin_object(str_chain)  # key: NSString (class chain now a back-reference)
        w.plus_string(_MESSAGE_PART_KEY.encode("ascii"))
        w.end_object()
        w.shared_string(b"@")
        w.begin_object([(b"NSNumber", 0), (b"NSValue", 0), obj])
        # NSValue: a "*" C string holding the value's type encoding, then the value itself.
        w.shared_string(b"*")
        w.out.append(_TAG_NEW)
        w.n_objects += 1  # a literal C string takes an object number
        w.shared_string(b"i")
        w.shared_string(b"i")
        w.out += _int_bytes(0)
        w.end_object()
        w.end_object()
    w.end_object()
    return bytes(w.out)
