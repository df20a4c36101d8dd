"""SAM's predictor on ggpy: encode an image once, then decode masks for any number of prompts.

`Predictor` mirrors mobile_sam's SamPredictor (same inputs, outputs and post-processing). The image embedding
lives in a tensor of the backend's memory, written once per image; the prompt encoder + mask decoder graph is
built and planned once per prompt shape (number of sparse tokens, mask input or not) and re-evaluated per
prompt; the upscaling of the chosen masks to the image size (SAM's two bilinear resizes with the crop between)
is a small graph of its own, planned once per image size. Graphs run through a GraphRunner over the model's
backends (a Scheduler of its own), so that an op the backend refuses runs on the CPU.
"""
from __future__ import annotations

import time

import numpy as np

import ggpy

from .mask_decoder import DecoderParams, predict_masks
from .preprocess import resized_shape
from .prompt_encoder import (
    KIND_BOX_BOTTOM_RIGHT,
    KIND_BOX_TOP_LEFT,
    KIND_NOT_A_POINT,
    dense_positional_encoding,
    grid_coords,
    sparse_embeddings,
)
from .runner import ImageEncoder

MASK_THRESHOLD = 0.0


class PromptError(ValueError):
    """A prompt the predictor cannot use; the message says what was given and what was expected."""


def best_mask_index(iou_predictions) -> int:
    """Index of the mask with the highest predicted IoU (the first on ties)."""
    return int(np.argmax(np.asarray(iou_predictions)))


# -- prompts -----------------------------------------------------------------------------------------------
def _points(point_coords, point_labels, width: int, height: int):
    """Checked (N, 2) float64 coordinates and (N,) int labels."""
    if point_labels is None:
        raise PromptError("point_coords were given without point_labels; expected one label (1 foreground, "
                          "0 background) per point")
    coords = np.asarray(point_coords, dtype=np.float64)
    labels = np.asarray(point_labels)
    if coords.ndim != 2 or coords.shape[1] != 2 or coords.shape[0] == 0:
        raise PromptError(f"point_coords has shape {coords.shape}; expected (N, 2) x, y pixel coordinates with "
                          "N >= 1 (None for no points)")
    if labels.shape != (coords.shape[0],):
        raise PromptError(f"point_labels has shape {labels.shape} for {coords.shape[0]} point(s); expected "
                          f"({coords.shape[0]},), one label per point")
    if not np.all((labels == 0) | (labels == 1)):
        raise PromptError(f"point_labels are {labels.tolist()}; expected 1 (foreground) or 0 (background)")
    for i, (x, y) in enumerate(coords):
        if not (0 <= x <= width and 0 <= y <= height):
            raise PromptError(f"point {i} at ({x:g}, {y:g}) lies outside the {width}x{height} image; expected "
                              f"0 <= x <= {width} and 0 <= y <= {height}")
    return coords, labels.astype(np.int32)


def _box(box, width: int, height: int) -> np.ndarray:
    """Checked (2, 2) float64 corners (x0, y0), (x1, y1)."""
    b = np.asarray(box, dtype=np.float64)
    if b.shape not in ((4,), (1, 4)):
        raise PromptError(f"box has shape {b.shape}; expected (4,): x0, y0, x1, y1 in pixels")
    x0, y0, x1, y1 = b.ravel()
    if not (np.isfinite(b).all() and 0 <= x0 <= width and 0 <= x1 <= width and 0 <= y0 <= height
            and 0 <= y1 <= height):
        raise PromptError(f"box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) lies outside the {width}x{height} image; expected "
                          f"0 <= x <= {width} and 0 <= y <= {height}")
    if x1 < x0 or y1 < y0:
        raise PromptError(f"box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) has x1 < x0 or y1 < y0; expected x0 <= x1 and "
                          "y0 <= y1 (x0, y0, x1, y1)")
    return b.reshape(2, 2)


def sparse_prompt(point_coords, point_labels, box, original_size, input_size):
    """(coords (N, 2) float32 in the encoder input's pixels, kinds (N,) int32, keep (N, 1) float32) of SAM's
    sparse tokens: the points (with SAM's padding point when there is no box), then the two box corners."""
    height, width = original_size
    scale = np.array([input_size[1] / width, input_size[0] / height])       # ResizeLongestSide.apply_coords
    coords, kinds = [np.zeros((0, 2))], [np.zeros(0, np.int32)]
    if point_coords is not None:
        xy, labels = _points(point_coords, point_labels, width, height)
        coords.append(xy * scale)
        kinds.append(labels + 1)                                              # label + 1: KIND_NEGATIVE/POSITIVE
        if box is None:
            coords.append(np.zeros((1, 2)))
            kinds.append(np.array([KIND_NOT_A_POINT], np.int32))
    elif point_labels is not None:
        raise PromptError("point_labels were given without point_coords; expected both or neither")
    if box is not None:
        coords.append(_box(box, width, height) * scale)
        kinds.append(np.array([KIND_BOX_TOP_LEFT, KIND_BOX_BOTTOM_RIGHT], np.int32))
    kinds = np.concatenate(kinds)
    keep = (kinds != KIND_NOT_A_POINT).astype(np.float32).reshape(-1, 1)
    return np.concatenate(coords).astype(np.float32), kinds, keep


def mask_prompt(mask_input, size: int):
    """The checked low-resolution mask input as float32 (size, size), or None."""
    if mask_input is None:
        return None
    m = np.asarray(mask_input, dtype=np.float32)
    if m.shape not in ((1, size, size), (size, size)):
        raise PromptError(f"mask_input has shape {m.shape}; expected (1, {size}, {size}) low-resolution logits "
                          "(one of the low_res_logits of an earlier predict)")
    return m.reshape(size, size)


# -- graphs --------------------------------------------------------------------------------------------------
class DecoderGraph:
    """The prompt encoder + mask decoder graph of one prompt shape and batch size, planned once and re-evaluated
    per batch of prompts."""

    def __init__(self, model, hp: DecoderParams, backends, image, image_pe, n_sparse: int, with_mask: bool,
                 batch: int = 1):
        ctx = ggpy.Context()
        sparse = self.coords = self.kinds = self.keep = self.mask = None
        self.batch = batch
        if n_sparse:
            self.coords = ctx.new_tensor(ggpy.F32, (2, n_sparse, batch)).set_name("coords").set_input()
            self.kinds = ctx.new_tensor(ggpy.I32, (n_sparse, batch)).set_name("kinds").set_input()
            self.keep = ctx.new_tensor(ggpy.F32, (1, n_sparse, batch)).set_name("keep").set_input()
            sparse = sparse_embeddings(model, self.coords, self.kinds, self.keep, hp.image_size)
        if with_mask:
            s = hp.mask_size
            self.mask = ctx.new_tensor(ggpy.F32, (s, s, 1, batch)).set_name("mask_input").set_input()
        self.masks, self.iou = predict_masks(model, hp, image, image_pe, sparse, self.mask, batch)
        self.graph = ggpy.Graph().build_forward_expand(self.masks).build_forward_expand(self.iou)
        self.runner = ggpy.GraphRunner(self.graph, backends)

    @property
    def plans(self) -> tuple:
        """The memory plan of each split (splits on one backend share its plan); the same objects as long as the
        graph is not re-planned."""
        return self.runner.plans

    def run(self, coords, kinds, keep, mask):
        """Evaluate on B prompts (arrays as sparse_prompt and mask_prompt make them, stacked: (B, N, 2), (B, N),
        (B, N, 1), (B, 4E, 4E)) -> (low-res logits float32 (B, M, 4E, 4E), IoU predictions float32 (B, M)) of
        all M mask tokens."""
        b, run = self.batch, self.runner
        if self.coords is not None:
            run.set(coords=np.reshape(coords, (1, b, -1, 2)), kinds=np.reshape(kinds, (1, 1, b, -1)),
                    keep=np.reshape(keep, (1, b, -1, 1)))
        if self.mask is not None:
            run.set(mask_input=np.reshape(mask, (b, 1, *mask.shape[-2:])))
        run.compute()
        return run.get(self.masks).reshape(b, *self.masks.ne[2::-1]), run.get(self.iou).reshape(b, -1)


def postprocess_masks(low_res, input_size, original_size, image_size: int):
    """SAM's postprocess_masks: low-res logits ne = (4E, 4E, C) -> bilinear to (S, S), crop to the resized
    image input_size = (h, w), bilinear to original_size = (H, W) -> logits ne = (W, H, C)."""
    c = low_res.ne[2]
    full = ggpy.interpolate(low_res, image_size, image_size, c, 1, mode="bilinear")
    crop = ggpy.view_4d(full, input_size[1], input_size[0], c, 1, full.nb[1], full.nb[2], full.nb[3], 0)
    return ggpy.interpolate(crop, original_size[1], original_size[0], c, 1, mode="bilinear")


class PostprocessGraph:
    """The upscaling of C masks to one image size, planned once per (image size, C)."""

    def __init__(self, hp: DecoderParams, backends, input_size, original_size, n_masks: int):
        s = hp.mask_size
        self.low_res = ggpy.Context().new_tensor(ggpy.F32, (s, s, n_masks, 1)).set_name("low_res").set_input()
        self.logits = postprocess_masks(self.low_res, input_size, original_size, hp.image_size)
        self.graph = ggpy.Graph().build_forward_expand(self.logits)
        self.runner = ggpy.GraphRunner(self.graph, backends)

    def run(self, low_res: np.ndarray) -> np.ndarray:
        """low_res float32 (C, 4E, 4E) -> logits float32 (C, H, W)."""
        low_res = np.ascontiguousarray(low_res, dtype=np.float32).reshape(1, *low_res.shape)
        logits = self.runner.set(low_res=low_res).compute().get(self.logits)
        return logits.reshape(self.logits.ne[2], self.logits.ne[1], self.logits.ne[0])


class Predictor:
    """SamPredictor on ggpy: set_image once per image, predict once per prompt."""

    def __init__(self, model_path, backend="cpu", n_threads=None, tf32=False, cuda_graphs=True, dtype="f32"):
        """backend: 'cpu', 'cuda', 'cuda:N' or a Backend; the encoder and the decoder share it. tf32, cuda_graphs
        and dtype (the encoder's activations) as for runner.ImageEncoder; the prompt encoder and mask decoder
        compute in F32 (with their weights as the file stores them)."""
        self.encoder = ImageEncoder(model_path, backend, n_threads, tf32, cuda_graphs, dtype)
        self.model = self.encoder.model
        self.hp = DecoderParams.from_metadata(self.model.metadata)
        main = self.encoder.backend
        self.backends = [main] if isinstance(main, ggpy.CPUBackend) else [main, ggpy.CPUBackend(n_threads)]
        ctx = ggpy.Context()
        d, e = self.hp.embed_dim, self.hp.embed_size
        self.image_embedding = ctx.new_tensor(ggpy.F32, (d, e, e)).set_name("image_embedding")
        self.image_pe = ctx.new_tensor(ggpy.F32, (d, e, e)).set_name("image_pe")
        self._buffer = ggpy.alloc_ctx_tensors(ctx, main)
        self.encoder.copy_first_embedding_to(self.image_embedding)
        self.image_pe.set(self._dense_pe())
        self.decoders = {}            # (n_sparse, with_mask) -> DecoderGraph
        self.postprocessors = {}      # (input_size, original_size, C) -> PostprocessGraph
        self.original_size = self.input_size = None
        self.last_timings = {}

    def _dense_pe(self) -> np.ndarray:
        """SAM's dense positional encoding of the embedding grid, float32 (E, E, D): a tiny graph, run once."""
        e = self.hp.embed_size
        grid = ggpy.Context().new_tensor(ggpy.F32, (2, e * e)).set_name("grid").set_input()
        pe = dense_positional_encoding(self.model, grid)
        graph = ggpy.Graph().build_forward_expand(pe)
        return ggpy.GraphRunner(graph, self.backends).set(grid=grid_coords(e)).compute().get(pe)

    def set_image(self, image: np.ndarray, prepared: np.ndarray | None = None) -> None:
        """Encode a uint8 (H, W, 3) RGB image; its embedding serves every later predict. prepared: preprocess's
        encoder input of this image (3, S, S), when made already."""
        image = np.asarray(image)
        self.encoder.evaluate_images([image], None if prepared is None else [prepared])     # also image_embedding
        h, w = image.shape[:2]
        s = self.hp.image_size
        self.original_size, self.input_size = (h, w), resized_shape(h, w, s)

    def decoder(self, n_sparse: int, with_mask: bool, batch: int = 1) -> DecoderGraph:
        """The planned graph of this prompt shape and batch size, built on first use."""
        key = (n_sparse, with_mask, batch)
        if key not in self.decoders:
            self.decoders[key] = DecoderGraph(self.model, self.hp, self.backends, self.image_embedding,
                                              self.image_pe, n_sparse, with_mask, batch)
        return self.decoders[key]

    def predict(self, point_coords=None, point_labels=None, box=None, mask_input=None,
                multimask_output=True, return_logits=False):
        """As mobile_sam.SamPredictor.predict: point_coords (N, 2) x, y in original-image pixels, point_labels
        (N,) 1/0, box (4,) x0 y0 x1 y1, mask_input (1, 256, 256) low-res logits of an earlier call.
        Returns masks (C, H, W) bool (float32 logits if return_logits), iou_predictions (C,) float32,
        low_res_logits (C, 256, 256) float32; C = 3 with multimask_output else 1. Bad prompts raise PromptError."""
        prompt = {"point_coords": point_coords, "point_labels": point_labels, "box": box, "mask_input": mask_input}
        return self.predict_batch([prompt], multimask_output, return_logits)[0]

    def predict_batch(self, prompts, multimask_output=True, return_logits=False) -> list:
        """predict for many prompts of this image: dicts of predict's point_coords, point_labels, box and
        mask_input. Prompts of one shape (number of points and box corners, mask input or not) are decoded as
        one batch. Returns [(masks, iou_predictions, low_res_logits)] in the order of the prompts; every prompt
        is checked before anything runs."""
        if self.original_size is None:
            raise RuntimeError("no image is set: call set_image(image) before predict")
        parsed = [self._parse(p, i) for i, p in enumerate(prompts)]
        groups = {}
        for i, (_, kinds, _, mask) in enumerate(parsed):
            groups.setdefault((len(kinds), mask is not None), []).append(i)
        chosen = slice(1, None) if multimask_output else slice(0, 1)
        t0 = time.perf_counter()
        decoded = [None] * len(parsed)
        for (n, with_mask), idx in groups.items():
            sparse = [np.stack([parsed[i][k] for i in idx]) if n else None for k in range(3)]
            mask = np.stack([parsed[i][3] for i in idx]) if with_mask else None
            low_res, iou = self.decoder(n, with_mask, len(idx)).run(*sparse, mask)
            for j, i in enumerate(idx):
                decoded[i] = (low_res[j][chosen], iou[j][chosen])
        t1 = time.perf_counter()
        results = []
        for low_res, iou in decoded:
            key = (self.input_size, self.original_size, len(iou))
            if key not in self.postprocessors:
                self.postprocessors[key] = PostprocessGraph(self.hp, self.backends, *key)
            masks = self.postprocessors[key].run(low_res)                         # (C, H, W) logits
            results.append((masks if return_logits else masks > MASK_THRESHOLD, iou, low_res))
        self.last_timings = {"decode": t1 - t0, "postprocess": time.perf_counter() - t1}
        return results

    def _parse(self, prompt, index: int) -> tuple:
        """(coords, kinds, keep, mask) of one prompt dict; PromptError naming the prompt when it is bad."""
        unknown = set(prompt) - {"point_coords", "point_labels", "box", "mask_input"}
        if unknown:
            raise PromptError(f"prompt {index} has keys {sorted(unknown)}; expected point_coords, point_labels, "
                              "box and mask_input")
        coords, kinds, keep = sparse_prompt(prompt.get("point_coords"), prompt.get("point_labels"),
                                            prompt.get("box"), self.original_size, self.input_size)
        return coords, kinds, keep, mask_prompt(prompt.get("mask_input"), self.hp.mask_size)
