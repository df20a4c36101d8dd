"""Session fixtures of the MobileSAM tests: a seeded random checkpoint and its GGUF conversions.

Imported by conftest.py. `install_mobilesam_stubs()` runs there at import, so that `import mobile_sam`
(which needs timm and torchvision helpers) works wherever torch is installed; the fixtures skip when
torch or mobile_sam is missing. The checkpoint is made once per session (about a second).
"""
import importlib.util

import pytest


def install_mobilesam_stubs():
    """Register the timm/torchvision stand-ins when torch and mobile_sam are installed (else do nothing)."""
    if importlib.util.find_spec("torch") and importlib.util.find_spec("mobile_sam"):
        from ggpy.models.mobilesam.timm_stub import install_timm_stub

        install_timm_stub()


@pytest.fixture(scope="session")
def mobilesam_checkpoint(tmp_path_factory):
    """Path of a random-weight mobile_sam.pt (seed 0; BatchNorm, LayerNorm and attention biases randomised)."""
    pytest.importorskip("torch")
    pytest.importorskip("mobile_sam")
    from ggpy.models.mobilesam.random_checkpoint import make_random_checkpoint

    path = tmp_path_factory.mktemp("mobilesam") / "mobile_sam_random.pt"
    make_random_checkpoint(path, seed=0)
    return path


def _converted(checkpoint, file_type: str):
    from ggpy.models.mobilesam.convert import convert

    path = checkpoint.parent / f"mobilesam_{file_type}.gguf"
    convert(checkpoint, path, type=file_type, progress=False)
    return path


@pytest.fixture(scope="session")
def mobilesam_gguf_f32(mobilesam_checkpoint):
    """Path of `mobilesam_checkpoint` converted to GGUF with F32 weights."""
    return _converted(mobilesam_checkpoint, "f32")


@pytest.fixture(scope="session")
def mobilesam_gguf_f16(mobilesam_checkpoint):
    """Path of `mobilesam_checkpoint` converted to GGUF with F16 weights."""
    return _converted(mobilesam_checkpoint, "f16")
