"""The GGUF reader's bounds on metadata arrays: a corrupt count is refused at once (the stock gguf reader reads an
array item by item in Python, so a count that still fits in the file took minutes), and arrays of numbers read in one
go give exactly the stock reader's fields."""
import struct
import time

import gguf
import numpy as np
import pytest

from ggpy import ModelFileError
from ggpy import model_file
from ggpy.model_file import bounded_reader, open_gguf


def write(path, n_items: int):
    w = gguf.GGUFWriter(str(path), "test")
    w.add_array("test.ints", [int(v) for v in np.random.default_rng(0).integers(-2**31, 2**31, n_items)])
    w.add_array("test.floats", [float(v) for v in np.random.default_rng(1).standard_normal(7)])
    w.add_array("test.words", ["alpha", "beta", "gamma"])
    w.add_string("test.name", "x")
    w.add_tensor("t", np.random.default_rng(2).standard_normal(64).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_arrays_read_as_the_gguf_package_reads_them(tmp_path):
    path = write(tmp_path / "a.gguf", 1000)
    ours, stock = bounded_reader(str(path)), gguf.GGUFReader(str(path))
    assert list(ours.fields) == list(stock.fields)
    for name, a in stock.fields.items():
        b = ours.fields[name]
        assert (a.offset, a.types, a.data, len(a.parts)) == (b.offset, b.types, b.data, len(b.parts)), name
        assert all(np.array_equal(x, y) for x, y in zip(a.parts, b.parts)), name
        assert a.contents() == b.contents(), name
    assert np.array_equal(ours.tensors[0].data, stock.tensors[0].data)


def _count_at(blob: bytes, key: bytes) -> int:
    return blob.index(key) + len(key) + 4 + 4          # after the key: value type ARRAY, item type, then the count


@pytest.mark.parametrize("count", [2**40, 2**63, 10**6])
def test_a_corrupt_array_count_is_refused_at_once(tmp_path, count):
    blob = bytearray(write(tmp_path / "a.gguf", 1000).read_bytes())
    struct.pack_into("<Q", blob, _count_at(blob, b"test.ints"), count)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(blob)
    t0 = time.perf_counter()
    with pytest.raises(ModelFileError, match=f"{bad}.*counts {count} items"):
        open_gguf(str(bad))
    assert time.perf_counter() - t0 < 1.0


def test_an_array_longer_than_the_limit_is_refused(tmp_path, monkeypatch):
    path = write(tmp_path / "a.gguf", 1000)
    monkeypatch.setattr(model_file, "MAX_ARRAY_ITEMS", 999)
    with pytest.raises(ModelFileError, match="counts 1000 items; at most 999 fit"):
        open_gguf(str(path))
