"""A jinja2 sandbox for a model file's chat template, bounded in time and size: `render(template, **context)`.

jinja2's ImmutableSandboxedEnvironment keeps a template from reaching Python's internals but not from running for
hours (nested loops) or allocating gigabytes ('x' * 6000000000). Here a render runs at most RENDER_SECONDS (a trace
of the template's own code, and of every Python call, checks the clock), and no string, list or output grows past
MAX_LENGTH items, no integer past MAX_BITS: `*`, `+`, `~`, `%`, `**`, calls, filters and format widths are checked
before they allocate where the size can be known, and their results after. Any limit reached raises TemplateLimitError.
"""
from __future__ import annotations

import functools
import re
import sys
import time

from jinja2.compiler import CodeGenerator
from markupsafe import Markup
from jinja2.sandbox import ImmutableSandboxedEnvironment

RENDER_SECONDS = 3.0        # a chat template renders in milliseconds
MAX_LENGTH = 1 << 22        # the most characters (or items) of a value or of the output
MAX_BITS = 1 << 16          # the most bits of an integer `*` or `**` makes
_WIDE = re.compile(r"\d{7,}")   # a format width (or precision) of a million or more


class TemplateLimitError(RuntimeError):
    """A template ran longer than RENDER_SECONDS or made a value longer than MAX_LENGTH (or MAX_BITS)."""


def _size(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0


def _bounded(value, what: str):
    if _size(value) > MAX_LENGTH:
        raise TemplateLimitError(f"{what} made a value of {_size(value)} items; the sandbox allows {MAX_LENGTH}")
    return value


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _bits(x) -> int:
    """An integer's bits (0 for anything else: floats overflow by themselves)."""
    return abs(x).bit_length() if isinstance(x, int) and not isinstance(x, bool) else 0


def _check_arguments(what: str, values):
    for v in values:
        if _number(v) and abs(v) > MAX_LENGTH:
            raise TemplateLimitError(f"{what} was given {v}; the sandbox passes numbers up to {MAX_LENGTH} in calls")


def _check_format(fmt: str, what: str):
    if _WIDE.search(fmt):
        raise TemplateLimitError(f"{what} has a width of a million or more ({_WIDE.search(fmt)[0]})")


def _check_join(separator: str, items, what: str):
    if isinstance(items, (list, tuple)):
        n = sum(len(x) if isinstance(x, str) else 1 for x in items) + len(separator) * len(items)
        if n > MAX_LENGTH:
            raise TemplateLimitError(f"{what} would make {n} characters; the sandbox allows {MAX_LENGTH}")


def _check_method(obj, args, what: str):
    """What a str method is about to make, where its arguments tell: join, replace, format."""
    obj = getattr(obj, "__wrapped__", obj)                   # the sandbox wraps str.format
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if not isinstance(owner, str):
        return
    if name in ("format", "format_map"):
        _check_format(owner, what)
    elif name == "join" and args:
        _check_join(owner, args[0], what)
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        n = len(owner) + (owner.count(args[0]) + (not args[0])) * len(args[1])
        if n > MAX_LENGTH:
            raise TemplateLimitError(f"{what} would make {n} characters; the sandbox allows {MAX_LENGTH}")


def _bounded_filter(name: str, f):
    skip = 1 if getattr(f, "jinja_pass_arg", None) is not None else 0     # context/environment comes first

    @functools.wraps(f)
    def call(*args, **kwargs):
        what = f"the filter {name}"
        _check_arguments(what, list(args[skip + 1:]) + list(kwargs.values()))
        if name == "join" and len(args) > skip:
            _check_join(args[skip + 1] if len(args) > skip + 1 else kwargs.get("d", ""), args[skip], what)
        if name == "format" and len(args) > skip and isinstance(args[skip], str):
            _check_format(args[skip], what)
        return _bounded(f(*args, **kwargs), what)
    return call


class _Generator(CodeGenerator):
    """Compiles `a ~ b` into the environment's bounded join (jinja2's own is a module function of its runtime),
    told whether to join as markup (in autoescaped code) as jinja2 tells it."""

    def visit_Concat(self, node, frame):
        markup = "context.eval_ctx.volatile" if frame.eval_ctx.volatile else str(bool(frame.eval_ctx.autoescape))
        self.write(f"environment.bounded_concat({markup}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox whose operators, calls and filters (jinja2's and `filters`, name -> function) make
    nothing longer than MAX_LENGTH."""

    code_generator_class = _Generator
    intercepted_binops = frozenset(["*", "+", "%", "**"])

    def __init__(self, filters: dict | None = None, **options):
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, f) for name, f in {**self.filters, **(filters or {})}.items()}

    @staticmethod
    def bounded_concat(markup: bool, parts) -> str:
        """jinja2's markup_join (`markup`: a Markup part escapes the others) or str_join, bounded."""
        parts = [p if markup and hasattr(p, "__html__") else str(p) for p in parts]
        _check_join("", [str(p) for p in parts], "'~'")
        if markup and any(hasattr(p, "__html__") for p in parts):
            return Markup("").join(parts)
        return "".join(parts)

    def call_binop(self, context, operator, left, right):
        what = f"{type(left).__name__} {operator} {type(right).__name__}"
        bits = _bits(left) + _bits(right) if operator == "*" else _bits(left) * right if _number(right) else 0
        if bits > MAX_BITS and operator in ("*", "**"):
            raise TemplateLimitError(f"{what} would make an integer of about {bits} bits; the sandbox allows "
                                     f"{MAX_BITS}")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) and isinstance(n, int) and _size(seq) * n > MAX_LENGTH:
                    raise TemplateLimitError(f"{what} would make {_size(seq) * n} items; the sandbox allows "
                                             f"{MAX_LENGTH}")
        elif operator == "+" and _size(left) + _size(right) > MAX_LENGTH:
            raise TemplateLimitError(f"{what} would make {_size(left) + _size(right)} items; the sandbox allows "
                                     f"{MAX_LENGTH}")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, f"the format string of {what}")
        return _bounded(super().call_binop(context, operator, left, right), what)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - named as jinja2 names them
        what = f"the call of {getattr(__obj, '__name__', type(__obj).__name__)}"
        _check_arguments(what, list(args) + list(kwargs.values()))
        _check_method(__obj, args, what)
        return _bounded(super().call(__context, __obj, *args, **kwargs), what)


def _deadline(seconds: float):
    """A trace function raising TemplateLimitError once `seconds` have passed: it sees every Python call, and every
    line the template's own code runs (so a loop with an empty body too)."""
    end = time.monotonic() + seconds
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        count += 1
        if not count & 255 and time.monotonic() > end:
            raise TemplateLimitError(f"rendering ran past {seconds:g} s")
        return trace if frame.f_code.co_filename == "<template>" else None
    return trace


def render(env: BoundedSandbox, template: str, **context) -> str:
    """`template` compiled in `env` and rendered with `context`, in at most RENDER_SECONDS and MAX_LENGTH characters
    (compiling runs nothing of the template's but constant expressions, themselves bounded in size)."""
    compiled = env.from_string(template)
    previous = sys.gettrace()
    sys.settrace(_deadline(RENDER_SECONDS))
    try:
        out, n = [], 0
        for chunk in compiled.generate(**context):
            n += len(chunk)
            if n > MAX_LENGTH:
                raise TemplateLimitError(f"the output passed {MAX_LENGTH} characters")
            out.append(chunk)
        return "".join(out)
    finally:
        sys.settrace(previous)
