"""Who each message belongs to: handles resolved to people, contact batches (the
partitions), per-contact statistics, and finding a contact by what a person types.
"""
