"""Tests for the typedstream (NSArchiver) decoder and encoder of chat.db ``attributedBody``.

pytypedstream (an independent LGPL implementation) is used as an oracle; one blob is written
out byte by byte from the format facts so encoder and decoder cannot agree on a wrong format.
"""

from __future__ import annotations

import random
import struct

import typedstream as pytypedstream
from typedstream.stream import ObjectReference, SingleClass, TypedStreamReader

from brb_pipeline.sources import typedstream as ts
from brb_pipeline.sources import typedstream_reader as tsr
from brb_pipeline.sources.typedstream import decode_attributed_body, encode_attributed_body

# "Hello" as Messages stores it, spelled out from the format facts (not produced by the encoder).
_HELLO_REAL = b"".join(
    [
        b"\x04\x0bstreamtyped\x81\xe8\x03",  # version 4, signature, system version 1000 (int16)
        b"\x84\x01@",  # typed group: new shared string "@" (string #0 -> ref 0x92)
        b"\x84",  # new object #0 (root)
        b"\x84\x84\x12NSAttributedString\x00",  # new class #1, new name (str #1), version 0
        b"\x84\x84\x08NSObject\x00",  # superclass: new class #2, name str #2, version 0
        b"\x85",  # NSObject has no superclass
        b"\x92",  # typed group "@" by reference (str #0)
        b"\x84",  # new object #3 (the string)
        b"\x84\x84\x08NSString\x01",  # new class #4, name str #3, version 1
        b"\x94",  # superclass: reference to object #2 (NSObject)
        b"\x84\x01+",  # typed group: new shared string "+" (str #4 -> 0x96)
        b"\x05Hello",  # length 5, UTF-8 bytes
        b"\x86",  # end of NSString
        b"\x84\x02iI",  # typed group "iI" (str #5): attribute run
        b"\x01\x05",  # dictionary number 1, run length 5 UTF-16 units
        b"\x92\x84",  # "@", new object #5 (the attributes)
        b"\x84\x84\x0cNSDictionary\x00",  # new class #6, name str #6, version 0
        b"\x94",  # superclass NSObject
        b"\x84\x01i\x01",  # typed group "i" (str #7 -> 0x99): one pair
        b"\x92\x84\x96",  # "@", new object #7, class: reference to object #4 (NSString)
        b"\x96\x1d__kIMMessagePartAttributeName\x86",  # "+" by reference (str #4), 29 bytes
        b"\x92\x84",  # "@", new object #8 (the value)
        b"\x84\x84\x08NSNumber\x00",  # new class #9, name str #8
        b"\x84\x84\x07NSValue\x00",  # new class #10, name str #9
        b"\x94",  # superclass NSObject
        b"\x84\x01*",  # typed group "*" (str #10): C string holding the value's type
        b"\x84\x99",  # new C string (object #11) whose text is shared string #7 "i"
        b"\x99\x00",  # typed group "i" by reference, value 0
        b"\x86\x86\x86",  # end NSNumber, end NSDictionary, end root
    ]
)

# (text, UTF-16 length): ASCII, >= 128 bytes, > 32 KiB, > 64 KiB, emoji, ZWJ, RTL, astral.
_TEXTS = [
    ("Hello", 5),
    ("x" * 127, 127),  # longest one-byte length
    ("x" * 128, 128),  # first 0x81 + int16 length
    ("z" * 40_000, 40_000),  # above int16 range
    ("y" * 70_000, 70_000),  # > 64 KiB: 0x82 + int32 length
    ("Caf\u00e9 \U0001f600 \U0001f468\u200d\U0001f469\u200d\U0001f467", 16),  # emoji + ZWJ
    ("\U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7", 9),  # skin tone modifier, flag
    ("\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd", 10),  # Arabic + Hebrew
    ("\U00020000\U0001d11e\U0010fffd", 6),  # CJK ext B, musical symbol, plane 16
    ("\ufffc", 1),  # attachment placeholder
    ("\ufffcsee this\ufffc", 10),
    ("line1\nline2\r\n\ttab \x00 nul", 23),
]


def _oracle(blob: bytes) -> tuple[str, list]:
    """(root text, values after the string) according to pytypedstream."""
    root = pytypedstream.unarchive_from_data(blob)
    return root.contents[0].values[0].value, [g.values for g in root.contents[1:]]


def test_real_layout_blob_decodes_and_matches_encoder():
    assert decode_attributed_body(_HELLO_REAL) == "Hello"
    assert ts._decode_general(_HELLO_REAL) == "Hello"  # general parser, not the fast path
    assert encode_attributed_body("Hello") == _HELLO_REAL
    text, rest = _oracle(_HELLO_REAL)
    assert text == "Hello"
    assert rest[0] == [1, 5]


def test_encoder_is_read_back_by_pytypedstream():
    for mutable in (False, True):
        for text, utf16_len in _TEXTS:
            text_back, rest = _oracle(encode_attributed_body(text, mutable=mutable))
            assert text_back == text
            assert rest[0] == [1, utf16_len]
            (attrs,) = rest[1]
            assert {k.value: (v.type_encoding, v.value) for k, v in attrs.contents.items()} == {
                "__kIMMessagePartAttributeName": (b"i", 0)
            }


def test_encoder_class_names_follow_mutable_flag():
    root = pytypedstream.unarchive_from_data(encode_attributed_body("hi", mutable=True))
    assert root.clazz.name == b"NSMutableAttributedString"
    assert root.clazz.superclass.name == b"NSAttributedString"
    assert type(root.contents[0].values[0]).__name__ == "NSMutableString"
    root = pytypedstream.unarchive_from_data(encode_attributed_body("hi"))
    assert root.clazz.name == b"NSAttributedString"
    assert type(root.contents[0].values[0]).__name__ == "NSString"


def test_empty_text_round_trips_without_attribute_run():
    blob = encode_attributed_body("")
    assert _oracle(blob) == ("", [])
    assert decode_attributed_body(blob) == ""
    assert ts._decode_general(blob) == ""


def test_round_trip_fast_and_general_paths():
    for mutable in (False, True):
        for text, _ in _TEXTS:
            blob = encode_attributed_body(text, mutable=mutable)
            assert decode_attributed_body(blob) == text
            assert ts._decode_general(blob) == text


def test_length_prefix_widths():
    # (text length, expected bytes right after the "+" type encoding)
    cases = [
        (5, b"\x05"),
        (127, b"\x7f"),
        (128, b"\x81\x80\x00"),
        (32_767, b"\x81\xff\x7f"),
        (40_000, b"\x82" + struct.pack("<i", 40_000)),
        (70_000, b"\x82" + struct.pack("<i", 70_000)),
    ]
    for n, prefix in cases:
        blob = encode_attributed_body("a" * n)
        i = blob.index(b"\x84\x01+") + 3
        assert blob[i : i + len(prefix)] == prefix
        assert blob[i + len(prefix) : i + len(prefix) + n] == b"a" * n


def test_decoder_accepts_length_written_as_unsigned_int16():
    # A 40,000-byte string whose length is written 0x81 + uint16 (not 0x82) still decodes.
    blob = encode_attributed_body("q" * 40_000)
    i = blob.index(b"\x84\x01+") + 3
    patched = blob[:i] + b"\x81" + struct.pack("<H", 40_000) + blob[i + 5 :]
    assert decode_attributed_body(patched) == "q" * 40_000
    assert ts._decode_general(patched) == "q" * 40_000


def test_oracle_agrees_on_random_texts():
    rng = random.Random(7)
    alphabet = "abc XYZ 0189 .,!?'\"\n\u00e9\u00df\u4e2d\u6587\u0645\u05d0\u200d\ufffc\U0001f600\U0001f3fd\U00020000"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 60, 140, 400])))
        blob = encode_attributed_body(text, mutable=rng.random() < 0.5)
        expected = _oracle(blob)[0]
        assert decode_attributed_body(blob) == expected == text
        assert ts._decode_general(blob) == expected


def test_every_fast_path_prefix_is_a_valid_typedstream():
    # Each literal fast-path layout, closed with "+" payload and end markers, read by pytypedstream.
    for root_mutable in (False, True):
        for string_mutable in (False, True):
            prefix = ts._fast_prefix(root_mutable, string_mutable)
            blob = prefix + b"\x03abc\x86\x86"
            root = pytypedstream.unarchive_from_data(blob)
            assert root.clazz.name == (b"NSMutableAttributedString" if root_mutable else b"NSAttributedString")
            string = root.contents[0].values[0]
            assert type(string).__name__ == ("NSMutableString" if string_mutable else "NSString")
            assert string.value == "abc"
            assert decode_attributed_body(blob) == "abc"
            assert ts._decode_general(blob) == "abc"
            # The string's class chain ends in a reference to the NSObject class: object #2
            # (root object, NSAttributedString, NSObject) or #3 with NSMutableAttributedString.
            events = list(TypedStreamReader.from_data(blob))
            refs = [e.number for e in events if isinstance(e, ObjectReference)]
            assert refs == [3 if root_mutable else 2]
            assert events[events.index(SingleClass(b"NSObject", 0)) + 1] is None  # root class


def test_truncation_at_every_offset_never_raises():
    for mutable in (False, True):
        text = "Hi \U0001f600 \u05e9\u05dc\u05d5\u05dd"
        blob = encode_attributed_body(text, mutable=mutable)
        payload_end = blob.index(text.encode()) + len(text.encode())
        for cut in range(len(blob) + 1):
            expected = text if cut >= payload_end else None  # full payload or nothing
            assert decode_attributed_body(blob[:cut]) == expected, cut
            assert ts._decode_general(blob[:cut]) == expected, cut


def test_random_truncations_of_random_blobs():
    rng = random.Random(99)
    alphabet = "ab \u00e9\u0645\U0001f600\u200d\ufffc"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 3, 50, 200])))
        blob = encode_attributed_body(text, mutable=rng.random() < 0.5)
        cut = rng.randrange(len(blob) + 1)
        payload_end = blob.index(b"\x84\x01+") + 3 + (1 if len(text.encode()) < 128 else 3) + len(text.encode())
        expected = text if cut >= payload_end else None
        assert decode_attributed_body(blob[:cut]) == expected
        assert ts._decode_general(blob[:cut]) == expected


def test_truncated_long_blob_with_int32_length():
    blob = encode_attributed_body("w" * 70_000)
    assert decode_attributed_body(blob[:1000]) is None  # payload cut short
    assert decode_attributed_body(blob[: blob.index(b"w") + 70_000]) == "w" * 70_000


def test_random_garbage_never_raises():
    rng = random.Random(1234)
    tokens = [0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x92, 0x93, 0x94, 0x00, 0x01, 0x02, 0x05]
    tokens += list(b"@+iIcCsSfd*#!:%[]{}=0123")
    sample = encode_attributed_body("garbage test \U0001f600")
    results = []
    for k in range(20_000):
        kind = k % 4
        if kind == 0:  # raw random bytes
            blob = rng.randbytes(rng.randrange(0, 200))
        elif kind == 1:  # valid header, random body
            blob = tsr.HEADER + rng.randbytes(rng.randrange(0, 200))
        elif kind == 2:  # valid header, a soup of tags, refs and type characters
            blob = tsr.HEADER + bytes(rng.choice(tokens) for _ in range(rng.randrange(0, 300)))
        else:  # a real blob with a few random bytes flipped
            b = bytearray(sample)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            blob = bytes(b)
        r = decode_attributed_body(blob)
        assert r is None or isinstance(r, str)
        assert ts._decode_general(blob) == r  # fast path and general parser agree
        results.append(r)
    # Garbage without a typedstream never yields text.
    assert all(r is None for r in results[0::4])


def test_none_empty_and_bytes_like_inputs():
    blob = encode_attributed_body("hello there")
    assert decode_attributed_body(None) is None
    assert decode_attributed_body(b"") is None
    assert decode_attributed_body(bytearray(blob)) == "hello there"
    assert decode_attributed_body(memoryview(blob)) == "hello there"
    assert decode_attributed_body(b"streamtyped hello NSString") is None
    assert decode_attributed_body("hello there") is None  # type: ignore[arg-type]  # str, not a blob
    assert decode_attributed_body(10**12) is None  # type: ignore[arg-type]  # never bytes(int)


def test_invalid_utf8_is_replaced_not_raised():
    blob = encode_attributed_body("aXc").replace(b"aXc", b"a\xffc")
    assert decode_attributed_body(blob) == "a\ufffdc"
    assert ts._decode_general(blob) == "a\ufffdc"
    # A lone surrogate is written as CESU bytes and comes back replaced.
    assert decode_attributed_body(encode_attributed_body("x\ud800y")) == "x\ufffd\ufffd\ufffdy"


def test_unusual_but_valid_layouts_use_general_parser():
    # Big-endian signature: same bytes for one-byte integers, system version 1000 as BE int16.
    le = encode_attributed_body("big endian")
    be = b"\x04\x0btypedstream\x81\x03\xe8" + le[len(tsr.HEADER) :]
    assert _oracle(be)[0] == "big endian"
    assert decode_attributed_body(be) == "big endian"
    # Root is a bare NSString (not attributed).
    bare = tsr.HEADER + b"\x84\x01@\x84\x84\x84\x08NSString\x01\x84\x84\x08NSObject\x00\x85\x84\x01+\x03abc\x86"
    assert pytypedstream.unarchive_from_data(bare).value == "abc"
    assert decode_attributed_body(bare) == "abc"


def test_back_references_with_two_top_level_strings():
    # Two archived attributed strings in one stream; the second reuses every class and shared
    # string of the first by reference. The root (first) one is what decode returns.
    w = ts._Writer()
    chain_root = [(b"NSAttributedString", 0), (b"NSObject", 0)]
    chain_str = [(b"NSString", 1), (b"NSObject", 0)]
    for text in ("first", "second"):
        w.shared_string(b"@")
        w.begin_object(chain_root)
        w.shared_string(b"@")
        w.begin_object(chain_str)
        w.plus_string(text.encode())
        w.end_object()
        w.end_object()
    blob = bytes(w.out)
    # The second object: "@" ref, new object, class ref #1 (0x93), "@" ref, new object,
    # class ref #4 (0x96), "+" ref (string #4 = 0x96).
    assert blob.endswith(b"\x92\x84\x93\x92\x84\x96\x96\x06second\x86\x86")
    assert decode_attributed_body(blob) == "first"
    assert [g.values[0].contents[0].values[0].value for g in pytypedstream.Unarchiver.from_data(blob).decode_all()] == [
        "first",
        "second",
    ]
    ps = tsr.Parser(blob)
    ps.header()
    first: list = []
    second: list = []
    ps.group(ps.head(), first, 0, None)
    ps.group(ps.head(), second, 0, None)
    assert [ts._string_text(first[0]), ts._string_text(second[0])] == ["first", "second"]
    assert second[0].cls is first[0].cls  # same class object, reached by reference


def test_multi_byte_reference_numbers():
    # Object #252 (NSObject): references 0..109 are 0x92..0xff, 110..237 are 0x00..0x7f, then 0x81 + int16.
    w = ts._Writer()
    chain_root = [(b"MyClass%d" % i, 0) for i in range(250)] + [(b"NSAttributedString", 0), (b"NSObject", 0)]
    w.shared_string(b"@")
    w.begin_object(chain_root)
    w.shared_string(b"@")
    w.begin_object([(b"NSString", 1), (b"NSObject", 0)])
    w.plus_string("deep \U0001f333".encode())
    w.end_object()
    w.end_object()
    blob = bytes(w.out)
    assert b"NSString\x01\x81" in blob  # the reference is an int16
    assert _oracle(blob)[0] == "deep \U0001f333"
    assert decode_attributed_body(blob) == "deep \U0001f333"


def test_structurally_wrong_input_gives_none():
    hello = encode_attributed_body("Hello")
    # (blob, why it is rejected)
    cases = [
        (b"\x03" + hello[1:], "streamer version 3"),
        (hello.replace(b"streamtyped", b"streamtypex"), "bad signature"),
        (tsr.HEADER + b"\x84\x01i\x05", "root is an integer, not an object"),
        (hello.replace(b"\x84\x01+\x05Hello", b"\x84\x01+\x85"), "nil string payload"),
        (tsr.HEADER + b"\x84\x01@\x92", "root is a reference to nothing"),
        # NSAttributedString whose string is a reference to itself.
        (tsr.HEADER + b"\x84\x01@\x84\x84\x84\x12NSAttributedString\x00\x85\x92\x92\x86", "self reference"),
        # NSDictionary root.
        (tsr.HEADER + b"\x84\x01@\x84\x84\x84\x0cNSDictionary\x00\x85\x84\x01i\x00\x86", "dictionary root"),
    ]
    for blob, why in cases:
        assert decode_attributed_body(blob) is None, why


def test_pathological_nesting_is_bounded():
    # 20,000 nested objects and a 13,000-class chain: rejected or read, never a RecursionError.
    nested = tsr.HEADER + b"\x84\x01@" + b"\x84\x84\x84\x01A\x00\x85\x92" + b"\x84\x93\x92" * 20_000
    assert decode_attributed_body(nested) is None
    chain = tsr.HEADER + b"\x84\x01@\x84" + b"\x84\x84\x01A\x00" + b"\x84\x84\x01B\x00" * 13_000 + b"\x85\x86"
    assert decode_attributed_body(chain) is None
    arrays = tsr.HEADER + b"\x84\x01@\x84\x84\x84\x01A\x00\x85\x84\x0b[999999999i]\x01\x86"
    assert decode_attributed_body(arrays) is None


def test_general_parser_grammar_matches_pytypedstream():
    # An attributed string, then top-level groups of many value kinds (all with new shared
    # strings, so the string's reference numbers stay valid); both readers must stay in step. (encoding bytes, value bytes, value as pytypedstream gives it)
    d = struct.pack("<d", 2.5)
    f = struct.pack("<f", 0.25)
    groups = [
        (b"\x84\x01d", b"\x83" + d, 2.5),  # double, 0x83 marker
        (b"\x84\x01f", b"\x83" + f, 0.25),  # float, 0x83 marker
        (b"\x84\x02dd", b"\x07\x81\x00\x01", [7.0, 256.0]),  # doubles stored as integers
        (b"\x84\x01i", b"\x81\x2c\x01", 300),  # int16
        (b"\x84\x01q", b"\x82\x00\x00\x01\x00", 65536),  # int32
        (b"\x84\x01s", b"\xff", -1),  # one negative byte
        (b"\x84\x01c", b"\x85", -123),  # raw char: any byte, even a tag value
        (b"\x84\x04[4C]", b"abcd", b"abcd"),  # byte array
        (b"\x84\x04[2i]", b"\x01\x81\x00\x02", [1, 512]),  # array of ints
        (b"\x84\x0d{_NSRange=QQ}", b"\x03\x04", [3, 4]),  # struct
        (b"\x84\x01*", b"\x84\x84\x03abc", b"abc"),  # C string (new shared string "abc")
        (b"\x84\x01:", b"\x84\x04init", b"init"),  # selector
        (b"\x84\x01@", b"\x85", None),  # nil object
    ]
    stream = encode_attributed_body("before \U0001f600") + b"".join(enc + val for enc, val, _ in groups)

    oracle = pytypedstream.Unarchiver.from_data(stream).decode_all()
    ps = tsr.Parser(stream)
    ps.header()
    ours = []
    while ps.p < ps.n:
        vals: list = []
        ps.group(ps.head(), vals, 0, None)
        ours.append(vals)
    assert len(ours) == len(oracle) == len(groups) + 1
    assert ts._string_text(ours[0][0]) == "before \U0001f600" == oracle[0].values[0].contents[0].values[0].value
    for (_, _, expected), mine, theirs in zip(groups, ours[1:], oracle[1:]):
        mine_v = mine if len(mine) > 1 else mine[0]
        theirs_v = list(theirs.values) if len(theirs.values) > 1 else theirs.values[0]
        if hasattr(theirs_v, "elements"):  # pytypedstream Array / Struct
            theirs_v = list(theirs_v.elements)
        elif hasattr(theirs_v, "fields"):
            theirs_v = list(theirs_v.fields)
        if isinstance(mine_v, bytes) and isinstance(theirs_v, list):  # byte array as ints
            theirs_v = bytes(theirs_v)
        assert mine_v == expected
        assert mine_v == theirs_v
