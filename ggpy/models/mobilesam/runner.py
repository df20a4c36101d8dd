"""Run MobileSAM's image encoder: load the GGUF once, build and plan the graph once, encode many images."""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

import ggpy
from ggpy.backends import make_backend
from ggpy.model_file import load_gguf

from .encoder import ENC, STAGES, EncoderParams, image_encoder
from .model_check import check_model
from .preprocess import preprocess

DTYPES = {"f32": ggpy.F32, "tf32": ggpy.F32, "f16": ggpy.F16, "bf16": ggpy.BF16}
"""Precision of the encoder's activations (--dtype); tf32 is F32 with GEMMs rounding their inputs to TF32."""


def activation_type(dtype: str):
    """The activation type of a --dtype name; ValueError naming the choices otherwise."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def weight_converter(act):
    """load_gguf's `convert` for activations of type `act`: the encoder's weights in that type (as PyTorch's
    model.half()), except the attention bias tables (softmax masks, added in F32); nothing else changes."""
    if act == ggpy.F32:
        return None
    return lambda name, file_type: act if name.startswith(ENC + ".") and not name.endswith(".ab") else None


def backend_options(name: str, tf32: bool, cuda_graphs: bool) -> dict:
    """make_backend's options for the encoder on the backend named `name`: TF32 GEMMs and CUDA graph replay on CUDA;
    none on the CPU, which takes neither (the CLI's --tf32 and --no-cuda-graphs are ignored there)."""
    cuda = name == "cuda" or name.startswith("cuda:")
    return {"allow_tf32": tf32, "graphs": cuda_graphs} if cuda else {}


class ImageEncoder:
    """The encoder graph of one model file on one backend, planned once by a GraphRunner (`runner`); `encode`
    re-evaluates it without re-planning (on CUDA, a replay of its captured CUDA graph)."""

    def __init__(self, model_path, backend="cpu", n_threads: int | None = None, tf32: bool = False,
                 cuda_graphs: bool = True, dtype: str = "f32", batch: int = 1):
        """backend: a name ('cpu', 'cuda', 'cuda:N') or a Backend, used as it is (its own options decide TF32 and
        CUDA graphs). dtype: the activations' precision (DTYPES; the encoder's weights are converted to it at load).
        batch: images per evaluation. On a CUDA backend made here, tf32 (or dtype 'tf32') lets F32 GEMMs round
        their inputs to TF32 and cuda_graphs replays the planned graph as one captured CUDA graph."""
        act = activation_type(dtype)
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive number of images, got {batch!r}")
        if isinstance(backend, str):
            backend = make_backend(backend, n_threads, **backend_options(backend, tf32 or dtype == "tf32", cuda_graphs))
        self.backend = backend
        self.dtype, self.batch = dtype, batch
        self._host_input = None             # encode_many's pre-processed batch, float32 (B, 3, S, S)
        check_model(model_path)             # metadata and tensor table, before any tensor is allocated
        self.model = load_gguf(model_path, self.backend, architecture="mobilesam", convert=weight_converter(act))
        self.hp = EncoderParams.from_metadata(self.model.metadata)
        self.pixel_mean = tuple(self.model.metadata["mobilesam.pixel_mean"])
        self.pixel_std = tuple(self.model.metadata["mobilesam.pixel_std"])
        ctx = ggpy.Context()
        s = self.hp.image_size
        self.image = ctx.new_tensor(ggpy.F32, (s, s, 3, batch)).set_name("image").set_input()
        self.embedding = image_encoder(self.model, self.hp, self.image, act)
        self.graph = ggpy.Graph().build_forward_expand(self.embedding)
        self.runner = ggpy.GraphRunner(self.graph, self.backend)

    def copy_first_embedding_to(self, dst):
        """Extend the graph with a copy of the first image's embedding (ne = (E, E, D)) into dst (ne = (D, E, E), a
        tensor of the backend's memory), written by every evaluation (no round trip through the host); the runner
        plans the graph again before its next use, `embedding` kept as an output."""
        emb, e, d = self.embedding.set_output(), self.hp.embed_size, dst.ne[0]
        first = ggpy.view_3d(emb, e, e, d, emb.nb[1], emb.nb[2], 0)
        self.graph.build_forward_expand(ggpy.cpy(ggpy.permute(first, 1, 2, 0, 3), dst))

    @property
    def plan(self):
        """The graph's memory plan (the same object while the graph is not planned again)."""
        return self.runner.plans[0]

    @property
    def planned_bytes(self) -> int:
        """Peak compute memory of the plan (activations and scratch, weights excluded)."""
        return self.plan.peak_bytes

    @property
    def intermediate_bytes(self) -> int:
        """What the activations and scratch would take with no memory reuse."""
        return self.plan.no_reuse_bytes

    def set_input(self, x: np.ndarray):
        """x: pre-processed images, float32 (B, 3, S, S) (or (3, S, S) when B = 1)."""
        s, b = self.hp.image_size, self.batch
        x = np.asarray(x, dtype=np.float32)
        if x.shape != (b, 3, s, s) and not (b == 1 and x.shape == (3, s, s)):
            raise ggpy.ShapeError(f"encoder input has shape {x.shape}; expected {b} pre-processed image(s), "
                                  f"({b}, 3, {s}, {s})")
        self.runner.set(image=x.reshape(b, 3, s, s))

    def evaluate(self):
        """Run the planned graph on the current input; returns once the device is done (timings can wait on it)."""
        self.runner.compute().synchronize()

    def embedding_array(self) -> np.ndarray:
        """The last result, float32 (B, 256, S/16, S/16)."""
        e = self.hp.embed_size
        return np.ascontiguousarray(self.runner.get(self.embedding).reshape(self.batch, -1, e, e), dtype=np.float32)

    def encode_preprocessed(self, x: np.ndarray) -> np.ndarray:
        """x: preprocess's inputs float32 (B, 3, S, S) -> embeddings float32 (B, 256, S/16, S/16)."""
        self.set_input(x)
        self.evaluate()
        return self.embedding_array()

    def encode(self, image: np.ndarray) -> np.ndarray:
        """image: uint8 (H, W, 3) RGB -> embedding float32 (1, 256, S/16, S/16)."""
        return self.encode_many([image])

    def encode_many(self, images) -> np.ndarray:
        """images: up to B uint8 (H, W, 3) RGB arrays (sizes may differ) -> embeddings float32 (n, 256, S/16,
        S/16); a batch that is not full is padded with zero images, whose embeddings are dropped."""
        self.evaluate_images(images)
        return self.embedding_array()[:len(images)]

    def evaluate_images(self, images, prepared=None):
        """encode_many without reading the result back: it stays in `embedding` (ne = (S/16, S/16, 256, B)), for
        graphs of the same backend to read. prepared: the images' preprocess arrays (3, S, S), when made already."""
        if not 1 <= len(images) <= self.batch:
            raise ValueError(f"encode_many got {len(images)} images; expected 1 to {self.batch} (the batch)")
        s = self.hp.image_size
        if prepared is not None and self.batch == 1:
            self.set_input(prepared[0])
        else:
            if self._host_input is None:    # kept: fresh 12 MiB pages per image cost milliseconds
                self._host_input = np.zeros((self.batch, 3, s, s), np.float32)
            x = self._host_input
            for i, image in enumerate(images):
                if prepared is None:
                    preprocess(image, s, self.pixel_mean, self.pixel_std, out=x[i])
                else:
                    x[i] = prepared[i]
            x[len(images):] = 0
            self.set_input(x)
        self.evaluate()

    def profile(self) -> tuple[dict, dict]:
        """Evaluate once, timing every kernel: ({stage: seconds}, {kernel: seconds}), stages in STAGES order."""
        position = {id(n): i for i, n in enumerate(self.graph.nodes)}
        ends = [position[id(n)] for n in self.graph.nodes if n.name.startswith("stage:")]
        by_stage, by_kernel = dict.fromkeys(STAGES, 0.0), defaultdict(float)
        for node, kernel, seconds in self.runner.profile():
            stage = next(i for i, end in enumerate(ends) if position[id(node)] <= end)
            by_stage[STAGES[stage]] += seconds
            by_kernel[kernel] += seconds
        return by_stage, dict(by_kernel)

    def bench(self, runs: int) -> list:
        """Times (seconds) of `runs` evaluations after one warm-up (each waits until the device is done)."""
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
