"""Read and write the legacy NSArchiver "typedstream" format used by chat.db ``attributedBody``.

On recent macOS, ``message.text`` is often NULL and the text lives only in ``attributedBody``:
an ``NSAttributedString`` archived with ``NSArchiver``. Format facts used here:

* Header: streamer version ``0x04``, signature length ``0x0b``, ``b"streamtyped"`` (little
  endian; ``b"typedstream"`` would be big endian), system version ``1000`` as ``81 e8 03``.
* Integers: one signed byte, unless the value falls in the tag range ``0x80..0x91`` or outside
  ``-128..127``; then ``0x81`` + int16 or ``0x82`` + int32 (``0x83`` + float/double for reals).
* Tags: ``0x84`` new, ``0x85`` nil, ``0x86`` end of object. Any other head byte is an integer;
  a reference stores (entry number - 110), so entries 0..109 are ``0x92..0xff``, 110..237 are
  ``0x00..0x7f`` and later ones use ``0x81`` + int16.
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

Decoding checks the blob against the four byte-exact prefixes Messages writes (header and class
chains up to the string's length) and slices the UTF-8 payload; anything else goes through a
general recursive parser of the grammar above, which reads the root object's string group.
Lengths are read unsigned, as pytypedstream does.
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
    return _HEADER + b"\x84\x01@" + root + b"\x92\x84" + string + nsobject_ref + b"\x84\x01+"


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
            if head < 0x80 or head >= _FIRST_REF:  # one-byte length (read unsigned)
                start = p + 1
                length = head
            elif head == _TAG_INT2 and p + 3 <= n:
                start = p + 3
                length = _UNPACK_U16(blob, p + 1)[0]
            elif head == _TAG_INT4 and p + 5 <= n:
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


class _Invalid(Exception):
    """Internal: the stream does not follow the typedstream grammar (or ends early)."""


_MAX_DEPTH = 64  # objects/structs/arrays nest far less than this in real archives


class _Class:
    """A class read from the stream: its name and its superclass (None for a root class)."""

    __slots__ = ("name", "superclass")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.superclass: _Class | None = None

    def is_kind_of(self, name: bytes) -> bool:
        cls: _Class | None = self
        while cls is not None:
            if cls.name == name:
                return True
            cls = cls.superclass
        return False


class _Obj:
    """An object being read: its class and its values so far."""

    __slots__ = ("cls", "values", "open_child")

    def __init__(self) -> None:
        self.cls: _Class | None = None
        self.values: list[object] = []
        # First object started inside this one, kept so a stream cut off inside that child
        # (e.g. after the string payload, before its end marker) still yields the payload.
        self.open_child: _Obj | None = None


class _CString(bytes):
    """A ``*`` value, kept apart from ``+`` byte strings."""


def _split_encodings(enc: bytes) -> list[bytes]:
    """Split a type-encoding string like ``b"iI"`` or ``b"{_NSRange=QQ}"`` into single types."""
    out = []
    i = 0
    n = len(enc)
    while i < n:
        start = i
        c = enc[i]
        if c in b"[{(":
            depth = 0
            while i < n:
                if enc[i] in b"[{(":
                    depth += 1
                elif enc[i] in b"]})":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            if i >= n:
                raise _Invalid("unterminated compound type")
        i += 1
        out.append(enc[start:i])
    return out


_SPLIT_CACHE: dict[bytes, list[bytes]] = {}


class _Parser:
    """General recursive typedstream reader over an in-memory blob."""

    def __init__(self, data: bytes) -> None:
        self.d = data
        self.n = len(data)
        self.p = 0
        self.le = True
        self.strings: list[bytes] = []
        self.objects: list[object] = []

    # ---- primitives -----------------------------------------------------------------------

    def take(self, k: int) -> bytes:
        p = self.p
        if k < 0 or p + k > self.n:
            raise _Invalid("unexpected end of stream")
        self.p = p + k
        return self.d[p : p + k]

    def head(self) -> int:
        if self.p >= self.n:
            raise _Invalid("unexpected end of stream")
        h = self.d[self.p]
        self.p += 1
        return h

    def integer(self, h: int, signed: bool = True) -> int:
        if h < 0x80:  # the common case: a small non-negative value in the head byte
            return h
        if h == _TAG_INT2:
            return int.from_bytes(self.take(2), "little" if self.le else "big", signed=signed)
        if h == _TAG_INT4:
            return int.from_bytes(self.take(4), "little" if self.le else "big", signed=signed)
        if 0x80 <= h < _FIRST_REF:
            raise _Invalid("tag where an integer was expected")
        return h - 256 if (signed and h >= 0x80) else h

    def real(self, h: int, size: int) -> float:
        if h == _TAG_FLOAT:
            fmt = ("<" if self.le else ">") + ("f" if size == 4 else "d")
            return struct.unpack(fmt, self.take(size))[0]
        return float(self.integer(h))

    def ref(self, h: int, table: list) -> object:
        i = self.integer(h) - (_FIRST_REF - 256)
        if not 0 <= i < len(table):
            raise _Invalid("reference to an unknown entry")
        return table[i]

    def unshared(self, h: int) -> bytes | None:
        if h == _TAG_NIL:
            return None
        return self.take(self.integer(h, signed=False))

    def shared(self, h: int) -> bytes | None:
        if h == _TAG_NIL:
            return None
        if h == _TAG_NEW:
            s = self.unshared(self.head())
            if s is None:
                raise _Invalid("nil literal shared string")
            self.strings.append(s)
            return s
        return self.ref(h, self.strings)  # type: ignore[return-value]

    # ---- structure ------------------------------------------------------------------------

    def header(self) -> None:
        if self.d.startswith(_HEADER):  # what macOS writes: skip the byte-by-byte checks
            self.p = len(_HEADER)
            return
        version = self.head()
        sig_len = self.head()
        if version != 4 or sig_len != 11:
            raise _Invalid("not a typedstream (version 4)")
        sig = self.take(11)
        if sig == b"streamtyped":
            self.le = True
        elif sig == b"typedstream":
            self.le = False
        else:
            raise _Invalid("bad typedstream signature")
        self.integer(self.head(), signed=False)  # system version, 1000 on macOS

    def klass(self, h: int) -> _Class | None:
        """Read a class and its superclass chain; returns the most derived class."""
        new: list[_Class] = []
        while h == _TAG_NEW:
            name = self.shared(self.head())
            if name is None:
                raise _Invalid("nil class name")
            self.integer(self.head())  # class version
            new.append(_Class(name))
            h = self.head()
        if h == _TAG_NIL:
            tail = None
        else:
            tail = self.ref(h, self.objects)
            if not isinstance(tail, _Class):
                raise _Invalid("class reference to a non-class")
        for cls in reversed(new):
            cls.superclass = tail
            tail = cls
        self.objects.extend(new)  # classes are numbered in stream order
        return tail

    def obj(self, h: int, depth: int, owner: _Obj | None) -> object:
        if h == _TAG_NIL:
            return None
        if h != _TAG_NEW:
            target = self.ref(h, self.objects)
            if not isinstance(target, _Obj):
                raise _Invalid("object reference to a non-object")
            return target
        if depth > _MAX_DEPTH:
            raise _Invalid("objects nested too deeply")
        o = _Obj()
        self.objects.append(o)  # numbered before its class chain
        if owner is not None and owner.open_child is None:
            owner.open_child = o
        o.cls = self.klass(self.head())
        h = self.head()
        while h != _TAG_END:
            self.group(h, o.values, depth + 1, o)
            h = self.head()
        return o

    def group(self, h: int, out: list, depth: int, owner: _Obj | None) -> None:
        """Read one typed group (encoding string + its values), appending the values to out."""
        enc = self.shared(h)
        if not enc:
            raise _Invalid("nil or empty type encoding")
        types = _SPLIT_CACHE.get(enc)
        if types is None:
            types = _split_encodings(enc)
            if len(_SPLIT_CACHE) < 256:  # encodings repeat; garbage must not grow it unbounded
                _SPLIT_CACHE[enc] = types
        for t in types:
            out.append(self.value(t, self.head(), depth, owner))

    def value(self, t: bytes, h: int, depth: int, owner: _Obj | None) -> object:
        c = t[0]
        if c == 0x40:  # '@'
            return self.obj(h, depth, owner)
        if c == 0x2B:  # '+'
            return self.unshared(h)
        if c in b"iIsSlLqQ":
            return self.integer(h, signed=c in b"islq")
        if c in b"cCB":  # raw single byte: the head byte is the value, even a tag value
            return h - 256 if (c == 0x63 and h >= 0x80) else h
        if c == 0x66:  # 'f'
            return self.real(h, 4)
        if c == 0x64:  # 'd'
            return self.real(h, 8)
        if c == 0x2A:  # '*'
            if h == _TAG_NIL:
                return None
            if h == _TAG_NEW:
                s = self.shared(self.head())
                if s is None:
                    raise _Invalid("nil literal C string")
                cs = _CString(s)
                self.objects.append(cs)
                return cs
            return self.ref(h, self.objects)
        if c in b"%:":  # atom, selector
            return self.shared(h)
        if c == 0x23:  # '#'
            return self.klass(h)
        if c == 0x21:  # '!' ignored value, consumes nothing
            self.p -= 1
            return None
        if depth > _MAX_DEPTH:
            raise _Invalid("types nested too deeply")
        if c == 0x5B:  # '[count type]'
            i = 1
            while i < len(t) and 0x30 <= t[i] <= 0x39:
                i += 1
            count = int(t[1:i] or b"0")
            elem = t[i:-1]
            if not elem:
                raise _Invalid("array without element type")
            if elem in (b"c", b"C") or count == 0:
                self.p -= 1  # the head byte was not a value: give it back
                return self.take(count) if count else []
            if count > self.n - self.p + 1:  # every element needs at least one byte
                raise _Invalid("array longer than the stream")
            items = []
            for k in range(count):
                items.append(self.value(elem, h if k == 0 else self.head(), depth + 1, owner))
            return items
        if c == 0x7B:  # '{name=types}'
            eq = t.find(b"=")
            fields = _split_encodings(t[eq + 1 : -1]) if eq >= 0 else []
            items = []
            for k, ft in enumerate(fields):
                items.append(self.value(ft, h if k == 0 else self.head(), depth + 1, owner))
            if not fields:
                self.p -= 1
            return items
        raise _Invalid("unsupported type encoding")


def _string_text(o: object) -> str | None:
    """Text of an (attributed) string object, as far as it was read."""
    if not isinstance(o, _Obj) or o.cls is None:
        return None
    if o.cls.is_kind_of(b"NSString"):
        for v in o.values:
            if type(v) is bytes:
                return v.decode("utf-8", "replace")
            break  # NSString's first value is its "+" UTF-8 bytes; anything else is unknown
        return None
    if o.cls.is_kind_of(b"NSAttributedString"):
        inner = o.values[0] if o.values else o.open_child
        if isinstance(inner, _Obj) and inner is not o:
            return _string_text(inner)
    return None


def _decode_general(blob: bytes) -> str | None:
    """Read the root object and, if it is a string or attributed string, its string.

    Only the root's first value group is read (the ``"+"`` bytes of a string, or the string
    object of an attributed string); the attribute runs after it are not needed for the text.
    """
    ps = _Parser(blob)
    root = _Obj()
    try:
        ps.header()
        enc = ps.shared(ps.head())
        if not enc or _split_encodings(enc)[0] != b"@":
            return None  # the first top-level value is not an object
        h = ps.head()
        if h != _TAG_NEW:
            return None  # nil, or a reference into an empty table
        ps.objects.append(root)  # numbered before its class chain
        root.cls = ps.klass(ps.head())
        if root.cls is None:
            return None
        if root.cls.is_kind_of(b"NSString") or root.cls.is_kind_of(b"NSAttributedString"):
            ps.group(ps.head(), root.values, 1, root)
    except (_Invalid, IndexError, ValueError, struct.error, RecursionError):
        pass  # keep whatever was read before the stream broke off
    return _string_text(root)
