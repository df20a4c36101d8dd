"""MobileSAM's `everything` command (seeded random weights, no torch): its JSON, overlay, report and argument
errors."""
import json

import numpy as np
import pytest
from PIL import Image

from ggpy.models.mobilesam.cli import main
from ggpy.models.mobilesam.options import SAMPLE_IMAGE
from ggpy.models.mobilesam.everything import overlay
from ggpy.models.mobilesam.mask_rle import masks_to_rle


def test_everything_writes_coco_rle_json_and_overlay(tmp_path, capsys):
    out, png = tmp_path / "masks.json", tmp_path / "overlay.png"
    main(["everything", "-i", str(SAMPLE_IMAGE), "-o", str(out), "--overlay", str(png), "--points-per-side", "3",
          "--points-per-batch", "4", "--pred-iou-thresh", "0", "--stability-score-thresh", "0",
          "--box-nms-thresh", "1", "-t", "2"])
    text = capsys.readouterr()
    records = json.loads(out.read_text())
    assert len(records) == 27                      # 9 points x 3 masks, nothing filtered
    assert f"{len(records)} masks -> {out}" in text.out and "3 batches of up to 4 points" in text.out
    assert "time per stage: encode" in text.out and "decode" in text.out and "postprocess" in text.out
    assert "3/3" in text.err                       # the progress bar over batches
    with Image.open(SAMPLE_IMAGE) as im:
        w, h = im.size
    for r in records:
        assert set(r) == {"segmentation", "area", "bbox", "predicted_iou", "point_coords", "stability_score",
                          "crop_box"}
        assert r["segmentation"]["size"] == [h, w] and isinstance(r["segmentation"]["counts"], str)
        assert r["crop_box"] == [0, 0, w, h] and len(r["bbox"]) == 4 and len(r["point_coords"]) == 1
    with Image.open(png) as im:
        assert im.size == (w, h) and im.mode == "RGB"


def test_overlay_colours_each_mask_and_its_outline():
    image = np.full((20, 30, 3), 100, np.uint8)
    a = np.zeros((20, 30), bool)
    a[2:10, 2:12] = True
    b = np.zeros((20, 30), bool)
    b[12:18, 15:28] = True
    out = overlay(image, [a, b])
    assert (out[~(a | b)] == 100).all()
    assert len({tuple(out[5, 6]), tuple(out[15, 20])}) == 2          # two colours
    assert tuple(out[2, 2]) != tuple(out[5, 6])                        # the outline is opaque, the inside blended
    assert masks_to_rle(a[None])[0]["counts"][0] == 2 * 20 + 2


@pytest.mark.parametrize("args,message", [
    (["-i", "missing.jpg"], "image missing.jpg does not exist"),
    (["-m", "missing.gguf"], "model missing.gguf does not exist"),
    (["--points-per-side", "0"], "argument --points-per-side: expected a whole number >= 1, got '0'"),
    (["--points-per-batch", "x"], "argument --points-per-batch: expected a whole number >= 1, got 'x'"),
    (["--pred-iou-thresh", "1.5"], "argument --pred-iou-thresh: expected a number from 0 to 1, got '1.5'"),
    (["--stability-score-thresh", "-0.1"], "expected a number from 0 to 1, got '-0.1'"),
    (["--box-nms-thresh", "nan"], "expected a number from 0 to 1, got 'nan'"),
    (["--crop-n-layers", "-1"], "argument --crop-n-layers: expected a whole number >= 0, got '-1'"),
    (["--min-mask-region-area", "2.5"], "argument --min-mask-region-area: expected a whole number >= 0"),
    (["-b", "tpu"], "argument -b/--backend: expected cpu, cuda or cuda:N, got 'tpu'"),
    (["-t", "0"], "argument -t/--threads: expected a whole number >= 1, got '0'"),
    (["-o", "/no/such/folder/m.json"], "/no/such/folder/m.json: its folder /no/such/folder does not exist"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, args, message):
    base = {"-i": str(SAMPLE_IMAGE), "-o": str(tmp_path / "m.json")}
    for flag in ("-i", "-o"):
        if flag in args:
            base.pop(flag)
    argv = ["everything"] + [x for kv in base.items() for x in kv] + args
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error: " in err and message in err
