"""Sources: read-only readers of Apple's and WhatsApp's stores (chat.db, the AddressBook,
WhatsApp's ChatStorage, Apple Mail's Envelope Index and .emlx files) and the snapshot that
copies them. Each yields ``core.records`` rows.

Must not import: dagster, ``config``, ``stages``, ``orchestration``, ``cli``.
"""
