"""GraphModel.next_token: the token chosen on the backend (greedy: the argmax; top-k: the k best and their logits,
then the host's draw) equals the sampler's choice from the whole logits, token after token; with a sliding window
too, through the token step's staged mask rows (written a token at a time: StagedCPU stages as CUDA does)."""
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_tiny import write_tiny_llama
from staged_cpu import StagedCPU

from ggpy.backends.cpu.backend import CPUBackend
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.model import mask_ramp, mask_rows
from ggpy.models.llama.runner import KV_PAD, GraphModel
from ggpy.models.llama.sampling import Sampler

SEED = int(np.random.SeedSequence().entropy % 2**32)


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def pair(request, tmp_path_factory):
    """Two GraphModels of one random GGUF on one backend: one choosing on the backend, one handing out its logits
    (cuda: skipped without a GPU)."""
    backend = request.getfixturevalue("cuda_backend") if request.param == "cuda" else "cpu"
    path = write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=SEED, n_layer=2)
    model = open_llama(path)
    return GraphModel(model, backend, 2, n_ctx=64), GraphModel(model, backend, 2, n_ctx=64)


@pytest.mark.parametrize("temp, top_k, top_p", [(0, 40, 0.95), (0.8, 40, 0.95), (1.5, 5, 1.0), (0.9, 0, 0.9)])
def test_next_token_chooses_what_the_sampler_chooses_from_the_logits(pair, temp, top_k, top_p):
    device, host = pair
    device.reset(), host.reset()
    on_device, on_host = Sampler(temp, top_k, top_p, seed=SEED), Sampler(temp, top_k, top_p, seed=SEED)
    tokens_before = device.stats.tokens
    prompt = [int(t) for t in np.random.default_rng(SEED).integers(0, device.hp.n_vocab, 9)]
    a = device.next_token(prompt, on_device)
    b = on_host(host.eval(prompt, all_logits=False)[-1])
    for _ in range(12):
        assert a == b, f"seed {SEED}"
        a, b = device.next_token([a], on_device), on_host(host.eval([b])[-1])
    head = on_device.device_head()
    assert head is None or device._lanes[True].current.key[3] == head     # the token graph carried the head
    assert device.stats.tokens - tokens_before == 12


@pytest.mark.parametrize("temp", [0, 0.8])
def test_generate_queues_each_token_before_the_host_handles_the_one_before(pair, temp):
    """generate over GraphModel.submit/result: the same tokens as next_token one at a time, each token's evaluation
    already queued (read into the cache) when on_token gets the token before it, the last one not evaluated."""
    from ggpy.models.llama.generate import generate
    device, host = pair
    prompt = [int(t) for t in np.random.default_rng(SEED + 1).integers(0, device.hp.n_vocab, 7)]
    host.reset()
    sampler = Sampler(temp, 40, 0.95, seed=SEED)
    want = [host.next_token(prompt, sampler)]
    for _ in range(9):
        want.append(host.next_token([want[-1]], sampler))
    device.reset()
    seen = []
    out = generate(device, prompt, 10, Sampler(temp, 40, 0.95, seed=SEED),
                   on_token=lambda t: seen.append((t, device.n_past)))
    assert out.tokens == want == [t for t, _ in seen], f"seed {SEED}"
    assert [n for _, n in seen] == [len(prompt) + i + 1 for i in range(9)] + [len(prompt) + 9]
    with pytest.raises(RuntimeError, match="without a submit"):
        device.result()


def window_mask(n_swa: int, n_past: int, n_tokens: int, n_kv: int) -> np.ndarray:
    """The mask (n_tokens, n_kv) by its definition: row j is 0 over cache rows p <= n_past + j (causal, n_swa 0) and
    with n_past + j - p < n_swa (sliding), -inf elsewhere."""
    d = n_past + np.arange(n_tokens)[:, None] - np.arange(n_kv)[None, :]
    return np.where((d >= 0) & ((d < n_swa) if n_swa else True), 0.0, -np.inf).astype(np.float32)


@pytest.mark.parametrize("n_swa", [0, 1, 5, 300])
def test_mask_rows_are_windows_of_the_ramp(n_swa):
    ramp = mask_ramp(320, n_swa)
    for n_past, n_tokens, n_kv in ((0, 1, 256), (0, 7, 256), (3, 1, 256), (250, 70, 320), (319, 1, 320), (0, 320, 320)):
        np.testing.assert_array_equal(mask_rows(ramp, n_past, n_tokens, n_kv)[0, 0],
                                      window_mask(n_swa, n_past, n_tokens, n_kv))


N_SWA, SWA_CTX = 5, KV_PAD + 64


@pytest.fixture(scope="module", params=["staged", "cuda"])
def swa_pairs(request, tmp_path_factory):
    """{pattern: (GraphModel on a staging backend, GraphModel evaluating logits)} of random GGUFs with a sliding
    window of N_SWA, pattern 2 (blocks 0 and 2 slide: both masks) and 0 (every block: no causal mask). staged: the
    first over StagedCPU, the second over a CPUBackend (no staging: the masks set as arrays); cuda: both on the GPU
    (skipped without one; the second's graphs have no sampling head, so no token step)."""
    cuda = request.param == "cuda"
    backend = request.getfixturevalue("cuda_backend") if cuda else StagedCPU(n_threads=2)
    reference = backend if cuda else CPUBackend(n_threads=2)
    out = {}
    for pattern in (2, 0):
        meta = {"llama.attention.sliding_window": N_SWA, "llama.attention.sliding_window_pattern": pattern}
        path = write_tiny_llama(tmp_path_factory.mktemp("swa") / "swa.gguf", seed=SEED, n_layer=3, n_ctx=SWA_CTX,
                                metadata=meta)
        model = open_llama(path)
        out[pattern] = (GraphModel(model, backend, n_ctx=SWA_CTX, cache_type_k="f32", cache_type_v="f32"),
                        GraphModel(model, reference, n_ctx=SWA_CTX, cache_type_k="f32", cache_type_v="f32"))
    return out


@pytest.mark.parametrize("pattern", [2, 0])
def test_token_step_with_a_sliding_window(swa_pairs, pattern):
    """Past the window from the start, then after reset() from a long prompt across a KV_PAD boundary (n_kv 256 ->
    320): each token through the token step (its mask rows those of the definition after every token), the tokens
    and the k best logits those of the model evaluating the whole logits with the masks as arrays."""
    device, host = swa_pairs[pattern]
    assert device.hp.n_swa == N_SWA and any(device.hp.swa_layers) and all(device.hp.swa_layers) == (pattern == 0)
    exact = isinstance(device.backend, StagedCPU)       # the same CPU kernels; CUDA's graphs differ by the head
    rng = np.random.default_rng(SEED)
    for n_prompt, n_gen in ((3, 3 * N_SWA), (KV_PAD - 6, 14)):
        device.reset(), host.reset()
        on_device, on_host = Sampler(0.8, 8, 1.0, seed=SEED), Sampler(0.8, 8, 1.0, seed=SEED)
        prompt = [int(t) for t in rng.integers(0, device.hp.n_vocab, n_prompt)]
        a, logits = device.next_token(prompt, on_device), host.eval(prompt, all_logits=False)[-1]
        for _ in range(n_gen):
            assert a == on_host(logits), f"seed {SEED}, n_past {host.n_past}"
            a, logits = device.next_token([a], on_device), host.eval([a])[-1]
            ts, n = device._token_lane.token, device.n_past - 1
            assert ts is not None and ts.mask_n == n and ts.lo <= n < ts.hi, "not through the token step"
            assert (ts.mask is None) == (pattern == 0)
            np.testing.assert_array_equal(ts.swa, window_mask(N_SWA, n, 1, ts.hi)[0])
            if ts.mask is not None:
                np.testing.assert_array_equal(ts.mask, window_mask(0, n, 1, ts.hi)[0])
            want = np.sort(logits)[::-1][:8]
            np.testing.assert_allclose(ts.values, want, rtol=0 if exact else 1e-5, atol=0 if exact else 1e-5)
        assert device.n_past == n_prompt + n_gen
    assert ts.hi == SWA_CTX and ts.lo == KV_PAD
