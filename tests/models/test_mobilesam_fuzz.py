"""Issue 33: seeded corruptions of a MobileSAM GGUF (truncations; header, metadata and tensor-table byte flips; wrong
tensor and key counts; bad alignments) through the loading path (model_check, then load_gguf): each ends in a
ModelFileError naming the file, or loads, and then (a few times) encodes an image to a finite embedding. Never another
exception, a hang or a NaN."""
import os
import signal
from pathlib import Path

import gguf
import numpy as np
import pytest

import ggpy
from ggpy.model_file import load_gguf
from ggpy.models.mobilesam.model_check import check_model
from ggpy.models.mobilesam.random_weights import random_model

CASES = 300
ENCODED_AT_MOST = 2


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The random-weights model rewritten with an explicit general.alignment (32, ggml's default), so that bad
    alignments can be written over it."""
    src = gguf.GGUFReader(random_model())
    path = tmp_path_factory.mktemp("fuzz") / "base.gguf"
    w = gguf.GGUFWriter(os.fspath(path), "mobilesam")
    w.add_custom_alignment(32)
    for name, field in src.fields.items():
        if name.startswith(("GGUF.", "general.architecture", "general.alignment")):
            continue
        value, vtype = field.contents(), field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, value, vtype, sub_type=sub)
    for rt in src.tensors:
        w.add_tensor(rt.name, np.asarray(rt.data), raw_dtype=rt.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def spans(reader) -> dict:
    """{kind: [(start, end)]} byte ranges of the header counts, each metadata field, each tensor-info entry, and the
    general.alignment value."""
    kv = [(int(f.offset), int(f.offset) + sum(p.nbytes for p in f.parts)) for n, f in reader.fields.items()
          if not n.startswith("GGUF.")]
    ti = [(int(rt.field.offset), int(rt.field.offset) + sum(p.nbytes for p in rt.field.parts)) for rt in reader.tensors]
    align = reader.fields["general.alignment"]
    at = int(align.offset) + sum(p.nbytes for p in align.parts[:-1])
    return {"kv": kv, "ti": ti, "align": [(at, at + 4)], "counts": [(8, 16), (16, 24)]}


def corruptions(blob: bytes, reader, rng):
    """Yield (description, corrupted bytes) for CASES seeded corruptions: a cut-off file, or the bytes before the
    data region changed (the data region stays as it is)."""
    s, data_at = spans(reader), int(reader.data_offset)
    kinds = ["truncate", "header", "kv", "ti", "ti", "count", "align"]
    for i in range(CASES):
        kind, b = kinds[i % len(kinds)], bytearray(blob[:data_at])
        if kind == "truncate":
            cut = int(rng.integers(0, data_at)) if i % 2 else int(rng.integers(data_at, len(blob)))
            yield f"{i}: cut at {cut}", blob[:cut]
            continue
        if kind == "count":
            start, _ = s["counts"][int(rng.integers(2))]
            old = int.from_bytes(b[start:start + 8], "little")
            new = int(rng.choice([old - 1, old + 1, 0, int(rng.integers(0, 2**63))]))
            b[start:start + 8] = (new % 2**64).to_bytes(8, "little")
            yield f"{i}: count at {start} {old} -> {new}", bytes(b)
            continue
        if kind == "align":
            start, _ = s["align"][0]
            new = int(rng.choice([0, 1, 3, 7, 16, 64, 4096, 2**31, 2**32 - 1]))
            b[start:start + 4] = new.to_bytes(4, "little")
            yield f"{i}: alignment {new}", bytes(b)
            continue
        start, end = (0, data_at) if kind == "header" else s[kind][int(rng.integers(len(s[kind])))]
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(start, end))
            b[at] = int(rng.choice([b[at] ^ (1 << int(rng.integers(8))), 0, 0xFF, int(rng.integers(256))]))
        yield f"{i}: {kind} bytes in [{start}, {end}) changed", bytes(b)


def test_corrupted_mobilesam_files_load_or_fail_cleanly(base, tmp_path):
    blob, reader = base.read_bytes(), gguf.GGUFReader(base)
    backend, encoded, outcomes = ggpy.CPUBackend(n_threads=2), 0, {"refused": 0, "loaded": 0}
    image = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(blob)

    def hung(*_):
        raise TimeoutError("a corrupted file hung the loader")
    signal.signal(signal.SIGALRM, hung)
    for what, data in corruptions(blob, reader, np.random.default_rng(33)):
        if "cut at" in what:
            path = tmp_path / "cut.gguf"
            path.write_bytes(data)
        else:                                  # only the bytes before the data region change: rewrite those
            path = tmp_path / "fuzz.gguf"
            with open(path, "r+b") as f:
                f.write(data)
        signal.alarm(30)
        try:
            check_model(path)
            model = load_gguf(path, backend, architecture="mobilesam")
        except ggpy.ModelFileError as e:
            assert str(path) in str(e), (what, e)
            outcomes["refused"] += 1
            continue
        except Exception as e:  # noqa: BLE001 - any other exception is the failure this test looks for
            pytest.fail(f"case {what}: {type(e).__name__}: {e}")
        finally:
            signal.alarm(0)
        outcomes["loaded"] += 1
        del model
        if encoded < ENCODED_AT_MOST:
            from ggpy.models.mobilesam.runner import ImageEncoder
            encoded += 1
            embedding = ImageEncoder(path, backend=backend).encode(image)
            assert np.isfinite(embedding).all(), what
    print(outcomes)
    assert outcomes["refused"] > CASES // 2 and outcomes["loaded"] > 0, outcomes
