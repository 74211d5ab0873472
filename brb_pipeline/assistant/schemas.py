"""The tools as a model sees them: names, descriptions and JSON Schemas of their arguments.

The limits here are the ones :mod:`.tools` enforces (a call past one is a tool error saying so).
"""

from __future__ import annotations

from typing import Any

_DATE = {"type": "string", "maxLength": 40,
         "description": "ISO 8601 date or date-time (2024-05-01, 2024-05-01T18:00); without a zone it is UTC."}

INSTRUCTIONS = (
    "Search and read the user's own message history (iMessage, and WhatsApp or Mail when they turned "
    "them on), stored on this machine. Start with `search`; every passage has a `citation` id and the "
    "message ids of its lines: cite them when you answer. Use `get_conversation` to read before or after "
    "a passage, `list_people`/`person` for who someone is, `status` for what is stored. Read-only."
)

TOOLS: list[dict[str, Any]] = [
    {
        "name": "search",
        "description": (
            "Search the user's conversations by meaning and by words (hybrid: vector + BM25). Returns passages, "
            "best first: each has `citation` (a stable id for this run of messages; cite it), `conversation` "
            "(pass it to get_conversation), `conversation_name`, `participants`, `channel`, `start`/`end`, "
            "`score`, and `lines`: one per message with `id`, `time` (ISO 8601, the user's zone), `sender` "
            "(\"Me\" is the user), `sender_handle` and `text`. A person named in the query (\"what did Ayşe "
            "say about the trip\") becomes a filter automatically; `filters` says which was applied."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 1000,
                          "description": "What to look for, in any language, as a question or keywords."},
                "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10,
                      "description": "How many passages to return."},
                "contact": {"type": "string", "maxLength": 200,
                            "description": "Only conversations with this person or group: a name, part of one, "
                                           "a phone number or an email (see list_people)."},
                "from": {"type": "string", "maxLength": 200,
                         "description": "Only passages holding a message sent by this person (a name or handle "
                                        "of a direct contact), or by the user (\"me\")."},
                "since": {**_DATE, "description": "Only passages ending at or after this time. " + _DATE["description"]},
                "until": {**_DATE, "description": "Only passages starting before this time. " + _DATE["description"]},
                "channel": {"type": "string", "enum": ["imessage", "whatsapp", "mail"],
                            "description": "Only this channel."},
                "mode": {"type": "string", "enum": ["hybrid", "vector", "lexical"], "default": "hybrid",
                         "description": "hybrid (default) blends meaning and exact words; lexical finds exact "
                                        "words, names and numbers; vector finds by meaning only."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    {
        "name": "get_conversation",
        "description": (
            "Read the messages of one conversation around a point, to see what came before or after a passage. "
            "Returns `messages` (each with `id`, `time`, `sender`, `sender_handle`, `text`) in order, the "
            "`anchor` message id, the conversation's name and participants, and `more_before`/`more_after` "
            "(call again around the first or last id to page further)."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "conversation": {"type": "string", "minLength": 1, "maxLength": 500,
                                 "description": "The `conversation` value of a search passage or of list_people."},
                "around": {"type": "string", "maxLength": 200,
                           "description": "A message id from this conversation, or a time (2024-05-01T18:00): "
                                          "the first message at or after it. Default: the latest message."},
                "before": {"type": "integer", "minimum": 0, "maximum": 100, "default": 10,
                           "description": "Messages to return before the anchor."},
                "after": {"type": "integer", "minimum": 0, "maximum": 100, "default": 10,
                          "description": "Messages to return after the anchor."},
            },
            "required": ["conversation"],
            "additionalProperties": False,
        },
    },
    {
        "name": "list_people",
        "description": (
            "List the people and group chats in the history, most messaged first: `name`, `kind` (direct or "
            "group), `handles`, `channels`, message counts (`messages`, `sent` by the user, `received`), "
            "`first`/`last` message times and their `conversations` (ids for get_conversation)."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 200,
                          "description": "Only people whose name or handle contains this (case and accents ignored)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50,
                          "description": "How many to return."},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "person",
        "description": (
            "Everything stored about one person or group: the list_people fields, average reply times, "
            "`tapbacks` (given, got, given by kind), `group_membership` (each group chat with when they joined "
            "and left, null when there from the start or still in), and the distilled memory when it exists (`profile`: relationship, tone, recurring topics, commitments; "
            "`topics`: monthly summaries with message ids). When there is none, `memory_note` says so."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200,
                         "description": "A name, part of one, a phone number or an email."},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    {
        "name": "status",
        "description": (
            "What is stored: messages, people, chunks, the embedding model, the last ingestion (when, how many "
            "messages, the time span), the channels turned on, whether the home is encrypted and whether a "
            "model-distilled memory (topics, profiles) exists."),
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    },
]
