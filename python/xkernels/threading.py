"""OpenMP inside one process with PyTorch (filled in below)."""


def configure_before_load():
    pass
