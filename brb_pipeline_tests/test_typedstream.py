"""Tests for the typedstream (NSArchiver) decoder and encoder of chat.db ``attributedBody``."""

from __future__ import annotations

import typedstream as pytypedstream

from brb_pipeline.sources.typedstream import encode_attributed_body


def _oracle_text(blob: bytes) -> str:
    """Text of the root string according to pytypedstream (an independent implementation)."""
    root = pytypedstream.unarchive_from_data(blob)
    return root.contents[0].values[0].value


def _oracle_run(blob: bytes) -> tuple[list[int], dict]:
    root = pytypedstream.unarchive_from_data(blob)
    run = list(root.contents[1].values)
    (attrs,) = root.contents[2].values
    return run, {k.value: (v.type_encoding, v.value) for k, v in attrs.contents.items()}


def test_encoder_is_read_back_by_pytypedstream():
    # (text, utf-16 length of the attribute run)
    cases = [
        ("Hello", 5),
        ("x" * 200, 200),  # lengths >= 128 use 0x81 + int16
        ("Caf\u00e9 \U0001f600 \U0001f468\u200d\U0001f469\u200d\U0001f467", 16),  # emoji (2 units each) + ZWJ
        ("\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd", 10),  # Arabic + Hebrew
        ("\ufffc", 1),  # attachment placeholder
        ("y" * 70_000, 70_000),  # > 64 KiB uses 0x82 + int32
    ]
    for mutable in (False, True):
        for text, utf16_len in cases:
            blob = encode_attributed_body(text, mutable=mutable)
            assert _oracle_text(blob) == text
            run, attrs = _oracle_run(blob)
            assert run == [1, utf16_len]
            assert attrs == {"__kIMMessagePartAttributeName": (b"i", 0)}


def test_encoder_empty_text_has_no_attribute_run():
    blob = encode_attributed_body("")
    assert _oracle_text(blob) == ""
    assert len(pytypedstream.unarchive_from_data(blob).contents) == 1
