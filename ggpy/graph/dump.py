"""Text and Graphviz views of a graph: op, shape (ne), type and bytes of every node and leaf."""
from __future__ import annotations


def _label(t) -> str:
    return t.name or f"{t.op or 'leaf'}_{id(t) & 0xffff:04x}"


def dump_graph(graph, groups=()) -> str:
    """One line per leaf and node; `groups` (runs of nodes one fused kernel computes) mark their nodes g<k>."""
    names = {id(t): _label(t) for t in graph.leafs + graph.nodes}
    group = {id(n): f"g{k}" for k, run in enumerate(groups) for n in run}
    lines = [f"graph: {len(graph.nodes)} nodes, {len(graph.leafs)} leafs, {len(groups)} fused groups",
             f"{'#':>5} {'op':<16} {'type':<4} {'ne':<28} {'bytes':>12} {'group':>5}  {'name':<24} src"]
    for kind, ts in (("leaf", graph.leafs), ("node", graph.nodes)):
        for i, t in enumerate(ts):
            op = t.op or ("input" if t.is_input else "leaf")
            flags = "".join(c for c, on in (("I", t.is_input), ("O", t.is_output), ("P", t.is_param)) if on)
            src = ", ".join(names.get(id(s), "?") for s in t.src if s is not None)
            lines.append(f"{kind[0]}{i:>4} {op:<16} {t.type.name:<4} {str(t.ne):<28} {t.nbytes:>12} "
                         f"{group.get(id(t), ''):>5}  "
                         f"{names[id(t)]:<24} {src}{'  [' + flags + ']' if flags else ''}")
    return "\n".join(lines)


def graph_to_dot(graph) -> str:
    lines = ["digraph ggpy {", "  rankdir=TB;", '  node [shape=record, fontname="monospace"];']
    ids = {}
    for i, t in enumerate(graph.leafs + graph.nodes):
        ids[id(t)] = f"t{i}"
        is_leaf = t.op is None
        color = "lightblue" if is_leaf else ("lightyellow" if t.is_output else "white")
        label = f"{_label(t)}|{t.op or 'leaf'}|{t.type.name} {list(t.ne)}|{t.nbytes} B"
        label = label.replace('"', r'\"')
        lines.append(f'  t{i} [label="{{{label}}}", style=filled, fillcolor={color}];')
    for t in graph.nodes:
        for k, s in enumerate(t.src):
            if s is not None and id(s) in ids:
                lines.append(f'  {ids[id(s)]} -> {ids[id(t)]} [label="src{k}"];')
    lines.append("}")
    return "\n".join(lines)
