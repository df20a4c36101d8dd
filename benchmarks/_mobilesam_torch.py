"""The official MobileSAM image encoder in PyTorch and ONNX Runtime, for benchmarks/mobilesam_cpu.py.

mobile_sam imports a few helpers from timm and torchvision, which are not installed here: ggpy/models/mobilesam/
timm_stub's stand-ins take their place.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ggpy.models.mobilesam.timm_stub import install_timm_stub

ONNX_CACHE = Path.home() / ".cache" / "ggpy"


def torch_encoder(state_dict: dict):
    """The official `Sam.image_encoder` (eval mode) holding `state_dict` ({key: numpy array}), loaded strictly."""
    import torch

    install_timm_stub()
    import mobile_sam

    sam = mobile_sam.build_sam_vit_t()
    sam.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state_dict.items()}, strict=True)
    sam.eval()      # again after loading: TinyViT's attention caches its bias table (`ab`) in eval()
    return sam.image_encoder


def onnx_path(encoder, image_size: int) -> Path:
    """Export `encoder` to ONNX once per distinct set of weights; the cached file's path."""
    import torch

    digest = hashlib.sha1()
    for key, value in encoder.state_dict().items():
        digest.update(key.encode())
        digest.update(value.detach().numpy().tobytes())
    path = ONNX_CACHE / f"mobilesam-encoder-{image_size}-{digest.hexdigest()[:12]}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(encoder, (torch.zeros(1, 3, image_size, image_size),), str(tmp),
                              input_names=["image"], output_names=["embedding"], opset_version=18, external_data=False)
        tmp.rename(path)
    return path


def ort_session(path: Path, n_threads: int):
    """An ONNX Runtime CPU session: `n_threads` intra-op threads, one inter-op thread, sequential execution."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = n_threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
