"""Quote cutting per language: no reply is ever lost.

The attribution lines below are copied from how each mail client writes them above a quote
(Gmail, Apple Mail, Outlook, Thunderbird in their locales), not derived from the reader's
patterns. Each is tried in the middle of a body (the answer on top, the quote below), at the top
(the quote first, the answer below it), wrapped over two lines, and alone (a reply that is all
quote, which must keep its text). The answers carry booking codes: a lost reply shows.
"""

from __future__ import annotations

import textwrap

import pytest

from brb_pipeline.demo.mail_writer import rfc822
from brb_pipeline.sources.mail_body import cut_text, decode_message

from brb_pipeline_tests.helpers import T0

ANA = "Ana Lima <ana@example.org>"

# language -> (the answer, the quoted mail, [(client, attribution as that client writes it)])
CLIENTS = {
    "en": ("Sure, booking code QX7P2L, see you at 8.", "Are you coming to dinner?", [
        ("gmail", f"On Tue, Mar 5, 2024 at 10:00 AM {ANA} wrote:"),
        ("apple", f"On Mar 5, 2024, at 10:00 AM, {ANA} wrote:"),
        ("apple-uk", f"On 5 Mar 2024, at 10:00, {ANA} wrote:"),
        ("thunderbird", "On 3/5/24 10:00, Ana Lima wrote:"),
        ("outlook-ios", f'On Tue, Mar 5, 2024 at 10:00 AM +0100, "Ana Lima" <ana@example.org> wrote:'),
    ]),
    "fr": ("Oui, code de réservation QX7P2L, à ce soir.", "Tu viens dîner ?", [
        ("gmail", f"Le mar. 5 mars 2024 à 10:00, {ANA} a écrit :"),
        ("gmail-nnbsp", f"Le mar. 5 mars 2024 à 10:00, {ANA} a\u00a0écrit\u202f:"),
        ("apple", f"Le 5 mars 2024 à 10:00, {ANA} a écrit :"),
    ]),
    "de": ("Ja, Buchungscode QX7P2L, bis heute Abend.", "Kommst du zum Essen?", [
        ("gmail", f"Am Di., 5. März 2024 um 10:00 Uhr schrieb {ANA}:"),
        ("apple", f"Am 05.03.2024 um 10:00 schrieb {ANA}:"),
        ("thunderbird", "Am 05.03.24 um 10:00 schrieb Ana Lima:"),
    ]),
    "es": ("Sí, código de reserva QX7P2L, nos vemos.", "¿Vienes a cenar?", [
        ("gmail", "El mar, 5 mar 2024 a las 10:00, Ana Lima (<ana@example.org>) escribió:"),
        ("apple", f"El 5 mar 2024, a las 10:00, {ANA} escribió:"),
    ]),
    "it": ("Sì, codice di prenotazione QX7P2L, a stasera.", "Vieni a cena?", [
        ("gmail", f"Il giorno mar 5 mar 2024 alle ore 10:00 {ANA} ha scritto:"),
        ("apple", f"Il giorno 5 mar 2024, alle ore 10:00, {ANA} ha scritto:"),
    ]),
    "pt": ("Sim, código da reserva QX7P2L, até logo.", "Vens jantar?", [
        ("gmail-br", f"Em ter., 5 de mar. de 2024 às 10:00, {ANA} escreveu:"),
        ("apple-br", f"Em 5 de mar. de 2024, à(s) 10:00, {ANA} escreveu:"),
        ("apple-pt", f"No dia 5/03/2024, às 10:00, {ANA} escreveu:"),
    ]),
    "nl": ("Ja, boekingscode QX7P2L, tot vanavond.", "Kom je eten?", [
        ("gmail", f"Op di 5 mrt 2024 om 10:00 schreef {ANA}:"),
        ("apple", f"Op 5 mrt. 2024 om 10:00 heeft {ANA} het volgende geschreven:"),
    ]),
    "tr": ("Tamam, rezervasyon kodu QX7P2L, akşam görüşürüz.", "Akşam yemeğe geliyor musun?", [
        ("gmail", f"{ANA}, 5 Mar 2024 Sal, 10:00 tarihinde şunu yazdı:"),
        ("apple", f"5 Mar 2024 tarihinde 10:00 saatinde, {ANA} şunları yazdı:"),
    ]),
    "ja": ("はい、予約番号はQX7P2Lです。今夜会いましょう。", "夕食に来ますか？", [
        ("gmail", f"2024年3月5日(火) 10:00 {ANA}:"),
        ("apple", f"2024/03/05 10:00、{ANA}のメール:"),
    ]),
}

# Outlook quotes the whole mail under a header block, without ">" on its lines.
OUTLOOK = {
    "en": "________________________________\nFrom: Ana Lima <ana@example.org>\nSent: Tuesday, March 5, 2024 10:00 AM\n"
          "To: Me <me@icloud.com>\nSubject: Dinner",
    "en-desktop": "-----Original Message-----\nFrom: Ana Lima <ana@example.org>\nSent: Tuesday, March 5, 2024 10:00 AM",
    "fr": "De : Ana Lima <ana@example.org>\nEnvoyé : mardi 5 mars 2024 10:00\nÀ : Moi <me@icloud.com>\nObjet : Dîner",
    "de": "Von: Ana Lima <ana@example.org>\nGesendet: Dienstag, 5. März 2024 10:00\nAn: Ich <me@icloud.com>\n"
          "Betreff: Essen",
    "es": "De: Ana Lima <ana@example.org>\nEnviado: martes, 5 de marzo de 2024 10:00\nPara: Yo <me@icloud.com>\n"
          "Asunto: Cena",
    "tr": "Kimden: Ana Lima <ana@example.org>\nGönderildi: 5 Mart 2024 Salı 10:00\nKime: Ben <me@icloud.com>\n"
          "Konu: Yemek",
    "ja": "差出人: Ana Lima <ana@example.org>\n送信日時: 2024年3月5日 10:00\n宛先: me@icloud.com\n件名: 夕食",
}


def _cases():
    for lang, (answer, asked, clients) in CLIENTS.items():
        for client, attribution in clients:
            yield pytest.param(lang, answer, asked, attribution, id=f"{lang}-{client}")


def _wrapped(line: str) -> str:
    """The attribution broken over two lines at a space, as a client wrapping at a width does
    (Japanese Gmail breaks before the address)."""
    width = max(20, len(line) // 2 + 5)
    lines = textwrap.wrap(line, width=width, break_long_words=False)
    assert len(lines) == 2, lines
    return "\n".join(lines)


@pytest.mark.parametrize("lang, answer, asked, attribution", list(_cases()))
def test_every_client_attribution_cuts_the_quote_and_keeps_the_answer(lang, answer, asked, attribution):
    middle = f"{answer}\n\n{attribution}\n> {asked}\n>\n> Ana"
    top = f"{attribution}\n> {asked}\n\n{answer}"
    wrapped = f"{answer}\n\n{_wrapped(attribution)}\n> {asked}"
    signed = f"{answer}\n\n-- \nMe\n\n{attribution}\n> {asked}"
    for body in (middle, top, wrapped):
        assert cut_text(body) == (answer, True, False), body
    assert cut_text(signed) == (answer, True, True)
    # a reply that is nothing but the quote keeps its text: a cut never removes a whole message
    alone = decode_message(rfc822(("Me", "me@icloud.com"), [("Ana", "ana@example.org")], "Re: x", T0,
                                  f"{attribution}\n> {asked}"))
    assert alone.text == f"{attribution}\n> {asked}" and alone.quote_kept and not alone.quote_cut


@pytest.mark.parametrize("lang", sorted(OUTLOOK))
def test_outlook_header_blocks(lang):
    answer = CLIENTS[lang.split("-")[0]][0]
    body = f"{answer}\n\n{OUTLOOK[lang]}\n\n{CLIENTS[lang.split('-')[0]][1]}"
    assert cut_text(body) == (answer, True, False)


@pytest.mark.parametrize("text", [
    # prose that looks like the start or the end of an attribution but is not one
    "On Monday we hiked.\nShe wrote: call me",
    "On the 5th I wrote:\nnothing at all",
    "Le 5 mars, il a écrit : rien de neuf.",
    "Am Ende schrieb er: danke",
    "Op 5 mei schreef ik hem een brief.",
    "Thanks!\nOn 5 May she wrote: the keys are under the mat",
    "2024年3月5日に会議があります: 10時から",
    "De: 10 a 12, en la oficina.",
    "Hi Ana,\nFrom: the hotel, 2 nights\nSent: nothing yet, booking QX7P2L\nSee you",
    "Hasan, 5 Mart tarihinde bize yazdı: gelmiyor",
])
def test_prose_is_never_cut(text):
    out, quote, _ = cut_text(text)
    assert out == text.strip() and quote is False


def test_a_turkish_short_reply_with_a_booking_code_survives_a_real_emlx():
    """The report's case: every Turkish Gmail reply of one correspondent was cut whole."""
    me, ayse = ("Me", "me@icloud.com"), ("Ayşe Yılmaz", "ayse@example.com.tr")
    body = ("Kod: TK1907\n\nAyşe Yılmaz <ayse@example.com.tr>, 4 Mar 2024 Pzt, 21:14 tarihinde şunu yazdı:\n"
            "> Uçuşun rezervasyon kodu neydi?\n")
    for charset in ("utf-8", "iso-8859-9"):
        got = decode_message(rfc822(me, [ayse], "Re: Uçuş", T0, body, charset=charset))
        assert (got.text, got.quote_cut, got.quote_kept) == ("Kod: TK1907", True, False)


def test_the_mail_heavy_demo_mailbox_loses_no_reply(tmp_path):
    """`brb demo --mail-messages`: replies quoting each other under English, French, German,
    Spanish, Turkish and Japanese attributions; each read back is its own answer, whole, and
    nothing of the quote."""
    from datetime import datetime, timezone

    from brb_pipeline.demo.mail_writer import _OPENINGS, bulk_threads, write_mail_store
    from brb_pipeline.sources.mail import read_mail

    people = [("Ana Lima", "ana@example.org"), ("Ayşe Yılmaz", "ayse@example.com.tr"), ("Kenji Sato", "kenji@example.jp")]
    recs = bulk_threads(people, datetime(2024, 1, 1, tzinfo=timezone.utc), seed=3, n=400)
    res = read_mail(write_mail_store(tmp_path / "Mail", recs))
    replies = sum(r.reply for r in recs)
    assert res.messages.height == len(recs) == 400 and replies > 150
    assert (res.stats["quotes_cut"], res.stats["quotes_kept"], res.stats["empty_skipped"]) == (replies, 0, 0)
    openings = tuple(o.split("{")[0] for o in _OPENINGS)
    for rec, text in zip(recs, res.messages.sort("source_rowid")["text"]):
        answer = text.split("\n\n", 1)[1] if not rec.reply else text  # an original starts with its subject
        assert answer.startswith(openings), text
        assert not any(line.startswith(">") for line in answer.splitlines()), text
        assert not any(w in answer for w in ("wrote:", "a écrit", "schrieb", "escribió", "yazdı", "<")), text


def test_a_reply_that_is_all_quote_is_emptied_when_someone_is_forgotten():
    """Read whole (nothing cut), such a reply may be the forgotten person's words: the snapshot's
    rewritten body keeps none of it; a reply with an answer keeps only the answer."""
    from brb_pipeline.demo.mail_writer import emlx_bytes
    from brb_pipeline.privacy.scrub_emlx import scrubbed_emlx
    from brb_pipeline.sources.mail_body import emlx_message

    ana, diego = ("Ana", "ana@example.org"), ("Diego", "diego@example.com")
    quoted = "On Sat, Mar 2, 2024 at 9:00 AM Diego <diego@example.com> wrote:\n> I will bring lemonade"
    gone = {"diego@example.com"}
    for body, expected in ((quoted, None), ("Great!\n\n" + quoted, "Great!")):
        data = emlx_bytes(rfc822(ana, [("Me", "me@icloud.com"), diego], "Re: Picnic", T0, body))
        new = scrubbed_emlx(data, gone.__contains__, {b"diego@example.com", b"diego"})
        assert b"lemonade" not in new and b"diego" not in new.lower()
        assert decode_message(emlx_message(new)).text == expected


@pytest.mark.parametrize("footer", ["Sent from my iPhone", "Envoyé de mon iPhone", "Von meinem iPhone gesendet",
                                    "Enviado desde mi iPhone", "Inviato da iPhone", "Enviado do meu iPhone",
                                    "Verstuurd vanaf mijn iPhone", "iPhone'umdan gönderildi", "iPhoneから送信"])
def test_the_ios_footer_goes_in_every_language(footer):
    assert cut_text(f"Booking QX7P2L confirmed.\n\n{footer}") == ("Booking QX7P2L confirmed.", False, True)
