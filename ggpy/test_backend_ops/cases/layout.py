"""Cases for layout ops (being written)."""


def cases():
    return []
