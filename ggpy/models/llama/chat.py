"""Chat prompts: a GGUF's tokenizer.chat_template rendered with jinja2 the way transformers renders it
(sandboxed, trim_blocks and lstrip_blocks, loop controls, `raise_exception`, `strftime_now` and a `tojson` that
keeps non-ASCII characters), in a sandbox bounded in time and size (sandbox.py): whatever goes wrong while it
renders is a ChatTemplateError."""
from __future__ import annotations

import json
from datetime import datetime


class ChatTemplateError(ValueError):
    """The template is missing, does not parse, raises while rendering, or passes the sandbox's time or size."""


def _raise(message):
    raise ChatTemplateError(f"the chat template says: {message}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render_chat(template: str | None, messages: list, bos_token: str = "", eos_token: str = "",
                add_generation_prompt: bool = True) -> str:
    """The prompt text for `messages` ([{"role": ..., "content": ...}, ...]) under `template`."""
    from .sandbox import BoundedSandbox, render

    if not template:
        raise ChatTemplateError("the model file has no chat template (tokenizer.chat_template)")
    env = BoundedSandbox(filters={"tojson": _tojson}, trim_blocks=True, lstrip_blocks=True,
                         extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    try:
        return render(env, template, messages=messages, bos_token=bos_token, eos_token=eos_token,
                      add_generation_prompt=add_generation_prompt)
    except ChatTemplateError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a template raises (MemoryError, RecursionError...) fails it
        raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from None
