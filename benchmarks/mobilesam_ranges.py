"""Where MobileSAM's image encoder would overflow in F16: the largest |activation| of every module of the official
PyTorch encoder (F32) on an image, against F16's largest finite value 65504.

    python benchmarks/mobilesam_ranges.py [--checkpoint mobile_sam.pt] [-i image.jpg] [--top N]

Without --checkpoint it uses the seeded random-weights checkpoint (whose activations stay small); run it with the
real mobile_sam.pt to decide which nodes `--dtype f16` must keep in F32. Needs torch and mobile_sam.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ggpy.models.mobilesam.timm_stub import install_timm_stub  # noqa: E402

install_timm_stub()

from ggpy.models.mobilesam.options import SAMPLE_IMAGE  # noqa: E402
from ggpy.models.mobilesam.preprocess import load_image, preprocess  # noqa: E402
from ggpy.models.mobilesam.random_checkpoint import load_reference_model, make_random_checkpoint  # noqa: E402

F16_MAX = 65504.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", help="mobile_sam.pt (default: the seeded random-weights checkpoint)")
    p.add_argument("-i", "--image", default=str(SAMPLE_IMAGE))
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    ckpt = args.checkpoint
    if ckpt is None:
        ckpt = Path(tempfile.mkdtemp()) / "random.pt"
        make_random_checkpoint(ckpt, seed=0)
    encoder = load_reference_model(ckpt).image_encoder.eval()
    largest = {}

    def hook(name):
        def record(module, inputs, out):
            if torch.is_tensor(out):
                largest[name] = max(largest.get(name, 0.0), float(out.detach().abs().max()))
        return record
    for name, module in encoder.named_modules():
        if name:
            module.register_forward_hook(hook(name))
    x = torch.from_numpy(preprocess(load_image(args.image)))[None]
    with torch.inference_mode():
        encoder(x)
    print("| module | max abs activation | share of F16's max |\n| --- | ---: | ---: |")
    for name, v in sorted(largest.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"| {name} | {v:.1f} | {v / F16_MAX:.2e} |")
    over = [name for name, v in largest.items() if v > F16_MAX / 4]
    print(f"\nmodules above a quarter of F16's range: {over or 'none'}")


if __name__ == "__main__":
    main()
