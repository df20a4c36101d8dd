"""Compiling the numba kernels of a CPU program together, before its first evaluation, with progress.

Binding a program (CPUBackend._program) runs inside `collecting()`: a kernel signature not compiled in this
process is noted and a stand-in that compiles on its first call is returned (`entry_point`, `deferred`).
`compile_all` then takes what numba's disk cache holds and compiles the rest, showing on stderr what is being
compiled and how many are left. numba compiles one function at a time per process, so with several kernels
and cores the work is shared by worker processes (`worker_main`): each compiles
its kernels into a disk cache of its own, and this process loads the results from there and saves them in
its own cache (one writer: numba's cache index is not safe for processes writing different signatures of one
function at once; a worker's NUMBA_CACHE_DIR is its own folder, which numba_cache leaves as set, and this process's
is the folder numba_cache keyed when the kernels were imported). Anything a worker did not deliver is compiled here. The program is then bound again, every
kernel compiled.
"""
from __future__ import annotations

import base64
import contextlib
import contextvars
import os
import pickle
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

MAX_WORKERS = 8
"""Most worker processes compiling at once (each holds its own numba and LLVM, ~200 MB)."""
MIN_SHIPPED = 4
"""Fewer kernels to compile than this are compiled here: a worker takes ~0.5 s to start, a kernel 0.1-3 s."""


class Requests:
    """The kernel signatures a program needs that were not compiled when it was bound, in order."""

    def __init__(self):
        self.items: dict = {}          # (dispatcher, signature) -> label of the first node needing it
        self.label = ""                # what is being bound (CPUBackend sets the node's op and kernel)

    def add(self, dispatcher, sig):
        self.items.setdefault((dispatcher, tuple(sig)), self.label)

    def __len__(self) -> int:
        return len(self.items)


_REQUESTS: contextvars.ContextVar = contextvars.ContextVar("ggpy_cpu_compile_requests", default=None)


@contextlib.contextmanager
def collecting():
    """Note the kernels bound inside the block instead of compiling them one at a time."""
    requests = Requests()
    token = _REQUESTS.set(requests)
    try:
        yield requests
    finally:
        _REQUESTS.reset(token)


def collecting_now() -> bool:
    return _REQUESTS.get() is not None


def note(dispatcher, sig):
    _REQUESTS.get().add(dispatcher, sig)


def deferred(make):
    """A stand-in for the callable `make()` returns (compiling kernels): made on the first call, outside any
    collection, then called."""
    made = []

    def call(*args):
        if not made:
            token = _REQUESTS.set(None)
            try:
                made.append(make())
            finally:
                _REQUESTS.reset(token)
        return made[0](*args)
    return call


def entry_point(dispatcher, sig):
    """The compiled entry point of `dispatcher` for `sig`; while collecting, a stand-in when it is not
    compiled yet."""
    sig = tuple(sig)
    cres = dispatcher.overloads.get(sig)
    if cres is not None:
        return cres.entry_point
    if collecting_now():
        note(dispatcher, sig)
        return deferred(lambda: dispatcher.compile(sig))
    return dispatcher.compile(sig)


# -- compiling what was collected ---------------------------------------------------------------------------
def _install(dispatcher, cres):
    """Make `cres` (loaded from a disk cache) the dispatcher's overload, as numba's Dispatcher.compile does."""
    from numba.core.compiler_lock import global_compiler_lock
    with global_compiler_lock:
        if not cres.objectmode:
            dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        dispatcher.add_overload(cres)


def _load(dispatcher, sig, cache) -> bool:
    """Install `sig` from `cache` (a numba FunctionCache) when it holds it."""
    try:
        cres = cache.load_overload(sig, dispatcher.targetctx)
        if cres is None:
            return False
        _install(dispatcher, cres)
        return True
    except Exception:  # noqa: BLE001 - an unreadable or foreign cache entry: compiled instead
        return False


def _cache_in(cache_dir: str, dispatcher):
    """A numba FunctionCache of `dispatcher`'s function in `cache_dir` (numba's NUMBA_CACHE_DIR layout)."""
    import numba
    from numba.core.caching import FunctionCache
    saved = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = cache_dir
    try:
        return FunctionCache(dispatcher.py_func)
    finally:
        numba.config.CACHE_DIR = saved


def _take(dispatcher, sig, cache_dir: str) -> bool:
    """Install `sig` as a worker compiled it into `cache_dir`, and save it in this process's cache (a library
    loaded from a cache cannot be serialised again, so its cache entry is copied as it is)."""
    try:
        theirs = _cache_in(cache_dir, dispatcher)
        ctx = dispatcher.targetctx
        ctx.refresh()
        key = theirs._index_key(sig, ctx.codegen())
        data = theirs._cache_file.load(key)
        if data is None:
            return False
        ours = dispatcher._cache
        if type(ours).__name__ == "FunctionCache" and ours._enabled:
            with contextlib.suppress(OSError):           # e.g. a read-only cache: the next run compiles again
                ours._impl.locator.ensure_cache_path()
                ours._cache_file.save(key, data)
        _install(dispatcher, theirs._impl.rebuild(ctx, data))
        return True
    except Exception:  # noqa: BLE001 - not delivered: compiled in this process instead
        return False


def _name(dispatcher) -> str:
    name = dispatcher.py_func.__name__
    return "parallel launch" if name == "run_workers" else name


def _shippable(dispatcher) -> bool:
    """Whether a worker process can find `dispatcher` (a module-level function) and cache what it compiles."""
    func = dispatcher.py_func
    return ("<locals>" not in func.__qualname__ and func.__module__ not in ("__main__", None)
            and type(getattr(dispatcher, "_cache", None)).__name__ == "FunctionCache")


def _progress_enabled() -> bool:
    return os.environ.get("GGPY_PROGRESS", "1") not in ("0", "", "off", "no")


class _Progress:
    """What is being compiled, on stderr: a tqdm bar (kernels done of the total, the ones in progress) on a
    terminal, else a line per kernel compiled. GGPY_PROGRESS=0 silences it."""

    def __init__(self, total: int, workers: int):
        self.total, self.count, self.busy, self.bar = total, 0, {}, None
        self.enabled = _progress_enabled()
        self.t0 = time.perf_counter()
        where = f" in {workers} processes" if workers > 1 else ""
        title = f"compiling {total} CPU kernels{where} (first run; cached on disk for later runs)"
        if not self.enabled:
            return
        if sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc="compiling CPU kernels", unit="kernel", file=sys.stderr,
                            dynamic_ncols=True, bar_format="{desc}: {n_fmt}/{total_fmt} |{bar:16}| {elapsed}<{remaining}{postfix}")
            self.bar.write(title, file=sys.stderr)
        else:
            print(title, file=sys.stderr, flush=True)

    def start(self, slot, text: str):
        self.busy[slot] = (text, time.perf_counter())
        self._show()

    def done(self, slot):
        text, t0 = self.busy.pop(slot, ("", self.t0))
        self.count += 1
        if self.bar is not None:
            self.bar.update(1)
            self._show()
        elif self.enabled:
            print(f"compiling CPU kernels: {self.count}/{self.total} {text} {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)

    def _show(self):
        if self.bar is not None:
            self.bar.set_postfix_str(", ".join(text for text, _ in self.busy.values()), refresh=True)

    def close(self):
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.close()
        elif self.enabled:
            print(f"compiled {self.count} CPU kernels in {time.perf_counter() - self.t0:.1f} s", file=sys.stderr,
                  flush=True)


def _workers_for(count: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    env = os.environ.get("GGPY_COMPILE_WORKERS", "")
    limit = int(env) if env.strip().isdigit() else MAX_WORKERS
    return max(1, min(cores, limit, count))


def _code_size(func, seen: set) -> int:
    """Bytecode size of `func` and of the numba functions it calls (inlined or compiled with it), found by
    name in its globals and in the modules it names: a rough measure of how long it takes to compile."""
    size = len(func.__code__.co_code)
    names = func.__code__.co_names
    for name in names:
        obj = func.__globals__.get(name)
        for cand in [getattr(obj, n, None) for n in names] if isinstance(obj, ModuleType) else [obj]:
            inner = getattr(cand, "py_func", None)
            if inner is not None and id(inner) not in seen:
                seen.add(id(inner))
                size += _code_size(inner, seen)
    return size


def compile_all(requests: Requests):
    """Make every requested signature an overload of its dispatcher: from the disk cache, from worker
    processes, or compiled here; the stand-ins bound meanwhile stay valid (they compile on first call)."""
    todo = []
    for (dispatcher, sig), label in requests.items.items():
        if sig in dispatcher.overloads or _load(dispatcher, sig, dispatcher._cache):
            continue
        todo.append((dispatcher, sig, label))
    if not todo:
        return
    # the biggest first, so that the last to finish is small
    todo.sort(key=lambda t: -_code_size(t[0].py_func, set()))
    ship = [t for t in todo if _shippable(t[0])]
    workers = _workers_for(len(ship)) if len(ship) >= MIN_SHIPPED else 1
    progress = _Progress(len(todo), workers)
    try:
        if workers > 1:
            with contextlib.suppress(OSError):         # no worker could be started: all is compiled here
                _compile_in_workers(ship, workers, progress)
        for i, (dispatcher, sig, label) in enumerate(todo):
            if sig not in dispatcher.overloads:
                progress.start(i, f"{_name(dispatcher)} ({label})")
                dispatcher.compile(sig)
                progress.done(i)
    finally:
        progress.close()


def _compile_in_workers(todo: list, workers: int, progress: _Progress):
    """Compile `todo` [(dispatcher, sig, label)] in worker processes, in order, each signature given to the
    next worker free; install each result as its worker reports it (and save it in this process's cache)."""
    root = tempfile.mkdtemp(prefix="ggpy-compile-")
    events: queue.Queue = queue.Queue()
    procs = []
    try:
        for w in range(workers):
            cache_dir = os.path.join(root, f"w{w}")
            proc = _start_worker(cache_dir)
            procs.append((proc, cache_dir))
            threading.Thread(target=_read_events, args=(w, proc, events), daemon=True).start()
        pending = list(range(len(todo)))
        for proc, _ in procs:
            _next_task(proc, todo, pending)
        alive = len(procs)
        while alive:
            w, kind, i = events.get()
            proc, cache_dir = procs[w]
            if kind == "start":
                dispatcher, sig, label = todo[i]
                progress.start(("w", w), f"{_name(dispatcher)} ({label})")
            elif kind in ("done", "fail"):
                dispatcher, sig, _ = todo[i]
                if kind == "done" and _take(dispatcher, sig, cache_dir):
                    progress.done(("w", w))
                _next_task(proc, todo, pending)
            elif kind == "exit":
                alive -= 1
                progress.busy.pop(("w", w), None)
    finally:
        for proc, _ in procs:
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _start_worker(cache_dir: str):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    root = str(Path(__file__).resolve().parents[3])      # the directory holding the ggpy package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-c", "from ggpy.backends.cpu.precompile import worker_main; worker_main()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)


def _next_task(proc, todo, pending: list):
    """Give a worker the next signature as one line (a base64 pickle of index, module, function name,
    signature), or close its input when none is left."""
    try:
        if not pending:
            proc.stdin.close()
            return
        i = pending.pop(0)
        func = todo[i][0].py_func
        proc.stdin.write(base64.b64encode(pickle.dumps((i, func.__module__, func.__qualname__, todo[i][1]))).decode()
                         + "\n")
        proc.stdin.flush()
    except OSError:              # the worker is gone: what it had is compiled here afterwards
        pass


def _read_events(w: int, proc, events: queue.Queue):
    """Forward a worker's report lines ('start i', 'done i', 'fail i') as (w, kind, i) events, then (w, 'exit')."""
    try:
        for line in proc.stdout:
            kind, _, value = line.strip().partition(" ")
            if kind in ("start", "done", "fail") and value.isdigit():
                events.put((w, kind, int(value)))
    finally:
        events.put((w, "exit", None))


def worker_main():
    """A worker process: compile each signature read from stdin into this process's numba cache
    (NUMBA_CACHE_DIR), reporting on stdout when it starts and ends."""
    import importlib
    for line in sys.stdin:
        i, module, qualname, sig = pickle.loads(base64.b64decode(line))
        print(f"start {i}", flush=True)
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            obj.compile(sig)
            print(f"done {i}", flush=True)
        except Exception:  # noqa: BLE001 - reported; the main process compiles it and shows the error
            print(f"fail {i}", flush=True)
