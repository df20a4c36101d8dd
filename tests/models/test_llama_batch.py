"""BatchModel (ggpy/models/llama/batch.py): several sequences in one evaluation, each token with its own sequence,
position and cache row, against each sequence read alone by GraphModel, on the CPU.

Tolerance: each part's last logits within 1e-4 relative (max |diff| / max |logit|) of the lone run's and the same
argmax, where both evaluations multiply with the same kernel: the CPU's mat-muls round the activations to 8 bits (q8)
for up to 48 rows and multiply in float32 above (matmul.Q8_MAX_ROWS), so a batch whose padded token count lies on the
other side of 48 than the lone run's chunk differs by that rounding (~1e-2 on these random models, as GraphModel's own
chunkings of one prompt differ); the tests here keep both sides of it apart."""
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_tiny import DEFAULT_TYPES, write_tiny_llama
from gguf import GGMLQuantizationType as gguf_types

from ggpy.models.llama.batch import BatchModel, Mask, buckets, kv_classes
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.model import mask_ramp
from ggpy.models.llama.runner import GraphModel
from staged_cpu import StagedCPU

SEED = int(np.random.SeedSequence().entropy % 2**32)
N_CTX, N_SEQ = 192, 3          # 64 positions a sequence


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """F32 weights: a quantized matrix's CPU product rounds the activations to 8 bits in kernels chosen by the column
    count (a token's logits then move by 1e-3 to 1e-2 between a batch and a lone run: README's server section), which would
    hide a wrong mask or cell behind that tolerance."""
    f32 = dict.fromkeys(DEFAULT_TYPES, gguf_types.F32)
    return open_llama(write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=SEED, n_layer=2, types=f32))


def lone(model, tokens):
    """Logits (len(tokens), n_vocab) of `tokens` read alone, a token at a time after a first chunk."""
    model.reset()
    return np.concatenate([model.eval(tokens[:1])] + [model.eval([t]) for t in tokens[1:]])


def close(got, want, tol=1e-4):
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel <= tol and got.argmax() == want.argmax(), f"relative {rel:.2e} (seed {SEED})"


def ids(rng, n):
    return [int(t) for t in rng.integers(0, 320, n)]


@pytest.mark.parametrize("backend, flash_attn, tol", [("cpu", "off", 1e-4), ("cpu", "on", 1e-4), ("cuda", "auto", 2e-2)])
def test_sequences_in_one_batch_equal_lone_runs(request, gguf, backend, flash_attn, tol):
    """Three sequences of different lengths: prompt chunks together, then prompt chunks beside generated tokens,
    then one token each (the 'decode' batch), every part's last logits against the lone run's at that position.
    CUDA (skipped without a GPU): its mat-vec (one token) and mat-mul (a batch) kernels differ, hence 2e-2."""
    backend = request.getfixturevalue("cuda_backend") if backend == "cuda" else backend
    rng = np.random.default_rng(SEED)
    texts = [ids(rng, n) for n in (30, 11, 23)]
    ref = GraphModel(gguf, backend, 2, n_ctx=64, n_batch=16, flash_attn=flash_attn)
    want = [lone(ref, t) for t in texts]
    bm = BatchModel(gguf, backend, 2, n_ctx=N_CTX, n_seq=N_SEQ, n_batch=40, flash_attn=flash_attn)
    read = [0, 0, 0]
    for plan in ([(0, 12), (2, 5)], [(0, 10), (1, 9), (2, 16)], [(0, 1), (1, 1), (2, 1)], [(2, 1), (1, 1), (0, 1)],
                 [(0, 6)]):
        parts = [(s, read[s], texts[s][read[s]:read[s] + n]) for s, n in plan]
        got = bm.decode(parts)
        for row, (s, n_past, toks) in zip(got, parts):
            read[s] = n_past + len(toks)
            close(row, want[s][read[s] - 1], tol)
    assert read == [30, 11, 23]


def test_prompt_cache_rereads_from_a_shared_prefix(gguf):
    """A sequence holding one text reads another that shares its first 7 tokens from position 7 (the rows past it
    stale, masked): the same logits as the new text read alone; the other sequences' rows are untouched."""
    rng = np.random.default_rng(SEED + 1)
    a, b, other = ids(rng, 20), ids(rng, 6), ids(rng, 11)
    b = a[:7] + b
    ref = GraphModel(gguf, "cpu", 2, n_ctx=64, n_batch=16)
    bm = BatchModel(gguf, "cpu", 2, n_ctx=N_CTX, n_seq=N_SEQ, n_batch=32)
    bm.decode([(1, 0, a), (2, 0, other[:-1])])
    close(bm.decode([(1, 7, b[7:])])[0], lone(ref, b)[-1])
    close(bm.decode([(2, len(other) - 1, other[-1:])])[0], lone(ref, other)[-1])


def test_sliding_window_masks_per_sequence(tmp_path):
    """A Gemma-2 (sliding window 6, soft-capping; converted by llama.cpp's converter): two sequences past the window,
    decoded together, against each read alone."""
    from hf_convert import convert, save_tiny
    save_tiny(tmp_path / "g2", "Gemma2Config", "Gemma2ForCausalLM", SEED, hidden_size=64, intermediate_size=128,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, num_hidden_layers=2,
              head_dim=16, query_pre_attn_scalar=16, sliding_window=6, tie_word_embeddings=True,
              attn_logit_softcapping=3.0, final_logit_softcapping=4.0)
    path = convert({(tmp_path / "g2", "f32"): tmp_path / "g2.gguf"})[tmp_path / "g2", "f32"]
    g = open_llama(path)
    assert g.hparams.n_swa == 6
    rng = np.random.default_rng(SEED + 2)
    texts = [ids(rng, 14), ids(rng, 10)]
    ref = GraphModel(g, "cpu", 2, n_ctx=32, n_batch=16, cache_type_k="f32", cache_type_v="f32")
    want = [lone(ref, t) for t in texts]
    bm = BatchModel(g, "cpu", 2, n_ctx=64, n_seq=2, n_batch=24, cache_type_k="f32", cache_type_v="f32")
    bm.decode([(0, 0, texts[0][:-3]), (1, 0, texts[1][:-3])])
    for k in (3, 2, 1):
        got = bm.decode([(0, len(texts[0]) - k, texts[0][-k:-k + 1 or None]),
                         (1, len(texts[1]) - k, texts[1][-k:-k + 1 or None])])
        close(got[0], want[0][-k]), close(got[1], want[1][-k])


def reference_mask(parts, n_tokens, n_kv, n_ctx_seq, n_swa=0):
    """The mask as batch.py built it before Mask, numpy over n_tokens x n_kv: token j of a part sees its sequence's
    rows base .. base + pos_j (the last n_swa of them, sliding); a padding token row 0."""
    base, pos, i = np.zeros(n_tokens, np.int64), np.zeros(n_tokens, np.int64), 0
    for seq, n_past, toks in parts:
        base[i:i + len(toks)], pos[i:i + len(toks)] = seq * n_ctx_seq, np.arange(n_past, n_past + len(toks))
        i += len(toks)
    last, rows = base + pos, np.arange(n_kv)[None, :]
    see = (rows >= base[:, None]) & (rows <= last[:, None])
    if n_swa:
        see &= rows >= np.where(np.arange(n_tokens) < i, last - n_swa + 1, 0)[:, None]
    return np.where(see, 0.0, -np.inf).astype(np.float32)


@pytest.mark.parametrize("n_swa", [0, 5])
def test_masks_equal_the_numpy_construction(n_swa):
    """Mask's blocks, written step after step into one array (the last step's reset), against reference_mask in its
    top-left corner and -inf elsewhere: random batches of 4 sequences of 64 rows, each padded to a bucket."""
    rng = np.random.default_rng(SEED)
    n_batch, n_ctx_seq = 24, 64
    mask = Mask(np.empty((n_batch, 4 * n_ctx_seq), np.float32), mask_ramp(n_ctx_seq, n_swa), n_swa)
    for _ in range(40):
        seqs = rng.choice(4, int(rng.integers(1, 5)), replace=False)
        parts = []
        for seq in seqs:
            k = int(rng.integers(1, 7))
            parts.append((int(seq), int(rng.integers(0, n_ctx_seq - k + 1)), [0] * k))
        n = sum(len(p[2]) for p in parts)
        n_tokens = next(b for b in buckets(n_batch) if b >= n)
        n_kv = min(4 * n_ctx_seq, max(s * n_ctx_seq + p + len(t) for s, p, t in parts) + int(rng.integers(0, 9)))
        mask.write(parts, n_ctx_seq, n_tokens)
        want = np.full(mask.array.shape, -np.inf, np.float32)
        want[:n_tokens, :n_kv] = reference_mask(parts, n_tokens, n_kv, n_ctx_seq, n_swa)
        assert np.array_equal(mask.array, want), f"seed {SEED}: parts {parts}"


def test_varied_batches_replay_their_plans_once_met(gguf, monkeypatch):
    """Batches of every kind a server sends (prompt chunks, single tokens, both; sequences low and high in the cache),
    twice: the second round meets only keys the first met, and builds and plans nothing. Over StagedCPU (each plan's
    masks written in place in its staged arrays, as on CUDA, and kept while other keys run) and a CPUBackend (the
    model's own mask arrays, set each step): the same logits."""
    staged = BatchModel(gguf, StagedCPU(n_threads=2), n_ctx=1024, n_seq=4, n_batch=16)
    plain = BatchModel(gguf, "cpu", 2, n_ctx=1024, n_seq=4, n_batch=16)
    assert staged.kv_classes == [256, 512, 1024] and staged.runner.keep == len(staged.buckets) * 3  # every key kept
    rng = np.random.default_rng(SEED)
    read = [0, 0, 0, 0]

    def run(plan):
        parts = [(s, read[s], ids(rng, n)) for s, n in plan]
        for s, n in plan:
            read[s] += n
        assert np.array_equal(staged.decode(parts), plain.decode(parts)), f"seed {SEED}: {parts}"
    batches = [[(0, 5)], [(1, 9)], [(0, 1), (1, 1)], [(3, 16)], [(0, 1)], [(0, 1), (1, 1), (3, 1)], [(1, 1), (2, 7)]]
    for plan in batches:
        run(plan)
    built = staged.stats.graphs_built
    planned = []
    alloc_graph = staged.runner.allocator.alloc_graph
    monkeypatch.setattr(staged.runner.allocator, "alloc_graph", lambda g: planned.append(g) or alloc_graph(g))
    for plan in batches[::-1] + batches:
        run(plan)
    assert staged.stats.graphs_built == built and not planned and len(staged._steps) <= len(batches) + 1
    assert all(mask.source is not None for step in staged._steps.values() for _, mask in step.masks)


def test_sampling_head_is_the_top_k_of_the_logits(gguf):
    """decode_top's ids: each part's top_k logits (256 of 320) in Sampler's order (largest first, equal ones by lower
    id), its values those logits, its logits decode's."""
    bm = BatchModel(gguf, "cpu", 2, n_ctx=N_CTX, n_seq=N_SEQ, n_batch=40)
    assert bm.top_k == 256
    rng = np.random.default_rng(SEED)
    parts = [(0, 0, ids(rng, 7)), (2, 0, ids(rng, 12))]
    top, values, logits = bm.decode_top(parts, logits=True)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :256]
    assert np.array_equal(top, order) and np.array_equal(values, np.take_along_axis(logits, order, 1))
    assert np.array_equal(logits, bm.decode(parts))                 # the same positions read again
    assert bm.decode_top(parts)[2] is None


def test_buckets_and_bad_batches(gguf):
    assert buckets(16) == [1, 2, 3, 4, 6, 8, 12, 16] and buckets(100)[-3:] == [64, 96, 100] and buckets(1) == [1]
    assert kv_classes(16384) == [256, 512, 1024, 2048, 4096, 8192, 16384] and kv_classes(192) == [192]
    assert kv_classes(1000) == [256, 512, 1000]
    bm = BatchModel(gguf, "cpu", 1, n_ctx=64, n_seq=2, n_batch=8)
    for bad, what in [([], "1..8 tokens"), ([(0, 0, [1] * 9)], "1..8 tokens"), ([(0, 0, [1]), (0, 1, [2])], "distinct"),
                      ([(2, 0, [1])], "sequence 2"), ([(1, 30, [1, 2, 3])], "each holds 32"), ([(0, 0, [320])], "ids")]:
        with pytest.raises(ValueError, match=what):
            bm.decode(bad)
    with pytest.raises(ValueError, match="n_seq"):
        BatchModel(gguf, "cpu", 1, n_ctx=2, n_seq=3)
