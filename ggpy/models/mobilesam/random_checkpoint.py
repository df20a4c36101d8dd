"""Seeded random MobileSAM checkpoints with the official keys, and the official torch model loaded from one.

A freshly built model hides conversion bugs: BatchNorm running stats are (0, 1), the last BatchNorm of
each MBConv has gamma 0, LayerNorms are (1, 0) and attention biases are 0. `make_random_checkpoint` gives
all of those deterministic random values of sane magnitude, so activations stay O(1) through the network.
Needs torch and mobile_sam.
"""
from __future__ import annotations

import torch

from .timm_stub import install_timm_stub


def _build():
    install_timm_stub()
    from mobile_sam import build_sam_vit_t

    return build_sam_vit_t()


@torch.no_grad()
def _randomise(model: torch.nn.Module, gen: torch.Generator):
    def uniform(t, lo, hi):
        t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=gen))

    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            uniform(module.running_mean, -0.5, 0.5)
            uniform(module.running_var, 0.5, 2.0)
            uniform(module.weight, 0.5, 1.5)
            uniform(module.bias, -0.5, 0.5)
        elif isinstance(module, torch.nn.LayerNorm) or type(module).__name__ == "LayerNorm2d":
            uniform(module.weight, 0.5, 1.5)
            uniform(module.bias, -0.5, 0.5)
    for name, param in model.named_parameters():
        if name.endswith("attention_biases"):
            param.copy_(torch.randn(param.shape, generator=gen))


def make_random_checkpoint(path, seed: int = 0) -> None:
    """Save the state dict of `build_sam_vit_t()` built under torch.manual_seed(seed), with every BatchNorm,
    LayerNorm(2d) and attention-bias parameter set to seeded random values, to `path` (torch.save)."""
    torch.manual_seed(seed)
    model = _build()
    _randomise(model, torch.Generator().manual_seed(seed))
    torch.save(model.state_dict(), path)


def load_reference_model(checkpoint_path):
    """The official torch Sam loaded from `checkpoint_path`, in eval mode (eval() after loading: TinyViT's
    attention caches its gathered bias table `ab` when eval() is called)."""
    model = _build()
    model.load_state_dict(torch.load(checkpoint_path, map_location="cpu", weights_only=True))
    return model.eval()
