"""Segment the object under one point with MobileSAM on ggpy (SAM's predictor API), as a library user would.

    python examples/segment_point.py [-m model.gguf] [-i image.jpg] [-p X Y] [-o mask.png] [-t THREADS]

Without -m it uses the seeded random-weights model (the mask is then meaningless); `ggpy-sam convert` makes a real
one from mobile_sam.pt. Needs the `sam` extra: pip install "ggpy[sam]".
"""
import argparse

from ggpy.models.mobilesam.options import SAMPLE_IMAGE
from ggpy.models.mobilesam.predictor import Predictor, best_mask_index
from ggpy.models.mobilesam.preprocess import load_image
from ggpy.models.mobilesam.random_weights import random_model
from ggpy.models.mobilesam.render import save_mask


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", help="GGUF made by `ggpy-sam convert` (default: seeded random weights)")
    p.add_argument("-i", "--image", default=str(SAMPLE_IMAGE))
    p.add_argument("-p", "--point", nargs=2, type=float, default=None, metavar=("X", "Y"),
                   help="the point in pixels (default: the image's centre)")
    p.add_argument("-o", "--output", default="mask.png")
    p.add_argument("-t", "--threads", type=int, default=None)
    args = p.parse_args()

    image = load_image(args.image)                          # uint8 (H, W, 3)
    h, w = image.shape[:2]
    x, y = args.point or (w / 2, h / 2)
    predictor = Predictor(args.model or random_model(), backend="cpu", n_threads=args.threads)
    predictor.set_image(image)                              # the image encoder, once per image
    masks, scores, _ = predictor.predict(point_coords=[[x, y]], point_labels=[1])
    best = best_mask_index(scores)
    save_mask(masks[best], args.output)
    print(f"point ({x:g}, {y:g}): IoU scores {', '.join(f'{s:.3f}' for s in scores)}; mask {best} "
          f"({int(masks[best].sum())} pixels) -> {args.output}")


if __name__ == "__main__":
    main()
