"""Cases for conv ops (being written)."""


def cases():
    return []
