"""The mixture-of-experts feed-forward, as llama.cpp builds it (llm_graph_context::build_moe_ffn with softmax gating
and normalised weights: qwen3moe, and llama with experts: Mixtral): the router's logits (ffn_gate_inp), their
softmax, the n_expert_used best experts of each token (top_k), their probabilities renormalised to sum 1 (and scaled
by expert_weights_scale where the file names one), each chosen expert's SwiGLU by mul_mat_id on the stacked expert
tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps: only the chosen experts' rows are read), summed with those
weights. Shapes in ggml's ne order; h.ne = (n_embd, n_tokens)."""
from __future__ import annotations

import ggpy
from ggpy import ModelFileError

from . import layers

WEIGHTS_SUM_MIN = 6.103515625e-5    # llama.cpp clamps the weights' sum to the smallest F16 normal before dividing


def moe_ffn(m, hp, il: int, h):
    """sum over the token's chosen experts e of w_e * down_e(act(gate_e(h)) * up_e(h)). ne (n_embd, n_tokens)."""
    b, n, d = f"blk.{il}.", h.ne[1], h.ne[0]
    n_expert, used = hp.n_expert, hp.n_expert_used
    probs = ggpy.soft_max(ggpy.mul_mat(m.get(b + "ffn_gate_inp.weight"), h).set_name(b + "ffn_moe_logits"))
    ids = ggpy.top_k(probs, used).set_name(b + "ffn_moe_topk")                                   # (used, n)
    w = ggpy.reshape_2d(ggpy.get_rows(ggpy.reshape_3d(probs, 1, n_expert, n), ids), used, n)     # (used, n)
    w = ggpy.div(w, ggpy.clamp(ggpy.sum_rows(w), WEIGHTS_SUM_MIN, float("inf")))
    if hp.expert_weights_scale not in (0.0, 1.0):
        w = ggpy.scale(w, hp.expert_weights_scale)
    x = ggpy.reshape_3d(h, d, 1, n)
    gate = ggpy.mul_mat_id(m.get(b + "ffn_gate_exps.weight"), x, ids).set_name(b + "ffn_moe_gate")
    up = ggpy.mul_mat_id(m.get(b + "ffn_up_exps.weight"), x, ids).set_name(b + "ffn_moe_up")
    par = ggpy.mul(layers.ACTIVATIONS[hp.spec.act](gate), up)                                    # (n_ff_exp, used, n)
    experts = ggpy.mul_mat_id(m.get(b + "ffn_down_exps.weight"), par, ids).set_name(b + "ffn_moe_down")
    experts = ggpy.mul(experts, ggpy.reshape_3d(w, 1, used, n))                                  # (n_embd, used, n)
    out = None
    for e in range(used):
        v = ggpy.view_2d(experts, d, n, experts.nb[2], e * experts.nb[1])
        out = v if out is None else ggpy.add(out, v)
    return ggpy.cont(out) if used == 1 else out


def moe_tensors(hp) -> dict:
    """The expert FFN's tensors of a block: the router (n_embd -> n_expert) and the stacked experts' matrices."""
    d, f, e = hp.n_embd, hp.n_ff_exp or hp.n_ff, hp.n_expert
    return {"ffn_gate_inp.weight": (d, e), "ffn_gate_exps.weight": (d, f, e), "ffn_down_exps.weight": (f, d, e),
            "ffn_up_exps.weight": (d, f, e)}


def or_dense(dense_build, dense_tensors) -> tuple:
    """(build, tensors) of an FFN that is the experts' where the file has experts (expert_count > 0), else the dense
    one (llama: Mixtral or not)."""
    return (lambda m, hp, il, h: (moe_ffn if hp.n_expert else dense_build)(m, hp, il, h),
            lambda hp: (moe_tensors if hp.n_expert else dense_tensors)(hp))


def read_experts(keys, hp) -> dict:
    """The experts' metadata: n_expert_used in [1, n_expert], the experts' FFN width, the weights' scale."""
    a = hp.arch
    if hp.n_expert and not 1 <= hp.n_expert_used <= hp.n_expert:
        raise ModelFileError(f"{keys.path}: {a}.expert_used_count={hp.n_expert_used}; expected 1 to "
                             f"{a}.expert_count={hp.n_expert}")
    out = {"n_ff_exp": keys.integer(f"{a}.expert_feed_forward_length", hp.n_ff)}
    if f"{a}.expert_weights_scale" in keys.md:
        out["expert_weights_scale"] = keys.number(f"{a}.expert_weights_scale")
    return out
