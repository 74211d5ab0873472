"""``brb demo``: writes a synthetic archive in the real source schemas (chat.db, AddressBook,
WhatsApp, Mail) from a public chat dataset.

Must not import: dagster, ``orchestration``, ``cli``.
"""
