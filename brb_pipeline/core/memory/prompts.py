"""Topic prompts, one template per language (English for any other), and their version.

A prompt lists one window of a person's messages, numbered, and asks for a JSON array of topics
``{"label", "summary", "first_message", "last_message"}`` (message numbers), nothing for small
talk. Changing a template or the reply format means bumping :data:`PROMPT_VERSION`: every batch
is distilled again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PROMPT_VERSION = 1


@dataclass(frozen=True)
class Template:
    """One language's prompt: the instructions (``{n}``: message count), and who wrote a line."""

    instructions: str
    me: str
    them: str


_FORMAT = '[{{"label": "...", "summary": "...", "first_message": 1, "last_message": {n}}}]'

TEMPLATES = {
    "en": Template(
        "Below are {n} numbered chat messages between me and one person. Split them into topics. "
        "For each topic give a label of 2-5 words and a summary of 2-3 sentences, and the numbers "
        "of its first and last message. Greetings and small talk are not topics: leave them out. "
        "Reply with a JSON array only, like " + _FORMAT + "; reply [] when there is no topic.",
        "Me", "Them"),
    "tr": Template(
        "Aşağıda benimle bir kişi arasındaki {n} numaralı sohbet mesajı var. Onları konulara ayır. "
        "Her konu için 2-5 kelimelik bir başlık, 2-3 cümlelik bir özet ve ilk ile son mesajının "
        "numarasını ver. Selamlaşmalar ve laf arası sohbet konu değildir: onları atla. Yalnızca "
        "bir JSON dizisiyle yanıt ver, örneğin " + _FORMAT + "; konu yoksa [] yanıtını ver.",
        "Ben", "O"),
    "es": Template(
        "Abajo hay {n} mensajes de chat numerados entre una persona y yo. Divídelos en temas. "
        "Para cada tema da una etiqueta de 2-5 palabras, un resumen de 2-3 frases y los números "
        "de su primer y último mensaje. Los saludos y la charla trivial no son temas: omítelos. "
        "Responde solo con un array JSON, como " + _FORMAT + "; responde [] si no hay ningún tema.",
        "Yo", "Otro"),
    "de": Template(
        "Unten stehen {n} nummerierte Chatnachrichten zwischen mir und einer Person. Teile sie in "
        "Themen auf. Gib für jedes Thema ein Label aus 2-5 Wörtern, eine Zusammenfassung in 2-3 "
        "Sätzen und die Nummern seiner ersten und letzten Nachricht an. Begrüßungen und Smalltalk "
        "sind keine Themen: lass sie weg. Antworte nur mit einem JSON-Array, etwa " + _FORMAT +
        "; antworte [], wenn es kein Thema gibt.",
        "Ich", "Andere"),
    "fr": Template(
        "Voici {n} messages de discussion numérotés entre une personne et moi. Découpe-les en "
        "sujets. Pour chaque sujet, donne un titre de 2 à 5 mots, un résumé de 2 à 3 phrases et "
        "les numéros de son premier et de son dernier message. Les salutations et les banalités "
        "ne sont pas des sujets : ignore-les. Réponds uniquement par un tableau JSON, comme "
        + _FORMAT + " ; réponds [] s'il n'y a aucun sujet.",
        "Moi", "Autre"),
}


def template_for(language: str) -> Template:
    """The template written in ``language``; English when there is none for it."""
    return TEMPLATES.get(language, TEMPLATES["en"])


def build_prompt(language: str, lines: Sequence[tuple[bool, str]]) -> str:
    """The prompt for one window: instructions in ``language``, then ``[i] Who: text`` lines.

    Args:
        lines: (is_from_me, text) per message, in order; numbered from 1.
    """
    t = template_for(language)
    body = "\n".join(f"[{i}] {t.me if mine else t.them}: {' '.join(text.split())}"
                     for i, (mine, text) in enumerate(lines, 1))
    return t.instructions.format(n=len(lines)) + "\n\n" + body
