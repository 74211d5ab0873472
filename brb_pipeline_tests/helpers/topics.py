"""Distilled-memory topic rows (the ``topics`` table) for a chunk store's contacts."""

from __future__ import annotations

from datetime import timedelta

from brb_pipeline_tests.helpers import T0

TOPICS_DDL = (
    "CREATE TABLE topics(topic_id VARCHAR PRIMARY KEY, contact_id VARCHAR, batch VARCHAR, month VARCHAR, "
    "language VARCHAR, label VARCHAR, summary VARCHAR, chat_id VARCHAR, first_ts TIMESTAMPTZ, last_ts TIMESTAMPTZ, "
    "first_message_id VARCHAR, last_message_id VARCHAR, model_id VARCHAR, prompt_version INTEGER)"
)
# (topic_id, contact, month, label, summary, days after T0 of its first message)
TOPICS = [
    ("t-lease", "diego", "2024-03", "Apartment lease",
     "Diego and I decided to sign the apartment lease contract before the end of March.", 0),
    ("t-zanzibar", "diego", "2024-04", "Holiday plans",
     "We planned a diving holiday in Zanzibar for the summer and compared flights.", 40),
    ("t-concert", "maya", "2024-03", "Concert tickets",
     "Maya bought two tickets for the jazz concert and asked me to drive.", 5),
]


def add_topics(con, rows=TOPICS) -> None:
    con.execute(TOPICS_DDL)
    for tid, contact, month, label, summary, day in rows:
        first = T0 + timedelta(days=day)
        con.execute("INSERT INTO topics VALUES (?, ?, 'b', ?, 'en', ?, ?, ?, ?, ?, ?, ?, 'tiny@1', 1)",
                    [tid, contact, month, label, summary, f"chat-{contact}", first, first + timedelta(hours=2),
                     f"{tid}-m1", f"{tid}-m9"])
