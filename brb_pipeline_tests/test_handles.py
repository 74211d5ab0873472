import pytest

from brb_pipeline.core.records.handles import normalize_handle


@pytest.mark.parametrize(
    "raw, region, expected",
    [
        ("(312) 555-0297", "US", "+13125550297"),  # typed US number -> E.164
        ("+90 532 123 45 67", "US", "+905321234567"),  # explicit country code wins over the region
        ("0532 123 45 67", "TR", "+905321234567"),  # national format with a Turkish default region
        ("07700 900123", "GB", "+447700900123"),
        ("+44 7700 900123", "US", "+447700900123"),  # not confused with +1 770-090-0123
        ("+1 770-090-0123", "US", "+17700900123"),
        ("905321234567@s.whatsapp.net", "US", "+905321234567"),  # WhatsApp JID
        ("Foo.Bar@Example.COM ", "US", "foo.bar@example.com"),  # e-mails lower-cased
        ("mailto:a@b.org", "US", "a@b.org"),
        ("555-0102", "US", "555-0102"),  # local-only number: kept as typed, not a fake E.164
        ("12345", "US", "12345"),  # short code
        ("AMAZON", "US", "AMAZON"),  # alphanumeric sender id
        ("   ", "US", None),
        (None, "US", None),
    ],
)
def test_normalize_handle(raw, region, expected):
    assert normalize_handle(raw, region) == expected
