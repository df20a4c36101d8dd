"""Cases for conv_dw ops (being written)."""


def cases():
    return []
