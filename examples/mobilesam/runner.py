"""Run MobileSAM's image encoder: load the GGUF once, build and plan the graph once, encode many images."""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

import ggpy
from ggpy.backends import make_backend
from ggpy.model_file import load_gguf

from .encoder import STAGES, EncoderParams, image_encoder
from .preprocess import preprocess


class ImageEncoder:
    """The encoder graph of one model file on one backend; `encode` re-evaluates it without re-planning."""

    def __init__(self, model_path, backend="cpu", n_threads: int | None = None, tf32: bool = False,
                 cuda_graphs: bool = True):
        """backend: a name ('cpu', 'cuda', 'cuda:N') or a Backend. On CUDA, tf32 lets F32 GEMMs round their
        inputs to TF32 and cuda_graphs replays the planned graph as one captured CUDA graph."""
        self.backend = make_backend(backend, n_threads) if isinstance(backend, str) else backend
        if hasattr(self.backend, "allow_tf32"):
            self.backend.allow_tf32 = self.backend.allow_tf32 or tf32
        if hasattr(self.backend, "graphs") and not cuda_graphs:
            self.backend.graphs = False
        self.model = load_gguf(model_path, self.backend, architecture="mobilesam")
        self.hp = EncoderParams.from_metadata(self.model.metadata)
        self.pixel_mean = tuple(self.model.metadata["mobilesam.pixel_mean"])
        self.pixel_std = tuple(self.model.metadata["mobilesam.pixel_std"])
        ctx = ggpy.Context()
        s = self.hp.image_size
        self.image = ctx.new_tensor(ggpy.F32, (s, s, 3, 1)).set_name("image").set_input()
        self.embedding = image_encoder(self.model, self.hp, self.image)
        self.graph = ggpy.Graph().build_forward_expand(self.embedding)
        self.plan = ggpy.GraphAllocator(self.backend).alloc_graph(self.graph)

    @property
    def planned_bytes(self) -> int:
        """Peak compute memory of the plan (activations and scratch, weights excluded)."""
        return self.plan.peak_bytes

    @property
    def intermediate_bytes(self) -> int:
        """What the activations and scratch would take with no memory reuse."""
        return self.plan.no_reuse_bytes

    def set_input(self, x: np.ndarray):
        """x: pre-processed image, float32 (3, S, S) or (1, 3, S, S)."""
        s = self.hp.image_size
        x = np.asarray(x, dtype=np.float32)
        if x.shape not in ((3, s, s), (1, 3, s, s)):
            raise ggpy.ShapeError(f"encoder input has shape {x.shape}; expected a pre-processed (3, {s}, {s}) image")
        self.image.set(x.reshape(1, 3, s, s))

    def evaluate(self):
        """Run the planned graph on the current input."""
        self.backend.compute(self.graph)

    def embedding_array(self) -> np.ndarray:
        """The last result, float32 (1, 256, S/16, S/16)."""
        return np.ascontiguousarray(self.embedding.numpy().reshape(1, -1, self.hp.embed_size, self.hp.embed_size),
                                    dtype=np.float32)

    def encode_preprocessed(self, x: np.ndarray) -> np.ndarray:
        self.set_input(x)
        self.evaluate()
        return self.embedding_array()

    def encode(self, image: np.ndarray) -> np.ndarray:
        """image: uint8 (H, W, 3) RGB -> embedding float32 (1, 256, S/16, S/16)."""
        return self.encode_preprocessed(preprocess(image, self.hp.image_size, self.pixel_mean, self.pixel_std))

    def profile(self) -> tuple[dict, dict]:
        """Evaluate once, timing every kernel: ({stage: seconds}, {kernel: seconds}), stages in STAGES order."""
        position = {id(n): i for i, n in enumerate(self.graph.nodes)}
        ends = [position[id(n)] for n in self.graph.nodes if n.name.startswith("stage:")]
        by_stage, by_kernel = dict.fromkeys(STAGES, 0.0), defaultdict(float)
        for node, kernel, seconds in self.backend.profile(self.graph):
            stage = next(i for i, end in enumerate(ends) if position[id(node)] <= end)
            by_stage[STAGES[stage]] += seconds
            by_kernel[kernel] += seconds
        return by_stage, dict(by_kernel)

    def bench(self, runs: int) -> list:
        """Times (seconds) of `runs` evaluations after one warm-up (compute() returns once the device is done)."""
        self.evaluate()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self.evaluate()
            times.append(time.perf_counter() - t0)
        return times


def flops_per_image(hp: EncoderParams) -> float:
    """Multiply-adds x 2 of the encoder (GEMMs, convolutions, attention), counted from the architecture."""
    s = hp.image_size
    r = s // 4
    f = 0.0
    c0 = hp.embed_dims[0]
    f += 2 * (s // 2) ** 2 * 27 * (c0 // 2) + 2 * r * r * 9 * (c0 // 2) * c0            # patch embed
    for i, (dim, depth) in enumerate(zip(hp.embed_dims, hp.depths)):
        res = r // (2 ** min(i, 2))
        n = res * res
        for _ in range(depth):
            if i == 0:
                hid = int(dim * hp.mbconv_expand_ratio)
                f += 2 * n * (2 * dim * hid + 9 * hid)
            else:
                w = hp.window_sizes[i]
                pad = -(-res // w) * w
                np_ = pad * pad
                hid = int(dim * hp.mlp_ratio)
                f += 2 * np_ * (3 * dim * dim + dim * dim) + 2 * 2 * np_ * w * w * dim     # qkv, proj, attention
                f += 2 * n * (2 * dim * hid + 9 * dim)                                      # mlp, local conv
        if i + 1 < len(hp.embed_dims):
            out = hp.embed_dims[i + 1]
            n_out = n if out in (320, 448, 576) else n // 4
            f += 2 * (n * dim * out + n_out * 9 * out + n_out * out * out)
    e = hp.embed_size
    f += 2 * e * e * (hp.embed_dims[-1] * hp.neck_dim + 9 * hp.neck_dim * hp.neck_dim)
    return f
