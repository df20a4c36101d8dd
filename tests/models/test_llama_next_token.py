"""GraphModel.next_token: the token chosen on the backend (greedy: the argmax; top-k: the k best and their logits,
then the host's draw) equals the sampler's choice from the whole logits, token after token."""
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_tiny import write_tiny_llama

from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.runner import GraphModel
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
