"""Cases for pool ops (being written)."""


def cases():
    return []
