"""Fixtures of the model tests only (core and backend tests load no model code)."""
# MobileSAM: session fixtures (random checkpoint, its GGUF conversions) and the timm/torchvision stand-ins.
from mobilesam_fixtures import (  # noqa: F401 - fixtures are found by name
    install_mobilesam_stubs,
    mobilesam_checkpoint,
    mobilesam_gguf_f16,
    mobilesam_gguf_f32,
)

install_mobilesam_stubs()
