"""Convert the official MobileSAM checkpoint (`mobile_sam.pt`, the state dict of mobile_sam's `Sam`) to GGUF.

The file (written with the `gguf` package) holds:
- metadata `general.architecture = "mobilesam"` and `mobilesam.*`: image_size, embed_dims, depths, num_heads,
  window_sizes, mlp_ratio, mbconv_expand_ratio, local_conv_size, neck_dim (image encoder), prompt_embed_dim,
  mask_in_chans (prompt encoder), decoder_depth, decoder_num_heads, decoder_mlp_dim,
  decoder_attention_downsample_rate, num_multimask_outputs, iou_head_hidden_dim (mask decoder), pixel_mean,
  pixel_std, file_type ("f32"/"f16"/"bf16") and layout = "ggml-ne": every array is written as the C-order numpy array
  of its torch shape, so the ggml `ne` a loader sees is the torch shape reversed (a Linear weight (out, in) has
  ne (in, out), a conv weight (Cout, Cin/groups, KH, KW) has ne (KW, KH, Cin/groups, Cout)).
- `<P>.weight`, `<P>.bias` for every TinyViT Conv2d_BN `<P>`: the BatchNorm (eps 1e-5) folded into the
  convolution as Conv2d_BN.fuse() does, in float64.
- `<P>.ab` (torch shape (heads, N, N), N = window²) for every TinyViT Attention `<P>`: attention_biases
  gathered through the offset index table Attention.__init__ builds.
- every other image-encoder tensor (LayerNorms, Linears, the neck), and every prompt_encoder.* and
  mask_decoder.* tensor, under its state-dict name and shape. The unused classifier head
  (image_encoder.head.*, image_encoder.norm_head.*) and BatchNorm `num_batches_tracked` are left out.
With type "f16" ("bf16"), weights of two or more dimensions whose name ends in `.weight` are stored F16 (BF16,
rounded to nearest even); biases, norms, `.ab` tables and positional encodings stay F32.

`convert` reads a checkpoint file and needs torch and mobile_sam (it checks the shapes against a freshly
built `build_sam_vit_t()`); `convert_state_dict` converts a state dict of numpy arrays and needs neither.
"""
from __future__ import annotations

import os
import re
import tempfile

import numpy as np
from tqdm import tqdm

from ggpy import ModelFileError
from ggpy.types import BF16

from .architecture import DECODER, TINYVIT_5M, attention_bias_index, official_shapes

ARCH = "mobilesam"
PIXEL_MEAN = [123.675, 116.28, 103.53]
PIXEL_STD = [58.395, 57.12, 57.375]
BN_EPS = 1e-5
SKIPPED_PREFIXES = ("image_encoder.head.", "image_encoder.norm_head.")
FILE_TYPES = ("f32", "f16", "bf16")
_BN_PARTS = ("bn.weight", "bn.bias", "bn.running_mean", "bn.running_var")


# -- reading and checking the checkpoint ------------------------------------------------------------
def load_state_dict(path) -> dict:
    """The checkpoint's tensors as numpy arrays, read with torch's safe loader (weights_only=True) only."""
    import torch

    if not os.path.isfile(path):
        raise ModelFileError(f"checkpoint {path} does not exist")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle errors, refused globals, not a torch file
        first = str(e).splitlines()[0].split(". ")[0] if str(e) else ""
        raise ModelFileError(f"{path} cannot be read as a torch state dict by the safe loader "
                             f"(torch.load with weights_only=True: {type(e).__name__}: {first}); ggpy never "
                             "unpickles arbitrary objects") from None
    if isinstance(obj, dict):
        for wrapper in ("model", "state_dict"):
            if isinstance(obj.get(wrapper), dict):
                obj = obj[wrapper]
                break
    if not isinstance(obj, dict) or not obj:
        raise ModelFileError(f"{path} holds a {type(obj).__name__}, expected a state dict (tensor name -> tensor) "
                             "of mobile_sam's Sam")
    for key, value in obj.items():
        if not isinstance(value, torch.Tensor):
            raise ModelFileError(f"{path}: key '{key}' holds a {type(value).__name__}, expected a tensor "
                                 "(is this a state dict of mobile_sam's Sam?)")
    return {key: value.detach().to(torch.float64).numpy() for key, value in obj.items()}


def reference_shapes() -> dict:
    """State-dict key -> torch shape of a freshly built `build_sam_vit_t()` (needs torch and mobile_sam)."""
    import torch

    from .timm_stub import install_timm_stub

    install_timm_stub()
    from mobile_sam import build_sam_vit_t

    with torch.no_grad():
        model = build_sam_vit_t()
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_state_dict(state: dict, expected: dict, path) -> None:
    """Every expected key present with its expected shape, and no key the architecture does not have
    (BatchNorm num_batches_tracked is dropped before)."""
    for key, shape in expected.items():
        if key not in state:
            raise ModelFileError(f"{path}: missing key '{key}' (expected shape {shape})")
        if tuple(state[key].shape) != shape:
            raise ModelFileError(f"{path}: key '{key}' has shape {tuple(state[key].shape)}, expected {shape}")
    extra = sorted(set(state) - set(expected))
    if extra:
        raise ModelFileError(f"{path}: unexpected key '{extra[0]}' (shape {tuple(state[extra[0]].shape)}; "
                             f"{len(extra)} unexpected in all), not part of MobileSAM (build_sam_vit_t)")


def _blocks(state: dict, layer: int) -> int:
    pat = re.compile(rf"image_encoder\.layers\.{layer}\.blocks\.(\d+)\.")
    return 1 + max(int(m.group(1)) for k in state if (m := pat.match(k)))


def derive_hparams(state: dict) -> dict:
    """The hyper-parameters read off the checkpoint's shapes (image_size is not visible in them)."""
    enc = "image_encoder."
    n_layers = len(TINYVIT_5M["depths"])
    conv1 = state[enc + "layers.0.blocks.0.conv1.c.weight"]
    dims = (conv1.shape[1],) + tuple(state[f"{enc}layers.{i}.blocks.0.attn.norm.weight"].shape[0]
                                     for i in range(1, n_layers))
    heads = tuple(state[f"{enc}layers.{i}.blocks.0.attn.attention_biases"].shape[0] for i in range(1, n_layers))
    windows = tuple(round(state[f"{enc}layers.{i}.blocks.0.attn.attention_biases"].shape[1] ** 0.5)
                    for i in range(1, n_layers))
    fc1 = state[enc + "layers.1.blocks.0.mlp.fc1.weight"]
    return {
        "image_size": TINYVIT_5M["image_size"],
        "embed_dims": dims,
        "depths": tuple(_blocks(state, i) for i in range(n_layers)),
        # layer 0 is convolutional: it has no attention, so its head count and window are the architecture's
        "num_heads": TINYVIT_5M["num_heads"][:1] + heads,
        "window_sizes": TINYVIT_5M["window_sizes"][:1] + windows,
        "mlp_ratio": fc1.shape[0] / fc1.shape[1],
        "mbconv_expand_ratio": conv1.shape[0] / conv1.shape[1],
        "local_conv_size": state[enc + "layers.1.blocks.0.local_conv.c.weight"].shape[-1],
        "neck_dim": state[enc + "neck.0.weight"].shape[0],
    }


def derive_decoder_hparams(state: dict) -> dict:
    """Prompt encoder and mask decoder hyper-parameters read off the checkpoint's shapes (all but the head count,
    which the shapes do not show: the architecture's)."""
    t = "mask_decoder.transformer."
    q_proj = state[t + "layers.0.cross_attn_token_to_image.q_proj.weight"]
    layer = re.compile(rf"{re.escape(t)}layers\.(\d+)\.")
    return {
        "prompt_embed_dim": state["prompt_encoder.no_mask_embed.weight"].shape[1],
        "mask_in_chans": state["prompt_encoder.mask_downscaling.3.weight"].shape[0],
        "decoder_depth": 1 + max(int(m.group(1)) for k in state if (m := layer.match(k))),
        "decoder_num_heads": DECODER["num_heads"],
        "decoder_mlp_dim": state[t + "layers.0.mlp.lin1.weight"].shape[0],
        "decoder_attention_downsample_rate": q_proj.shape[1] // q_proj.shape[0],
        "num_multimask_outputs": state["mask_decoder.mask_tokens.weight"].shape[0] - 1,
        "iou_head_hidden_dim": state["mask_decoder.iou_prediction_head.layers.0.weight"].shape[0],
    }


DECODER_HPARAMS = ("prompt_embed_dim", "mask_in_chans", "decoder_depth", "decoder_num_heads", "decoder_mlp_dim",
                   "decoder_attention_downsample_rate", "num_multimask_outputs", "iou_head_hidden_dim")


def check_hparams(hparams: dict, path) -> None:
    for name, want in TINYVIT_5M.items():
        if hparams[name] != want:
            raise ModelFileError(f"{path}: {name} read from the checkpoint's shapes is {hparams[name]}, "
                                 f"MobileSAM has {want}")


# -- the conversions ---------------------------------------------------------------------------------
def fold_conv_bn(state: dict, prefix: str):
    """(weight (Cout, Cin/groups, KH, KW), bias (Cout,)) of Conv2d_BN `prefix` with its BatchNorm folded in."""
    gamma, beta, mean, var = (state[f"{prefix}.{p}"] for p in _BN_PARTS)
    scale = gamma / np.sqrt(var + BN_EPS)
    return state[prefix + ".c.weight"] * scale[:, None, None, None], beta - mean * scale


def gather_attention_bias(biases: np.ndarray, window: int) -> np.ndarray:
    """(heads, N, N) bias table of one attention from its (heads, n_offsets) parameters."""
    return biases[:, attention_bias_index(window)]


def convert_tensors(state: dict, hparams: dict):
    """Yield (name, float64 array in torch shape) of every tensor the GGUF file holds."""
    conv_bn = sorted({k[: -len(".c.weight")] for k in state if k.endswith(".c.weight")})
    done = set()
    for prefix in conv_bn:
        w, b = fold_conv_bn(state, prefix)
        done.update([prefix + ".c.weight"] + [f"{prefix}.{p}" for p in _BN_PARTS])
        yield prefix + ".weight", w
        yield prefix + ".bias", b
    for key in sorted(k for k in state if k.endswith(".attention_biases")):
        layer = int(re.match(r"image_encoder\.layers\.(\d+)\.", key).group(1))
        done.add(key)
        yield key[: -len("attention_biases")] + "ab", gather_attention_bias(state[key], hparams["window_sizes"][layer])
    for key, value in state.items():
        if key not in done and not key.startswith(SKIPPED_PREFIXES):
            yield key, value


def storage_dtype(name: str, array: np.ndarray, file_type: str):
    """F16 (BF16) for weights of two or more dimensions in an "f16" ("bf16") file; F32 for everything else."""
    if file_type != "f32" and array.ndim >= 2 and name.endswith(".weight"):
        return {"f16": np.float16, "bf16": BF16.dtype}[file_type]
    return np.float32


# -- writing -----------------------------------------------------------------------------------------
def _write(out_path: str, tensors: dict, hparams: dict, file_type: str, progress: bool):
    import gguf

    writer = gguf.GGUFWriter(out_path, ARCH)
    writer.add_uint32(f"{ARCH}.image_size", hparams["image_size"])
    for name in ("embed_dims", "depths", "num_heads", "window_sizes"):
        writer.add_array(f"{ARCH}.{name}", [int(v) for v in hparams[name]])
    writer.add_float32(f"{ARCH}.mlp_ratio", hparams["mlp_ratio"])
    writer.add_float32(f"{ARCH}.mbconv_expand_ratio", hparams["mbconv_expand_ratio"])
    writer.add_uint32(f"{ARCH}.local_conv_size", hparams["local_conv_size"])
    writer.add_uint32(f"{ARCH}.neck_dim", hparams["neck_dim"])
    for name in DECODER_HPARAMS:
        writer.add_uint32(f"{ARCH}.{name}", int(hparams[name]))
    writer.add_array(f"{ARCH}.pixel_mean", PIXEL_MEAN)
    writer.add_array(f"{ARCH}.pixel_std", PIXEL_STD)
    writer.add_string(f"{ARCH}.layout", "ggml-ne")
    writer.add_string(f"{ARCH}.file_type", file_type)
    for name, array in tensors.items():
        # BF16 rounds the F32 file's values: ml_dtypes >= 0.7 rounds float64 directly, one ulp off at times
        dtype = storage_dtype(name, array, file_type)
        stored = np.ascontiguousarray(array.astype(np.float32) if dtype == BF16.dtype else array, dtype=dtype)
        if stored.dtype == BF16.dtype:      # the gguf writer takes BF16 as raw 16-bit words with its type
            writer.add_tensor(name, stored.view(np.uint16), raw_shape=stored.shape,
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            writer.add_tensor(name, stored)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=progress)
    writer.close()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_type(file_type: str):
    if file_type not in FILE_TYPES:
        raise ValueError(f"type must be one of {FILE_TYPES}, got {file_type!r}")


def _without_counters(d: dict) -> dict:
    """`d` without BatchNorm's num_batches_tracked entries (training bookkeeping, not weights)."""
    return {k: v for k, v in d.items() if not k.endswith("num_batches_tracked")}


def convert_state_dict(state: dict, out_path, type: str = "f32", progress: bool = True,
                       expected_shapes: dict | None = None, source: str = "state dict") -> dict:
    """Convert `state` (key -> array, the official keys) to the GGUF file `out_path` with weights of `type`
    ("f32" or "f16"); no torch needed. `expected_shapes` (key -> torch shape) defaults to the architecture
    table of architecture.py; `source` names the state dict in error messages.

    Everything is checked and converted before anything is written; the file appears (by rename) only when
    complete. Returns the hyper-parameters written. ModelFileError names a missing or misshapen key.
    """
    _check_type(type)
    if expected_shapes is None:
        expected_shapes = official_shapes()
    state = {k: np.asarray(v, dtype=np.float64) for k, v in _without_counters(state).items()}
    check_state_dict(state, {k: tuple(v) for k, v in _without_counters(expected_shapes).items()}, source)
    hparams = derive_hparams(state)
    check_hparams(hparams, source)
    hparams.update(derive_decoder_hparams(state))
    tensors = dict(tqdm(convert_tensors(state, hparams), desc="folding BatchNorm, gathering biases",
                        unit="tensor", disable=not progress))
    out_path = os.fspath(out_path)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(out_path) + ".", suffix=".part",
                               dir=os.path.dirname(os.path.abspath(out_path)))
    os.close(fd)
    try:
        _write(tmp, tensors, hparams, type, progress)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return hparams


def convert(checkpoint_path, out_path, type: str = "f32", progress: bool = True) -> dict:
    """Convert the checkpoint `checkpoint_path` (torch's safe loader; checked against the shapes of a freshly
    built `build_sam_vit_t()`) to the GGUF file `out_path`; see convert_state_dict. Needs torch, mobile_sam."""
    _check_type(type)
    checkpoint_path = os.fspath(checkpoint_path)
    return convert_state_dict(load_state_dict(checkpoint_path), out_path, type, progress,
                              expected_shapes=reference_shapes(), source=checkpoint_path)
