"""Normalization of message handles (phone numbers and e-mail addresses).

Phone numbers become E.164 (``+905321234567``) using a default region for numbers typed without
a country code; e-mails are stripped and lower-cased. Anything else (short codes, business ids,
WhatsApp JIDs that are not phone numbers) is returned stripped, unchanged otherwise.
No "last 10 digits" matching: that collides across countries.
"""

from __future__ import annotations

import functools
import re

import phonenumbers

from brb_pipeline.core import DEFAULT_REGION  # re-exported: readers take it from here

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_WHATSAPP_JID = re.compile(r"^(\d+)@(s\.whatsapp\.net|c\.us)$")


@functools.lru_cache(maxsize=65536)
def normalize_handle(raw: str | None, default_region: str = DEFAULT_REGION) -> str | None:
    """Return the canonical form of a handle, or None for empty input.

    Args:
        raw: a handle as stored (``"(555) 123-4567"``, ``"+1 555..."``, ``"Foo@Bar.com"``,
            ``"905321234567@s.whatsapp.net"``).
        default_region: ISO 3166 region used for numbers without a ``+`` country code.

    Returns:
        E.164 for phone numbers, lower-case for e-mails, the stripped input otherwise.
    """
    if raw is None:
        return None
    s = raw.strip()
    if not s:
        return None
    jid = _WHATSAPP_JID.match(s)
    if jid:
        s = "+" + jid.group(1)
    if s.lower().startswith(("mailto:", "tel:")):
        s = s.split(":", 1)[1].strip()
    if _EMAIL.match(s):
        return s.lower()
    digits = sum(c.isdigit() for c in s)
    if digits < 5 or any(c.isalpha() for c in s):
        return s  # short code, alphanumeric sender id, or something we must not guess at
    try:
        num = phonenumbers.parse(s, None if s.startswith("+") else default_region)
    except phonenumbers.NumberParseException:
        return s
    # IS_POSSIBLE_LOCAL_ONLY (a US number without its area code, say) is not a full E.164 number:
    # keep it as typed rather than invent a wrong international form.
    if phonenumbers.is_possible_number_with_reason(num) != phonenumbers.ValidationResult.IS_POSSIBLE:
        return s
    return phonenumbers.format_number(num, phonenumbers.PhoneNumberFormat.E164)


def is_email(handle: str) -> bool:
    return bool(_EMAIL.match(handle))
