"""Fusion: patterns of a graph that one kernel can compute at once, found without knowing any backend.

The pass finds the patterns and checks their structural legality (every intermediate has a single reader and
is not an output; the operands the fused kernel reads are ready at the head's turn; views in between keep the
memory order). Each backend decides which patterns it runs (find_fusions' arguments: which heads take an
epilogue, whether the activation rides along, residual adds, attention) and binds them; ggml splits
ggml_can_fuse (core) from ggml_cuda_can_fuse (backend) the same way. The graph and its memory plan are
untouched: the head node is bound to the fused kernel, which writes the pattern's last output, and the planner
gives the run one block (Backend.fused_groups).

Patterns:
- epilogue: a head (mul_mat, conv_2d_dw, conv_2d, or norm followed by mul(weight over ne[0]): LayerNorm's affine),
  then add(bias over ne[0]; over ne[2], an image's channels, after a conv_2d) and optionally an activation
  (ACTIVATIONS of the op table). Between a conv_2d_dw head and its add there may be views that keep the memory
  order (the permute back to a token layout, reshapes).
  With find_fusions(cast=True), a cast of a mul_mat or conv head's F32 result (after those views) may
  come before the add: the fused kernel then writes the cast's type (activations kept in F16 / BF16).
- residual: after a mul_mat's bias add (no activation), an add of a residual operand of the same shape
  (through same-order views): a GEMM's C matrix.
- attention: S = mul_mat(k, q) -> P = soft_max(S, mask) -> O = mul_mat(v^T, P) -> permute(O, 0, 2, 1, 3) ->
  cont (or, with cast=True, a cast to another float type): windowed attention in one kernel.
- chain (find_fusions(chain=...)): a maximal run of elementwise nodes (ELEMENTWISE), each the only reader of the
  one before, as its first source, all of one shape; the other operands ready at the first node's turn. A
  backend generates one kernel per chain (nodes not taken by the patterns above).
"""
from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Callable

from ..optable import ACTIVATIONS, UNARY_OPS, is_view
from .tensor import Tensor


@dataclass
class Epilogue:
    """`head`, then `add_node` (+ bias over ne[0]) and optionally `act_node` (an activation); for a norm head,
    `scale_node` (x weight over ne[0]) comes between the head and the add."""
    head: Tensor
    add_node: Tensor
    act_node: Tensor | None = None
    scale_node: Tensor | None = None
    views: tuple = ()          # same-order views between a conv_2d_dw head and its add
    cast_node: Tensor | None = None         # find_fusions(cast=True): the head's result cast before the add
    residual_node: Tensor | None = None     # mul_mat heads, find_fusions(residual=True): add(bias out, r)
    residual_views: tuple = ()              # same-order views between the bias add and the residual add

    @property
    def bias(self) -> Tensor:
        return self.add_node.src[1]

    @property
    def scale(self) -> Tensor | None:
        return None if self.scale_node is None else self.scale_node.src[1]

    @property
    def act(self) -> str | None:
        return None if self.act_node is None else self.act_node.op

    @property
    def residual(self) -> Tensor | None:
        """The residual operand r of residual_node (the same shape and layout as its result)."""
        if self.residual_node is None:
            return None
        a, b = self.residual_node.src[:2]
        return b if a is self.add_node or any(a is v for v in self.residual_views) else a

    @property
    def nodes(self) -> list:
        """The nodes whose memory the fused result goes through, in order (views left out)."""
        return [n for n in (self.head, self.cast_node, self.scale_node, self.add_node, self.residual_node,
                            self.act_node) if n is not None]

    @property
    def last(self) -> Tensor:
        """The node whose memory receives the fused result."""
        return self.nodes[-1]

    @property
    def skipped(self) -> list:
        """The nodes after the head that the fused kernel computes (views in between included)."""
        return list(self.views) + list(self.residual_views) + self.nodes[1:]

    def name(self, head_kernel: str) -> str:
        return (head_kernel + (f"+{self.cast_node.type.name}" if self.cast_node is not None else "")
                + ("+scale" if self.scale_node is not None else "") + "+bias"
                + ("+residual" if self.residual_node is not None else "") + (f"+{self.act}" if self.act else ""))


ELEMENTWISE = frozenset(UNARY_OPS) | {"add", "sub", "mul", "div", "scale", "clamp", "leaky_relu", "cast"}
"""Ops a chain may hold: one value per element of a's shape (binary ops broadcast b)."""


@dataclass
class Chain:
    """Elementwise nodes computed by one kernel at the first one's turn, written to the last one's memory."""
    nodes: list

    @property
    def head(self) -> Tensor:
        return self.nodes[0]

    @property
    def last(self) -> Tensor:
        return self.nodes[-1]

    @property
    def skipped(self) -> list:
        return self.nodes[1:]

    def name(self) -> str:
        return "fused:" + "+".join(n.op for n in self.nodes)


def _chain_after(head, users, ready, chain_ok) -> Chain | None:
    """The chain starting at `head`, or None when it would hold a single node."""
    nodes = [head]
    while True:
        user = only_user(nodes[-1], users)
        if (user is None or user.op not in ELEMENTWISE or user.src[0] is not nodes[-1] or user.ne != head.ne
                or not chain_ok(user) or any(s is not None and not ready(s) for s in user.src[1:])):
            break
        nodes.append(user)
    return Chain(nodes) if len(nodes) > 1 else None


def fusion_stamp(graph) -> tuple:
    """What find_fusions depends on besides the graph's nodes: which of them are outputs (never fused away)."""
    return tuple(id(n) for n in graph.nodes if n.is_output)


def consumers(graph) -> dict:
    """{id(tensor): [nodes reading it]} over the graph's nodes."""
    users = {}
    for node in graph.nodes:
        for s in node.src:
            if s is not None:
                users.setdefault(id(s), []).append(node)
    return users


def only_user(node, users):
    """The single node reading `node` (a view of it counts as a reader), with `users` from consumers(graph);
    None for outputs and for nodes read by several."""
    if node.is_output:
        return None
    readers = users.get(id(node), [])
    return readers[0] if len(readers) == 1 else None


def _same_order_view(view, head) -> bool:
    """A view that reads head's memory from its start in memory order (contiguous strides)."""
    return (view is head or (view.view_src is head and view.view_offs == 0 and view.is_contiguous()
                             and view.nelements == head.nelements))


def _is_row_vector(v, node) -> bool:
    """A contiguous vector ne = (node.ne[0],) of node's type broadcast over every row of node."""
    return v.type == node.type and v.ne == (node.ne[0], 1, 1, 1) and v.nb[0] == v.type.size


def _is_channel_vector(v, node) -> bool:
    """A contiguous vector ne = (1, 1, node.ne[2]) of node's type broadcast over an image's channels."""
    return v.type == node.type and v.ne == (1, 1, node.ne[2], 1) and v.is_contiguous()


def _add_after(head, users, keep_order: bool, op: str = "add", cast: bool = False):
    """(the `op` node reading head directly (or, with keep_order, through same-order views; with cast, through
    one cast of a whole F32 head), the views in between, the cast or None), or (None, (), None)."""
    node, views, cast_node = head, [], None
    while True:
        user = only_user(node, users)
        if user is None:
            return None, (), None
        if user.op == op:
            ok = user.src[0] is node and (node is head or keep_order or node is cast_node)
            return (user, tuple(views), cast_node) if ok else (None, (), None)
        if (cast and cast_node is None and user.op == "cast" and head.type.size == 4
                and user.nelements == head.nelements and (node is head or _same_order_view(node, head))):
            cast_node = node = user
            continue
        if not keep_order or not is_view(user) or cast_node is not None:
            return None, (), None
        views.append(user)
        node = user


def _residual_after(add, users):
    """(the add reading `add`'s result (directly or through same-order views) and a second operand of the same
    shape, both contiguous and of add's type, the views in between), or (None, ())."""
    node, views = add, []
    while True:
        user = only_user(node, users)
        if user is None:
            return None, ()
        if user.op == "add":
            a, b = user.src[:2]
            other = b if a is node else a if b is node else None
            ok = (other is not None and other is not node and other.type == user.type == add.type
                  and other.ne == user.ne and other.is_contiguous() and user.is_contiguous()
                  and user.nelements == add.nelements)
            return (user, tuple(views)) if ok else (None, ())
        if not is_view(user) or not _same_order_view(user, add):
            return None, ()
        views.append(user)
        node = user


@dataclass
class Attention:
    """S = mul_mat(k, q) -> P = soft_max(S, mask) -> O = mul_mat(v^T, P) -> `perm` = permute(O, 0, 2, 1, 3) ->
    `cont`: q ne = (HD, N, heads, nW), k ne = (HD, Nk, heads_k, nW_k) (heads_k | heads, nW_k | nW: broadcast as
    mul_mat's), v^T ne = (Nk, HD, heads_k, nW_k); the result (HD, heads, N, nW) in the cont's memory, computed at
    S's turn."""

    head: Tensor
    soft: Tensor
    out: Tensor
    perm: Tensor
    cont: Tensor

    @property
    def nodes(self) -> list:
        """The run the planner gives one block (views left out)."""
        return [self.head, self.soft, self.out, self.cont]

    @property
    def last(self) -> Tensor:
        return self.cont

    @property
    def skipped(self) -> list:
        return [self.soft, self.out, self.perm, self.cont]

    @property
    def q(self) -> Tensor:
        return self.head.src[1]

    @property
    def k(self) -> Tensor:
        return self.head.src[0]

    @property
    def v(self) -> Tensor:
        return self.out.src[0]

    @property
    def mask(self) -> Tensor | None:
        return self.soft.src[1] if len(self.soft.src) > 1 else None


def _attention_after(s, users, cast: bool) -> Attention | None:
    """The attention pattern headed by mul_mat `s`, or None: each node the only reader of the one before, with
    the shapes of q, k, v and the permute as Attention says, the cont contiguous."""
    k, q = s.src[:2]
    hd, n, heads, nw = q.ne
    p = only_user(s, users)
    if k.ne[0] != hd or p is None or p.op != "soft_max" or p.src[0] is not s:
        return None
    o = only_user(p, users)
    if o is None or o.op != "mul_mat" or o.src[1] is not p or o.src[0].ne != (k.ne[1], hd, *k.ne[2:]):
        return None
    perm = only_user(o, users)
    if (perm is None or perm.op != "permute" or perm.view_src is not o or perm.ne != (hd, heads, n, nw)
            or perm.nb != (o.nb[0], o.nb[2], o.nb[1], o.nb[3])):
        return None
    cont = only_user(perm, users)
    if (cont is None or cont.op not in ("cont", "cast")[:1 + cast] or cont.src[0] is not perm
            or not cont.is_contiguous() or cont.nelements != o.nelements or not o.is_contiguous()):
        return None
    return Attention(s, p, o, perm, cont)


def _epilogue_after(node, users, ready, act_ok: bool, residual: bool, cast: bool) -> Epilogue | None:
    scale = None
    if node.op == "norm":
        scale, _, _ = _add_after(node, users, keep_order=False, op="mul")
        if scale is None or not _is_row_vector(scale.src[1], node) or not ready(scale.src[1]):
            return None
    channels_first = node.op == "conv_2d_dw"
    add, views, cast_node = _add_after(scale or node, users, keep_order=channels_first, cast=cast)
    result = node if cast_node is None else cast_node
    if add is None or add.type != result.type or add.nelements != node.nelements:
        return None
    if channels_first and not ((add.src[0] is result or _same_order_view(add.src[0], node))
                               and add.ne[0] == node.ne[2]):
        return None
    if not channels_first and add.ne != node.ne:
        return None
    vector = _is_channel_vector if node.op == "conv_2d" else _is_row_vector
    if not vector(add.src[1], add) or not ready(add.src[1]):
        return None
    fused = Epilogue(node, add, scale_node=scale, views=views, cast_node=cast_node)
    act = only_user(add, users)
    if act is not None and act.op in ACTIVATIONS and act.src[0] is add and act.type == add.type:
        if act_ok:
            fused.act_node = act
    elif residual and node.op == "mul_mat" and add.is_contiguous():
        fused.residual_node, fused.residual_views = _residual_after(add, users)
        if fused.residual_node is not None and not ready(fused.residual):
            fused.residual_node, fused.residual_views = None, ()
    return fused


def find_fusions(graph, head_ok: Callable, *, act_ok: Callable = lambda head: True, residual: bool = False,
                 attention: bool = False, cast: bool = False, chain: Callable | None = None,
                 accepts: Callable = lambda fusion: True) -> dict:
    """{id(head): Epilogue or Attention} for the patterns of `graph` a backend runs. The backend decides:
    head_ok(node): its kernel for node (mul_mat, conv_2d_dw, conv_2d, norm) takes an epilogue; act_ok(head): the epilogue
    applies the activation after the bias (else the activation stays a node of its own); residual: it adds a
    residual after a mul_mat's bias (Epilogue.residual_node); attention: it runs the attention pattern; cast: its
    fused kernels write a cast's type (a cast between a product and its bias, or ending the attention pattern);
    chain(node): its generated kernels take this elementwise node (None: no chains);
    accepts(fusion): its fused kernel takes the pattern's types and layouts (else the nodes run one by one)."""
    users = consumers(graph)
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    fusions, taken = {}, set()
    for node in graph.nodes:
        def ready(v, at=position[id(node)]) -> bool:   # the fused kernel runs at the head's turn
            while is_view(v) and v.src and v.src[0] is not None:     # a view is ready with what it shows: its
                v = v.src[0]                # operand's (not its base's: a cpy / set_rows result writes a leaf's memory)
            return position.get(id(v), -1) < at
        if id(node) in taken:
            continue
        fused = None
        if node.op in ("mul_mat", "conv_2d_dw", "conv_2d", "norm") and head_ok(node):
            fused = _epilogue_after(node, users, ready, act_ok(node), residual, cast)
        if fused is None and attention and node.op == "mul_mat":
            fused = _attention_after(node, users, cast)
        if fused is None and chain is not None and node.op in ELEMENTWISE and chain(node):
            fused = _chain_after(node, users, ready, chain)
        if fused is not None and accepts(fused):
            fusions[id(node)] = fused
            taken.update(id(n) for n in fused.skipped)
    return fusions
