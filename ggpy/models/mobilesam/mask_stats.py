"""The automatic mask generator's post-processing of low-resolution masks as one planned ggpy graph.

For a chunk of P low-resolution mask logits of one image (or crop), gathered by index from the decoder's mask
store (grid_decoder: they never leave the backend in between), the graph upscales them to the image size (SAM's
postprocess_masks), thresholds them, counts the pixels above threshold +- offset (the stability score's
intersection and union), the area, and finds each mask's box from its rows and columns that hold a set pixel
(argmax over index ramps, as SAM's batched_mask_to_box takes maxima over coordinates). Nothing loops over pixels
in Python; only P binary masks (F16, column by column: the RLEs' order), the counts and the box edges come back.
"""
from __future__ import annotations

import numpy as np

import ggpy

from .predictor import postprocess_masks


def column_max(x, band: int = 16):
    """Max over dim 1 of x.ne = (W, H, C, 1) -> ne = (W, C): pooled in bands of `band` rows first (their rows
    stream in order; one H-row window would walk each column alone), then over the bands. The band pool pads the
    rows with ceil(r / 2) (r = band * ceil(H / band) - H), which never win a max, so its windows cover every row."""
    w, h, c = x.ne[:3]
    pad = (band * -(-h // band) - h + 1) // 2
    bands = ggpy.pool_2d(x, "max", 1, band, 1, band, 0, pad) if h > band else x
    return ggpy.reshape_2d(ggpy.pool_2d(bands, "max", 1, bands.ne[1], 1, bands.ne[1]), w, c)


def _edges(indicator, ramp_up, ramp_down):
    """First and last index (I32 ne = (P,)) of the 1s along ne[0] of an indicator ne = (n, P) of 0/1 (a row or
    column per mask): argmax of the indicator times n - i (first) and times i + 1 (last); both 0 for no 1."""
    return ggpy.argmax(ggpy.mul(indicator, ramp_down)), ggpy.argmax(ggpy.mul(indicator, ramp_up))


class MaskStatsGraph:
    """Upscaling, thresholds, stability counts, areas and boxes of up to `capacity` masks of one image size, taken
    from the rows of `store` (low-resolution masks ne = (4E 4E, R), a tensor of the backend's memory), planned once
    and re-evaluated per chunk."""

    def __init__(self, hp, backends, store, input_size, image_size, capacity: int, mask_threshold: float = 0.0,
                 stability_offset: float = 1.0):
        """input_size: (h, w) of the image resized into the encoder's frame; image_size: (H, W) of the image."""
        s, p = hp.mask_size, capacity
        h, w = image_size
        ctx = ggpy.Context()
        self.capacity, self.image_size = p, (h, w)
        self.rows = ctx.new_tensor(ggpy.I32, (p,)).set_name("rows").set_input()
        low_res = ggpy.reshape_4d(ggpy.get_rows(store, self.rows), s, s, p, 1)
        self.ramps = {n: [ctx.new_tensor(ggpy.F32, (n, 1)).set_name(f"ramp_{k}_{n}").set_input() for k in ("up", "dn")]
                      for n in {h, w}}
        logits = postprocess_masks(low_res, input_size, image_size, hp.image_size)             # (W, H, P)
        columns = ggpy.reshape_2d(ggpy.cont(ggpy.permute(logits, 1, 0, 2, 3)), h * w, p)      # (H W, P)

        def above(t):
            return ggpy.step(ggpy.scale(columns, 1.0, -t))
        self.binary = above(mask_threshold)                                    # (H W, P) 0/1, column by column
        self.intersections = ggpy.sum_rows(above(mask_threshold + stability_offset))
        self.unions = ggpy.sum_rows(above(mask_threshold - stability_offset))
        self.area = ggpy.sum_rows(self.binary)
        col_any = ggpy.step(ggpy.reshape_2d(ggpy.sum_rows(ggpy.reshape_2d(self.binary, h, w * p)), w, p))
        row_any = column_max(ggpy.reshape_4d(self.binary, h, w, p, 1))
        self.y0, self.y1 = _edges(row_any, *self.ramps[h])
        self.x0, self.x1 = _edges(col_any, *self.ramps[w])
        self.columns = ggpy.cast(self.binary, ggpy.F16)          # what comes back: half the bytes, 0 / 1 exactly
        self.outputs = (self.intersections, self.unions, self.area, self.x0, self.y0, self.x1, self.y1, self.columns)
        self.graph = ggpy.Graph()
        for t in self.outputs:
            self.graph.build_forward_expand(t)
        self.runner = ggpy.GraphRunner(self.graph, backends)
        for up, down in self.ramps.values():         # constants: set once (a graph input is never freed by the plan)
            self.runner[up] = np.arange(1, up.ne[0] + 1, dtype=np.float32)
            self.runner[down] = np.arange(down.ne[0], 0, -1, dtype=np.float32)

    def run(self, rows: np.ndarray) -> dict:
        """rows: the n <= capacity rows of the store to take -> {"intersections", "unions", "area": int64 (n,),
        "boxes": int64 (n, 4) XYXY (zeros for an empty mask), "binary": float16 (n, W, H) 0/1, each mask column by
        column (the order of its RLE), a view of the graph's output until the next run}."""
        n = len(rows)
        padded = np.zeros(self.capacity, np.int32)
        padded[:n] = rows
        run = self.runner.set(rows=padded).compute()
        counts = [np.rint(run.get(t).reshape(-1)[:n]).astype(np.int64) for t in self.outputs[:3]]
        boxes = np.stack([run.get(t).reshape(-1)[:n].astype(np.int64) for t in self.outputs[3:7]], axis=1)
        boxes[counts[2] == 0] = 0
        h, w = self.image_size
        binary = run.get(self.columns).reshape(self.capacity, w, h)[:n]
        return {"intersections": counts[0], "unions": counts[1], "area": counts[2], "boxes": boxes, "binary": binary}
