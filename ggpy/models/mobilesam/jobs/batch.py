"""The work of an encode-dir job wherever it runs (in this process or in a Ray actor): read an image, encode a batch
of them with one planned ImageEncoder, write each embedding atomically, report manifest-row columns."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import ggpy

from ...outputs import save_npy_atomic
from ..options import check_finite
from ..preprocess import load_image, resize_longest_side
from ..runner import ImageEncoder


class JobError(RuntimeError):
    """The job cannot go on (the Ray cluster is unreachable or too small, an actor failed): a message, status 1."""


def output_name(image: str) -> str:
    """The embedding file of an image, relative to the output directory: its relative path + '.npy'."""
    return image + ".npy"


def read_image(item: dict, prep: dict) -> dict:
    """{image, path} -> with `input` (the bytes of the image resized as `encode` does, uint8 (height, width, 3) with
    the longest side prep["image_size"]: 4x fewer bytes than the normalised float32 input, which the encoder makes),
    height, width, status ('' when read, 'unreadable' when not an image, 'failed' when missing), error and seconds:
    the read stage (decoding and resizing), on a thread or a Ray task."""
    t0 = time.perf_counter()
    out = dict(item, input=b"", height=0, width=0, status="", error="")
    try:
        resized = resize_longest_side(load_image(item["path"], prep["image_size"]), prep["image_size"])
        out.update(input=resized.tobytes(), height=resized.shape[0], width=resized.shape[1])
    except ValueError as e:
        out.update(status="unreadable", error=str(e))
    except OSError as e:
        out.update(status="failed", error=str(e))
    out["seconds"] = time.perf_counter() - t0
    return out


WRITERS = 4
"""Threads that write the embeddings of one evaluation while the next is computed (4 wrote 1.4x as many synced
4 MiB files a second as 1 here)."""


def per_call(settings: dict) -> int:
    """Images per BatchEncoder call: 4 evaluations on a GPU, so that writing (a synced 4 MiB file took 5-11 ms here,
    longer than an H100's evaluation) overlaps the next; 1 on the CPU (an evaluation is ~100 writes, and smaller
    calls keep the actors level at the end of a job)."""
    return settings["batch"] * (4 if settings["backend"] == "cuda" else 1)


class BatchEncoder:
    """One planned ImageEncoder: called with read images (columns, Ray Data's numpy format), evaluates them
    `batch` at a time, writes each embedding atomically and returns the manifest rows (columns image, status,
    error, seconds)."""

    def __init__(self, model: str, out_dir: str, backend: str = "cpu", threads: int | None = None,
                 dtype: str = "f32", batch: int = 1):
        self.encoder = ImageEncoder(model, backend=backend, n_threads=threads, dtype=dtype, batch=batch)
        self.out_dir = Path(out_dir)

    def __call__(self, batch: dict) -> dict:
        status, error = list(batch["status"]), list(batch["error"])
        seconds = [float(s) for s in batch["seconds"]]
        ok, b = [i for i, st in enumerate(status) if not st], self.encoder.batch
        writes = []
        with ThreadPoolExecutor(WRITERS) as writer:
            for idx in (ok[start:start + b] for start in range(0, len(ok), b)):
                t0 = time.perf_counter()
                try:
                    embeddings = self._evaluate(batch, idx)
                except (ggpy.GGPYError, ValueError) as e:     # recorded per image; the job goes on
                    for i in idx:
                        status[i], error[i] = "failed", f"{type(e).__name__}: {e}"
                    continue
                for i, e in zip(idx, embeddings):
                    seconds[i] += (time.perf_counter() - t0) / len(idx)
                    writes.append((i, writer.submit(self._write, batch["image"][i], e)))
            for i, done in writes:
                status[i], error[i], spent = done.result()
                seconds[i] += spent
        return {"image": np.asarray(batch["image"], dtype=object), "status": np.asarray(status, dtype=object),
                "error": np.asarray(error, dtype=object), "seconds": np.asarray(seconds)}

    def _evaluate(self, batch: dict, idx: list) -> np.ndarray:
        """Embeddings (len(idx), 256, E, E) of the read images at `idx` (normalised and padded by the encoder), read
        back from the device (arrays of their own: the next evaluation cannot change them)."""
        images = [np.frombuffer(batch["input"][i], np.uint8).reshape(int(batch["height"][i]), int(batch["width"][i]), 3)
                  for i in idx]
        return check_finite(self.encoder.encode_many(images), self.encoder.model.path, "the embedding")

    def _write(self, image: str, embedding: np.ndarray) -> tuple:
        """(status, error, seconds) of writing one embedding (1, 256, E, E)."""
        t0 = time.perf_counter()
        try:
            save_npy_atomic(self.out_dir / output_name(image), embedding[None])
            return "ok", "", time.perf_counter() - t0
        except OSError as e:
            return "failed", f"cannot write the embedding: {e}", time.perf_counter() - t0
