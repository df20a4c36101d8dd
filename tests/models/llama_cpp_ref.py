"""llama.cpp itself (through llama-cpp-python) as the tests' reference; tests using it skip where it is absent."""
from __future__ import annotations

from pathlib import Path

import pytest

from ggpy.models.llama.fetch import CACHE, FILE_NAME

SMOLLM = CACHE / FILE_NAME


def smollm_path() -> Path:
    """The SmolLM2 GGUF in the cache (`ggpy-llama -p hi` fetches it); the test skips without it."""
    if not SMOLLM.is_file():
        pytest.skip(f"{SMOLLM} is not there (run `ggpy-llama -p hi` once to fetch it)")
    return SMOLLM


def llama_cpp(path, **kwargs):
    """A llama_cpp.Llama on `path` (quiet), without ggml's extra CPU buffer types: their AMX matrix product
    segfaults on this project's VM (AMX reported, llama-cpp-python 0.3.36 built with GGML_NATIVE)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    lowlevel = llama_cpp.llama_cpp
    default = lowlevel.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    lowlevel.llama_model_default_params = params
    try:
        return llama_cpp.Llama(model_path=str(path), verbose=False, **kwargs)
    finally:
        lowlevel.llama_model_default_params = default
