"""The low-level typedstream reader: the NSArchiver grammar, not what an archive means.

Format facts used here (NSArchiver's legacy "typedstream", as chat.db ``attributedBody`` holds it):

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

:class:`Parser` reads that grammar recursively over an in-memory blob into :class:`StreamObject`
and :class:`StreamClass` values; any violation raises :class:`InvalidStream`. Lengths are read
unsigned, as pytypedstream does. :mod:`brb_pipeline.sources.typedstream` builds the
``attributedBody`` codec on top.
"""

from __future__ import annotations

import struct

HEADER = b"\x04\x0bstreamtyped\x81\xe8\x03"

TAG_INT2 = 0x81
TAG_INT4 = 0x82
TAG_FLOAT = 0x83
TAG_NEW = 0x84
TAG_NIL = 0x85
TAG_END = 0x86
FIRST_REF = 0x92  # reference numbers are stored biased so 0 -> 0x92 (first value above the tags)


class InvalidStream(Exception):
    """Internal: the stream does not follow the typedstream grammar (or ends early)."""


_MAX_DEPTH = 64  # objects/structs/arrays nest far less than this in real archives


class StreamClass:
    """A class read from the stream: its name and its superclass (None for a root class)."""

    __slots__ = ("name", "superclass")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.superclass: StreamClass | None = None

    def is_kind_of(self, name: bytes) -> bool:
        cls: StreamClass | None = self
        while cls is not None:
            if cls.name == name:
                return True
            cls = cls.superclass
        return False


class StreamObject:
    """An object being read: its class and its values so far."""

    __slots__ = ("cls", "values", "open_child")

    def __init__(self) -> None:
        self.cls: StreamClass | None = None
        self.values: list[object] = []
        # First object started inside this one, kept so a stream cut off inside that child
        # (e.g. after the string payload, before its end marker) still yields the payload.
        self.open_child: StreamObject | None = None


class CString(bytes):
    """A ``*`` value, kept apart from ``+`` byte strings."""


def split_encodings(enc: bytes) -> list[bytes]:
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
                raise InvalidStream("unterminated compound type")
        i += 1
        out.append(enc[start:i])
    return out


_SPLIT_CACHE: dict[bytes, list[bytes]] = {}


class Parser:
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
            raise InvalidStream("unexpected end of stream")
        self.p = p + k
        return self.d[p : p + k]

    def head(self) -> int:
        if self.p >= self.n:
            raise InvalidStream("unexpected end of stream")
        h = self.d[self.p]
        self.p += 1
        return h

    def integer(self, h: int, signed: bool = True) -> int:
        if h < 0x80:  # the common case: a small non-negative value in the head byte
            return h
        if h == TAG_INT2:
            return int.from_bytes(self.take(2), "little" if self.le else "big", signed=signed)
        if h == TAG_INT4:
            return int.from_bytes(self.take(4), "little" if self.le else "big", signed=signed)
        if 0x80 <= h < FIRST_REF:
            raise InvalidStream("tag where an integer was expected")
        return h - 256 if (signed and h >= 0x80) else h

    def real(self, h: int, size: int) -> float:
        if h == TAG_FLOAT:
            fmt = ("<" if self.le else ">") + ("f" if size == 4 else "d")
            return struct.unpack(fmt, self.take(size))[0]
        return float(self.integer(h))

    def ref(self, h: int, table: list) -> object:
        i = self.integer(h) - (FIRST_REF - 256)
        if not 0 <= i < len(table):
            raise InvalidStream("reference to an unknown entry")
        return table[i]

    def unshared(self, h: int) -> bytes | None:
        if h == TAG_NIL:
            return None
        return self.take(self.integer(h, signed=False))

    def shared(self, h: int) -> bytes | None:
        if h == TAG_NIL:
            return None
        if h == TAG_NEW:
            s = self.unshared(self.head())
            if s is None:
                raise InvalidStream("nil literal shared string")
            self.strings.append(s)
            return s
        return self.ref(h, self.strings)  # type: ignore[return-value]

    # ---- structure ------------------------------------------------------------------------

    def header(self) -> None:
        if self.d.startswith(HEADER):  # what macOS writes: skip the byte-by-byte checks
            self.p = len(HEADER)
            return
        version = self.head()
        sig_len = self.head()
        if version != 4 or sig_len != 11:
            raise InvalidStream("not a typedstream (version 4)")
        sig = self.take(11)
        if sig == b"streamtyped":
            self.le = True
        elif sig == b"typedstream":
            self.le = False
        else:
            raise InvalidStream("bad typedstream signature")
        self.integer(self.head(), signed=False)  # system version, 1000 on macOS

    def klass(self, h: int) -> StreamClass | None:
        """Read a class and its superclass chain; returns the most derived class."""
        new: list[StreamClass] = []
        while h == TAG_NEW:
            name = self.shared(self.head())
            if name is None:
                raise InvalidStream("nil class name")
            self.integer(self.head())  # class version
            new.append(StreamClass(name))
            h = self.head()
        if h == TAG_NIL:
            tail = None
        else:
            tail = self.ref(h, self.objects)
            if not isinstance(tail, StreamClass):
                raise InvalidStream("class reference to a non-class")
        for cls in reversed(new):
            cls.superclass = tail
            tail = cls
        self.objects.extend(new)  # classes are numbered in stream order
        return tail

    def obj(self, h: int, depth: int, owner: StreamObject | None) -> object:
        if h == TAG_NIL:
            return None
        if h != TAG_NEW:
            target = self.ref(h, self.objects)
            if not isinstance(target, StreamObject):
                raise InvalidStream("object reference to a non-object")
            return target
        if depth > _MAX_DEPTH:
            raise InvalidStream("objects nested too deeply")
        o = StreamObject()
        self.objects.append(o)  # numbered before its class chain
        if owner is not None and owner.open_child is None:
            owner.open_child = o
        o.cls = self.klass(self.head())
        h = self.head()
        while h != TAG_END:
            self.group(h, o.values, depth + 1, o)
            h = self.head()
        return o

    def group(self, h: int, out: list, depth: int, owner: StreamObject | None) -> None:
        """Read one typed group (encoding string + its values), appending the values to out."""
        enc = self.shared(h)
        if not enc:
            raise InvalidStream("nil or empty type encoding")
        types = _SPLIT_CACHE.get(enc)
        if types is None:
            types = split_encodings(enc)
            if len(_SPLIT_CACHE) < 256:  # encodings repeat; garbage must not grow it unbounded
                _SPLIT_CACHE[enc] = types
        for t in types:
            out.append(self.value(t, self.head(), depth, owner))

    def value(self, t: bytes, h: int, depth: int, owner: StreamObject | None) -> object:
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
            if h == TAG_NIL:
                return None
            if h == TAG_NEW:
                s = self.shared(self.head())
                if s is None:
                    raise InvalidStream("nil literal C string")
                cs = CString(s)
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
            raise InvalidStream("types nested too deeply")
        if c == 0x5B:  # '[count type]'
            i = 1
            while i < len(t) and 0x30 <= t[i] <= 0x39:
                i += 1
            count = int(t[1:i] or b"0")
            elem = t[i:-1]
            if not elem:
                raise InvalidStream("array without element type")
            if elem in (b"c", b"C") or count == 0:
                self.p -= 1  # the head byte was not a value: give it back
                return self.take(count) if count else []
            if count > self.n - self.p + 1:  # every element needs at least one byte
                raise InvalidStream("array longer than the stream")
            items = []
            for k in range(count):
                items.append(self.value(elem, h if k == 0 else self.head(), depth + 1, owner))
            return items
        if c == 0x7B:  # '{name=types}'
            eq = t.find(b"=")
            fields = split_encodings(t[eq + 1 : -1]) if eq >= 0 else []
            items = []
            for k, ft in enumerate(fields):
                items.append(self.value(ft, h if k == 0 else self.head(), depth + 1, owner))
            if not fields:
                self.p -= 1
            return items
        raise InvalidStream("unsupported type encoding")
