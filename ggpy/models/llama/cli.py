"""Text generation from a llama-family GGUF: `ggpy-llama` (also `python -m examples.llama` from the repository root):

    ggpy-llama [-m MODEL.gguf] -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]
               [-t THREADS] [-b cpu|cuda] [-c N_CTX] [--batch-size N] [-fa [on|off|auto]] [-ctk TYPE] [-ctv TYPE]
               [--chat] [--logits FILE.npy]

The prompt is tokenized as llama.cpp tokenizes it for that file (with --chat: as the user message of the file's
chat template). Tokens are printed as they come; the last line is
`n_prompt=<int> n_gen=<int> prompt_tok_s=<float> gen_tok_s=<float> load_s=<float> first_token_s=<float>`:
gen_tok_s is the steady rate, after the first generated token's evaluation (its graph planned and, on CUDA,
captured: first_token_s); load_s is loading the weights and reserving the memory. --logits saves float32 logits
(n_prompt + n_gen - 1, n_vocab): row i is the output after reading tokens 0..i of prompt + generated text.
Without -m, SmolLM2-135M-Instruct (Q4_1) is fetched once into ~/.cache/ggpy. The logits come from ggpy's graph of the
model (ggpy/models/llama/model.py) on the backend -b with THREADS CPU workers; stderr ends with where the time went
(building and planning graphs, computing) and the memory taken (weights, KV cache, planned compute buffers).
A bad input ends the run with one `error: ...` line: exit status 2 for an argument (a prompt that is not UTF-8, a
context whose KV cache exceeds the memory), 1 for a file (corrupt, or computing non-finite logits) or a chat template
that fails; -c above the model's training context only warns.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


import ggpy

from ..outputs import output_problem, save_npy_atomic
from .chat import ChatTemplateError, render_chat
from .fetch import FetchError, default_model
from .generate import NonFiniteLogitsError, generate
from .gguf_file import open_llama
from .arch import ARCHITECTURES
from .model import CACHE_TYPES
from .runner import DEFAULT_BATCH, DEFAULT_CTX, GraphModel
from .sampling import Sampler
from .tokenizer import Tokenizer


MAX_THREADS = 1024      # more CPU workers than any machine runs, each with scratch memory of its own


def _at_least(minimum, kind=int, maximum=None):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"{text} is below {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text} is above {maximum}")
        return value
    return parse


def _npy_output(text):
    """--logits: a .npy file name this process can write (checked before the model is loaded)."""
    problem = output_problem(text, (".npy",))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _probability(text):
    p = _at_least(0.0, float)(text)
    if not 0 < p <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]")
    return p


def _utf8(text):
    """A command-line string that is UTF-8 text (argv bytes that are not arrive as surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        c = text[e.start]
        what = f"byte 0x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"character {c!a}"
        raise argparse.ArgumentTypeError(f"{what} at character {e.start} is not UTF-8; expected UTF-8 text") from None
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ggpy-llama", description=__doc__.split(":")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", help=f"GGUF file of a {', '.join(ARCHITECTURES)} model (default: "
                   "SmolLM2-135M-Instruct Q4_1, fetched once)")
    p.add_argument("-p", "--prompt", type=_utf8, required=True)
    p.add_argument("-n", "--n-predict", type=_at_least(0), default=64, metavar="N", help="tokens to generate (64)")
    p.add_argument("--temp", type=_at_least(0.0, float), default=0.8, help="temperature; 0 is greedy (0.8)")
    p.add_argument("--top-k", type=_at_least(0), default=40, metavar="K", help="keep the K likeliest; 0 all (40)")
    p.add_argument("--top-p", type=_probability, default=0.95, metavar="P", help="nucleus mass; 1 all (0.95)")
    p.add_argument("--seed", type=_at_least(0), default=None, metavar="S", help="sampling seed (default: random)")
    p.add_argument("-t", "--threads", type=_at_least(1, int, MAX_THREADS), default=os.cpu_count(), metavar="THREADS",
                   help=f"CPU workers, at most {MAX_THREADS} (the cores)")
    p.add_argument("-b", "--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("-c", "--ctx-size", type=_at_least(0), default=0, metavar="N_CTX",
                   help=f"context size in tokens; 0: the model's, at most {DEFAULT_CTX} (0)")
    p.add_argument("--batch-size", type=_at_least(1), default=DEFAULT_BATCH, metavar="N",
                   help=f"the most prompt tokens one evaluation reads ({DEFAULT_BATCH})")
    p.add_argument("-fa", "--flash-attn", nargs="?", const="on", default="auto", choices=("on", "off", "auto"),
                   help="attention as one flash_attn_ext per block: on (a bare -fa), off, or auto: where the backend "
                   "runs it (auto)")
    for flag, name in (("-ctk", "k"), ("-ctv", "v")):
        p.add_argument(flag, f"--cache-type-{name}", choices=tuple(CACHE_TYPES), default="f16",
                       help=f"KV cache type of the {name.upper()} rows (f16; q8_0 V needs flash attention)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the file's chat template as a user turn")
    p.add_argument("--logits", type=_npy_output, metavar="FILE.npy", help="save the logits of every position read")
    return p


def make_model(model, backend: str, n_threads: int, n_ctx: int = 0, n_batch: int = DEFAULT_BATCH,
               flash_attn="auto", cache_type_k: str = "f16", cache_type_v: str = "f16") -> GraphModel:
    """The object computing logits for `generate` (see generate.py for what it must provide): the ggpy graph of the
    model on `backend` ('cpu' or 'cuda') with `n_threads` CPU workers, a context of `n_ctx` tokens (0: the model's,
    at most DEFAULT_CTX), prompts read `n_batch` tokens at a time, attention by flash_attn_ext ("on", "off", "auto")
    and the KV cache's types."""
    return GraphModel(model, backend, n_threads, context_size(model.hparams, n_ctx), n_batch, flash_attn,
                      cache_type_k, cache_type_v)


class ArgumentError(ValueError):
    """Arguments that cannot work with this model (exit status 2, as argparse's own errors)."""


def _memory_bytes() -> int:
    """This machine's physical memory (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_context(hp, n_ctx: int, n_batch: int, flash_attn="auto", cache_type_k: str = "f16",
                  cache_type_v: str = "f16"):
    """ArgumentError when the KV cache of `n_ctx` positions (keys and values of every block, of the cache types) and,
    unless flash attention is on (auto may turn out off), a prompt chunk's F32 attention scores and mask over them
    would not fit this machine's memory: refused before anything is allocated."""
    k, v = CACHE_TYPES[cache_type_k], CACHE_TYPES[cache_type_v]
    need = n_ctx * hp.n_layer * hp.n_head_kv * (k.row_bytes(hp.head_dim) + v.row_bytes(hp.head_dim_v))
    if flash_attn != "on":
        need += 4 * n_ctx * min(n_batch, n_ctx) * (hp.n_head + 1)
    memory = _memory_bytes()
    if memory and need > memory:
        raise ArgumentError(f"argument -c/--ctx-size: a context of {n_ctx} tokens needs {need / 2**30:.1f} GiB for "
                            f"its KV cache and attention, more than this machine's {memory / 2**30:.1f} GiB of memory")


def context_size(hp, n_ctx: int = 0) -> int:
    """The context in tokens: `n_ctx`, or (0) the model's training context, at most DEFAULT_CTX."""
    return n_ctx or min(hp.n_ctx_train, DEFAULT_CTX)


def prompt_tokens(tokenizer: Tokenizer, prompt: str, chat: bool) -> list:
    """The prompt as token ids; with `chat`, the chat template's rendering of one user message."""
    if not chat:
        return tokenizer.encode(prompt)
    bos = tokenizer.tokens[tokenizer.bos_id] if tokenizer.bos_id is not None else ""
    eos = tokenizer.tokens[tokenizer.eos_id] if tokenizer.eos_id is not None else ""
    text = render_chat(tokenizer.chat_template, [{"role": "user", "content": prompt}], bos, eos)
    add_bos = not (bos and text.startswith(bos))        # a template that writes BOS itself gets no second one
    return tokenizer.encode(text, add_special=add_bos)


def run(args):
    path = args.model or default_model()
    model = open_llama(path)
    tokenizer = Tokenizer(model.metadata, model.path, model.hparams.n_vocab)
    try:
        tokens = prompt_tokens(tokenizer, args.prompt, args.chat)
    except ChatTemplateError as e:
        raise ChatTemplateError(f"{e} (tokenizer.chat_template of {model.path})") from None
    if not tokens:
        raise ValueError("the prompt is empty once tokenized (and the model adds no BOS)")
    hp = model.hparams
    print(f"{model.path}: {hp.arch}, {hp.n_layer} blocks, width {hp.n_embd}, {hp.n_head} query / {hp.n_head_kv} KV "
          f"heads, vocabulary {hp.n_vocab}; {len(tokens)} prompt tokens", file=sys.stderr)
    if args.ctx_size > hp.n_ctx_train:
        print(f"warning: -c {args.ctx_size} is above the {hp.n_ctx_train} tokens the model was trained on "
              f"({hp.arch}.context_length); text past them may degrade", file=sys.stderr)
    n_ctx = context_size(hp, args.ctx_size)
    check_context(hp, n_ctx, args.batch_size, args.flash_attn, args.cache_type_k, args.cache_type_v)
    if len(tokens) + max(args.n_predict - 1, 0) > n_ctx:      # refused before weights, KV cache and graphs are made
        raise ValueError(f"{len(tokens)} prompt tokens + {args.n_predict} to generate exceed the context of "
                         f"{n_ctx} tokens")
    t0 = time.perf_counter()
    lm = make_model(model, args.backend, args.threads, n_ctx, args.batch_size, args.flash_attn, args.cache_type_k,
                    args.cache_type_v)
    load_s = time.perf_counter() - t0
    stream = tokenizer.stream()
    if not args.chat:
        print(args.prompt, end="", flush=True)

    def show(token):
        print(stream.push(token), end="", flush=True)

    sampler = Sampler(args.temp, args.top_k, args.top_p, args.seed)
    try:
        out = generate(lm, tokens, args.n_predict, sampler, tokenizer.eog_ids, show, keep_logits=bool(args.logits))
    except NonFiniteLogitsError as e:
        print(flush=True)                   # ends the echoed text's line: the error gets a line of its own
        raise ggpy.ModelFileError(f"{model.path}: {e}: its weights are corrupt or overflow on -b {args.backend}") \
            from None
    print(stream.flush())
    if args.logits:
        save_npy_atomic(args.logits, out.logits)
        print(f"logits {out.logits.shape} float32 -> {args.logits}", file=sys.stderr)
    print(lm.stats.line(len(tokens) + max(len(out.tokens) - 1, 0)), file=sys.stderr)
    print("memory: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in lm.nbytes.items()), file=sys.stderr)
    prompt_rate, gen_rate = out.rates(len(tokens))
    print(f"n_prompt={len(tokens)} n_gen={len(out.tokens)} prompt_tok_s={prompt_rate:.2f} gen_tok_s={gen_rate:.2f} "
          f"load_s={load_s:.3f} first_token_s={out.first_token_s:.4f}")


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.flash_attn == "off" and CACHE_TYPES[args.cache_type_v].quantized:
        p.error(f"-ctv {args.cache_type_v} needs flash attention: drop -fa off (or use -ctv f16)")
    try:
        run(args)
    except ArgumentError as e:
        p.error(str(e))
    except (ggpy.GGPYError, FetchError, ChatTemplateError, OSError, ValueError) as e:
        sys.exit(f"error: {e}")

