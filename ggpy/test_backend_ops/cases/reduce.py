"""Cases for reduce ops (being written)."""


def cases():
    return []
