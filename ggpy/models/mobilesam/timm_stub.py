"""Stand-ins for the few timm and torchvision helpers `mobile_sam` imports, for tests without those packages.

mobile_sam's TinyViT imports DropPath, to_2tuple, trunc_normal_ and register_model from timm, and
`import mobile_sam` reaches `torchvision.transforms.functional` (resize, to_pil_image) through the
predictor's ResizeLongestSide and `torchvision.ops.boxes` (batched_nms, box_area) through the automatic
mask generator, which ggpy does not use (its batched_nms stand-in refuses to run).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types


def _module(name: str, **attrs) -> types.ModuleType:
    """A stand-in module registered in sys.modules, with a module spec (importlib.util.find_spec, as
    torch.onnx's exporter calls it, raises for a module without one)."""
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = mod
    return mod


def _install_timm():
    import torch

    class DropPath(torch.nn.Module):
        """Stochastic depth: drops whole samples while training, identity at p=0 and in eval."""

        def __init__(self, drop_prob=0.0):
            super().__init__()
            self.drop_prob = drop_prob

        def forward(self, x):
            p = self.drop_prob or 0.0
            if p == 0.0 or not self.training:
                return x
            keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1.0 - p)
            return x * keep / (1.0 - p)

    def to_2tuple(x):
        return tuple(x) if isinstance(x, (tuple, list)) else (x, x)

    def register_model(fn):
        return fn

    layers = _module("timm.models.layers", DropPath=DropPath, to_2tuple=to_2tuple,
                     trunc_normal_=torch.nn.init.trunc_normal_)
    registry = _module("timm.models.registry", register_model=register_model)
    models = _module("timm.models", layers=layers, registry=registry, register_model=register_model)
    _module("timm", models=models)


def _install_torchvision():
    import numpy as np
    from PIL import Image

    def to_pil_image(pic):
        return Image.fromarray(np.asarray(pic))

    def resize(img, size):
        """torchvision's resize of a PIL image to (h, w): PIL bilinear (antialiased, as torchvision's default)."""
        return img.resize((int(size[1]), int(size[0])), Image.BILINEAR)

    def box_area(boxes):
        return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

    def batched_nms(*args, **kwargs):
        raise NotImplementedError("torchvision is not installed: the stand-in has no batched_nms")

    functional = _module("torchvision.transforms.functional", resize=resize, to_pil_image=to_pil_image)
    transforms = _module("torchvision.transforms", functional=functional)
    boxes = _module("torchvision.ops.boxes", batched_nms=batched_nms, box_area=box_area)
    ops = _module("torchvision.ops", boxes=boxes)
    _module("torchvision", transforms=transforms, ops=ops)


def _missing(name: str) -> bool:
    return name not in sys.modules and importlib.util.find_spec(name) is None


def install_timm_stub():
    """Register minimal `timm` (and `torchvision`) modules in sys.modules where the real ones are missing,
    so that `import mobile_sam` works. Needs torch."""
    if _missing("timm"):
        _install_timm()
    if _missing("torchvision"):
        _install_torchvision()
