"""GET /metrics: the engine's counters and gauges and the HTTP answers by status, in Prometheus' text format."""
from __future__ import annotations

import collections

ENGINE = (  # (stats key, metric name, type, help)
    ("requests", "requests_total", "counter", "requests admitted into a slot"),
    ("tokens_prompt", "prompt_tokens_total", "counter", "prompt tokens read (the prompt cache's tokens not counted)"),
    ("tokens_generated", "tokens_generated_total", "counter", "tokens generated"),
    ("tokens_per_s", "tokens_per_second", "gauge", "tokens generated per second over the last seconds"),
    ("slots_busy", "slots_busy", "gauge", "slots serving a request"),
    ("queue_length", "queue_length", "gauge", "requests waiting for a slot"),
    ("graphs_to_plan", "graphs_to_plan", "gauge", "generating steps' graphs left to plan while idle (warmup)"),
)


class Metrics:
    """HTTP answers counted by status code (`answered(code)`), rendered with the engine's stats by `text()`."""

    def __init__(self, prefix: str = "ggpy"):
        self.prefix, self.answers = prefix, collections.Counter()

    def answered(self, status: int):
        self.answers[status] += 1

    def text(self, stats: dict, n_slots: int) -> str:
        p, lines = self.prefix, []
        for key, name, kind, help in (*ENGINE, (None, "slots_total", "gauge", "parallel slots")):
            value = n_slots if key is None else stats[key]
            lines += [f"# HELP {p}_{name} {help}", f"# TYPE {p}_{name} {kind}", f"{p}_{name} {value:g}"]
        lines += [f"# HELP {p}_http_responses_total HTTP responses by status code",
                  f"# TYPE {p}_http_responses_total counter"]
        lines += [f'{p}_http_responses_total{{code="{c}"}} {n}' for c, n in sorted(self.answers.items())]
        return "\n".join(lines) + "\n"
