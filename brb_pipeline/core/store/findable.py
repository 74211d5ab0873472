"""What search can see of a text: the cleaning every chunk text and every query goes through.

Its own module, free of polars and duckdb, so a one-shot search that cleans its query does not
import the chunker's dependencies (see :mod:`brb_pipeline.core.chunking` for why each character
class goes).
"""

from __future__ import annotations

import re

# C0 and C1 controls except \t and \n (which line formatting turns into spaces anyway).
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Zero-width space, non-joiner, joiner, word joiner and BOM between two word characters.
_ZERO_WIDTH_IN_WORD_RE = re.compile(r"(?<=\w)[\u200b-\u200d\u2060\ufeff]+(?=\w)")
# Zero-width space, word joiner and BOM carry nothing visible anywhere (ZWJ/ZWNJ do between emoji).
_INVISIBLE_RE = re.compile("[\u200b\u2060\ufeff]")


def findable_text(text: str | None) -> str:
    """``text`` with what hides words from search removed (see :mod:`brb_pipeline.core.chunking`).

    Control characters (but \\n and \\t) become spaces; zero-width characters between word
    characters are removed; zero-width space, word joiner and BOM are removed everywhere.
    """
    if not text:
        return ""
    text = _CONTROL_RE.sub(" ", text)
    text = _ZERO_WIDTH_IN_WORD_RE.sub("", text)
    return _INVISIBLE_RE.sub("", text)
