"""Fusion: patterns of a graph that one kernel can compute at once, found without knowing any backend.

The pass finds the patterns and checks their structural legality (every intermediate has a single reader and
is not an output; the operands the fused kernel reads are ready at the head's turn; views in between keep the
memory order). Which patterns a node anchors is the op table's (Op.fuses); whether a backend runs one is a lookup
in its kernel table (find_fusions' `fused`: the anchor's entry's Fused for the pattern, ggpy/backends/kernel.py),
which also says which variant it takes (activation, cast, residual, scale) and accepts the types and layouts found; ggml splits
ggml_can_fuse (core) from ggml_cuda_can_fuse (backend) the same way. The graph and its memory plan are untouched:
the head node is bound to the fused kernel, which writes the pattern's last output, and the planner gives the run
one block (Backend.fused_groups: each pattern's `nodes`).

Patterns (a new one: a finder in PATTERNS, its name in Op.fuses of the op that anchors it). The anchor is the
pattern's first node (its head, computed at whose turn the fused kernel runs) but for add_rms_norm (its norm):
- epilogue: a head (mul_mat, conv_2d_dw, conv_2d: the ops whose Op.bias says how the bias broadcasts), then
  add(bias) and optionally an activation (ACTIVATIONS of the op table). Between a "token" head (conv_2d_dw) and its
  add there may be views that keep the memory order (the permute back to a token layout, reshapes). With Fused.cast,
  a cast of the head's F32 result (after those views) may come before the add: the fused kernel then writes the
  cast's type (activations kept in F16 / BF16).
- norm_affine: norm, then mul(weight over ne[0]) and the epilogue's add(bias) [-> activation]: LayerNorm's affine.
- residual (an epilogue with Fused.residual): after the bias add (no activation), an add of a residual operand of
  the same shape (through same-order views): a GEMM's C matrix.
- attention: S = mul_mat(k, q) -> P = soft_max(S, mask) -> O = mul_mat(v^T, P) -> permute(O, 0, 2, 1, 3) ->
  cont (or, with Fused.cast, a cast to another float type): windowed attention in one kernel.
- chain: a maximal run of elementwise nodes (Op.fuses has "chain"), each the only reader of the one before, as its
  first source, all of one shape and each run by the backend (its entry declares "chain"); the other operands ready
  at the first node's turn. A backend generates one kernel per chain (nodes not taken by the patterns above).
- add_rms_norm: add(a, b) of one shape, then rms_norm of the sum as the next node but views (with Fused.scale, then
  the mul by a weight over ne[0] as the next node but views): one row kernel of the norm's entry writes the sum
  (other nodes may read it: the residual stream) and the normalised (scaled) rows at the add's turn, each in its own
  block.
- rms_norm_mul: rms_norm, then mul(weight over ne[0]): RMSNorm with its weight, one row kernel.
- glu: gate = mul_mat(Wg, x) and up = mul_mat(Wu, x) of one x, an activation of gate and mul(act, up): both products
  and the gated unit at the first product's turn (a decoder's feed-forward).
- mul_mat_add: mul_mat, then (through same-order views) an add of a residual of the product's shape (for one token
  a bias has that shape too: qwen2's q/k/v biases).
- rope_set_rows: rope, then (through same-order views) set_rows of its rows into a destination (a KV cache): the
  rotated rows written straight into the destination's rows at the rope's turn.
- norm_mat_vec: rms_norm -> mul(weight) = h read only as src1 of mul_mats (llama's q, k, v; the output head), or of a
  glu's gate / up pair: every product (or the gated unit) at the norm's turn, h not materialised; the results (and h,
  the kernel's scratch) are planned at the norm's turn (`early`).
- rope_kv: a q rope, the k rope of the same positions and parameters that a rope_set_rows writes into a cache, and the
  set_rows of v at the same indices into another: all three at the q rope's turn (k and v ready then, e.g. written
  early by norm_mat_vec), each cache read by its set_rows alone.
- norm_rope_kv: a norm_mat_vec of q, k, v whose products only a rope_kv reads (q's and k's by its ropes, v's by its
  v set_rows, through same-order views), its positions, factors and indices ready at the norm's turn: all at the
  norm's turn, the products not materialised (a generated token's attention input in one kernel).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..optable import ACTIVATIONS, OPS, is_view
from .tensor import Tensor


class _Pattern:
    """A pattern's defaults: computed at the head's turn (its anchor), every computed node in the planner's one block,
    the last one's memory receiving the result, the nodes after the head (and the views between them) skipped; no
    node written before its own turn (`early`), no earlier fused kernel it depends on (`needs`)."""
    views: tuple = ()
    early: tuple = ()
    needs: tuple = ()
    anchor = property(lambda self: self.head)
    computed = property(lambda self: self.nodes)
    last = property(lambda self: self.computed[-1])
    skipped = property(lambda self: list(self.views) + self.computed[1:])


@dataclass
class Epilogue(_Pattern):
    """`head`, then `add_node` (+ bias) and optionally `act_node` (an activation); for a norm head (the norm_affine
    pattern), `scale_node` (x weight over ne[0]) comes between the head and the add."""
    head: Tensor
    add_node: Tensor
    act_node: Tensor | None = None
    scale_node: Tensor | None = None
    views: tuple = ()          # same-order views between a "token" head and its add
    cast_node: Tensor | None = None         # Fused.cast: the head's result cast before the add
    residual_node: Tensor | None = None     # Fused.residual: add(bias out, r)
    residual_views: tuple = ()              # same-order views between the bias add and the residual add

    @property
    def pattern(self) -> str:
        return "epilogue" if self.scale_node is None else "norm_affine"

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
        """The run the planner gives one block, in order (views and the residual add left out: that one takes its
        residual's block by the planner's own in-place rule when it may)."""
        return [n for n in (self.head, self.cast_node, self.scale_node, self.add_node, self.act_node) if n is not None]

    @property
    def computed(self) -> list:
        return self.nodes + ([self.residual_node] if self.residual_node is not None else [])

    @property
    def last(self) -> Tensor:
        """The node whose memory receives the fused result (the residual add's, when there is one)."""
        return self.computed[-1]

    @property
    def skipped(self) -> list:
        """The nodes after the head that the fused kernel computes (views in between included)."""
        return list(self.views) + list(self.residual_views) + self.computed[1:]

    def name(self, head_kernel: str) -> str:
        return (head_kernel + (f"+{self.cast_node.type.name}" if self.cast_node is not None else "")
                + ("+scale" if self.scale_node is not None else "") + "+bias"
                + ("+residual" if self.residual_node is not None else "") + (f"+{self.act}" if self.act else ""))


@dataclass
class Chain(_Pattern):
    """Elementwise nodes computed by one kernel at the first one's turn, written to the last one's memory."""
    nodes: list
    pattern = "chain"

    @property
    def head(self) -> Tensor:
        return self.nodes[0]

    def name(self, head_kernel: str = "") -> str:
        return "fused:" + "+".join(n.op for n in self.nodes)


@dataclass
class AddRmsNorm(_Pattern):
    """add(a, b) -> rms_norm of the sum (`norm`) [-> `mul` by a weight over ne[0] (with Fused.scale)], computed at
    the add's turn by one row kernel writing both: the sum in the add's memory (still read by others: the residual
    stream) and the normalised (scaled) rows in the last node's."""
    head: Tensor
    norm: Tensor
    mul: Tensor | None = None
    pattern = "add_rms_norm"

    @property
    def anchor(self) -> Tensor:
        return self.norm

    @property
    def weight(self) -> Tensor | None:
        return None if self.mul is None else self.mul.src[1]

    @property
    def nodes(self) -> list:
        """The run the planner gives one block: the add alone (the norm and the mul keep blocks of their own)."""
        return [self.head]

    @property
    def computed(self) -> list:
        return [self.head, self.norm] + ([self.mul] if self.mul is not None else [])

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+rms_norm" + ("+mul" if self.mul is not None else "")


@dataclass
class RmsNormMul(_Pattern):
    """rms_norm(x) -> mul(norm, w) (w over ne[0]): one row kernel at the norm's turn writing the mul's memory (the
    planner gives it the norm's block, which may be x's: rows are read before they are written)."""
    head: Tensor
    mul: Tensor
    pattern = "rms_norm_mul"

    @property
    def norm(self) -> Tensor:
        return self.head

    @property
    def weight(self) -> Tensor:
        return self.mul.src[1]

    @property
    def nodes(self) -> list:
        return [self.head, self.mul]

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+mul"


@dataclass
class Glu(_Pattern):
    """gate = mul_mat(Wg, x), up = mul_mat(Wu, x) (one x), mul(act(gate), up): both products and the gated unit at
    the turn of `head` (the first product in graph order), written to the mul's memory."""
    head: Tensor
    gate: Tensor
    up: Tensor
    act_node: Tensor
    mul: Tensor
    pattern = "glu"

    @property
    def x(self) -> Tensor:
        return self.gate.src[1]

    @property
    def w_gate(self) -> Tensor:
        return self.gate.src[0]

    @property
    def w_up(self) -> Tensor:
        return self.up.src[0]

    @property
    def act(self) -> str:
        return self.act_node.op

    @property
    def nodes(self) -> list:
        """The four nodes in graph order: the planner gives them one block at the head's turn."""
        return [self.head] + [n for n in (self.gate, self.act_node, self.up) if n is not self.head] + [self.mul]

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+glu_{self.act}"


@dataclass
class MatMulAdd(_Pattern):
    """mul_mat -> add of a residual r of the result's shape (either operand order, through same-order views), at
    the product's turn, written to the add's memory (the planner gives the add the product's block)."""
    head: Tensor
    add: Tensor
    views: tuple = ()
    pattern = "mul_mat_add"

    @property
    def residual(self) -> Tensor:
        a, b = self.add.src[:2]
        return b if a is self.head or any(a is v for v in self.views) else a

    @property
    def nodes(self) -> list:
        return [self.head, self.add]

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+add"


@dataclass
class RopeSetRows(_Pattern):
    """rope(a) ne = (hd, heads, n, 1) -> same-order views ne = (hd * heads, n) -> set_rows(dst, rows, idx): the
    rotated rows written straight into dst's rows idx (a KV cache) at the rope's turn; the rope's own memory is not
    written. set_rows' sources are [rows, idx, dst]."""
    head: Tensor
    set_rows: Tensor
    views: tuple = ()
    pattern = "rope_set_rows"

    @property
    def rows(self) -> Tensor:
        return self.set_rows.src[0]

    @property
    def idx(self) -> Tensor:
        return self.set_rows.src[1]

    @property
    def dst(self) -> Tensor:
        return self.set_rows.src[2]

    @property
    def nodes(self) -> list:
        return [self.head]

    @property
    def computed(self) -> list:
        return [self.head, self.set_rows]

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+set_rows"


@dataclass
class Attention(_Pattern):
    """S = mul_mat(k, q) -> P = soft_max(S, mask) -> O = mul_mat(v^T, P) -> `perm` = permute(O, 0, 2, 1, 3) ->
    `cont`: q ne = (HD, N, heads, nW), k ne = (HD, Nk, heads_k, nW_k) (heads_k | heads, nW_k | nW: broadcast as
    mul_mat's), v^T ne = (Nk, HD, heads_k, nW_k); the result (HD, heads, N, nW) in the cont's memory, computed at
    S's turn."""

    head: Tensor
    soft: Tensor
    out: Tensor
    perm: Tensor
    cont: Tensor
    pattern = "attention"

    @property
    def nodes(self) -> list:
        """The run the planner gives one block (views left out)."""
        return [self.head, self.soft, self.out, self.cont]

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


class _Scan:
    """What the pattern finders read: the graph's readers of each tensor and its nodes' positions, and the
    backend's answer `fused(node, pattern)`."""

    def __init__(self, graph, fused: Callable):
        self.nodes, self.fused = graph.nodes, fused
        self.users = consumers(graph)
        self.position = {id(n): i for i, n in enumerate(graph.nodes)}
        self.fusions, self.taken = {}, set()     # {id(head): fusion} found so far, the nodes they compute after it
        self.early = {}         # {id(node): the head of the fusion whose kernel writes it at its turn (its `early`)}

    def ready(self, v, head) -> bool:
        """Whether v is computed before `head` runs (a fused kernel runs at its head's turn). A view is ready with
        what it shows: its operand's (not its base's: a cpy / set_rows result writes a leaf's memory); a node a fused
        kernel writes at an earlier head's turn (the fusion's `early`) is ready from then on."""
        v = operand(v)
        return self.position.get(id(self.early.get(id(v), v)), -1) < self.position[id(head)]


def operand(v):
    """What a view shows: its operand's value (through views), else v."""
    while is_view(v) and v.src and v.src[0] is not None:
        v = v.src[0]
    return v


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


def _epilogue(node, spec, scan: _Scan, scale=None) -> Epilogue | None:
    """The epilogue after `node` (or after its `scale` mul: norm_affine), its bias broadcast as Op.bias says."""
    users, bias = scan.users, OPS[node.op].bias
    token = bias == "token"
    add, views, cast_node = _add_after(scale or node, users, keep_order=token, cast=spec.cast)
    result = node if cast_node is None else cast_node
    if add is None or add.type != result.type or add.nelements != node.nelements:
        return None
    if token and not ((add.src[0] is result or _same_order_view(add.src[0], node)) and add.ne[0] == node.ne[2]):
        return None
    if not token and add.ne != node.ne:
        return None
    vector = _is_channel_vector if bias == "channel" else _is_row_vector
    if not vector(add.src[1], add) or not scan.ready(add.src[1], node):
        return None
    fused = Epilogue(node, add, scale_node=scale, views=views, cast_node=cast_node)
    act = only_user(add, users)
    if act is not None and act.op in ACTIVATIONS and act.src[0] is add and act.type == add.type:
        if spec.act:
            fused.act_node = act
    elif spec.residual and add.is_contiguous():
        fused.residual_node, fused.residual_views = _residual_after(add, users)
        if fused.residual_node is not None and not scan.ready(fused.residual, node):
            fused.residual_node, fused.residual_views = None, ()
    return fused


def _norm_affine(node, spec, scan: _Scan) -> Epilogue | None:
    scale, _, _ = _add_after(node, scan.users, keep_order=False, op="mul")
    if scale is None or not _is_row_vector(scale.src[1], node) or not scan.ready(scale.src[1], node):
        return None
    return _epilogue(node, spec, scan, scale)


def _attention(s, spec, scan: _Scan) -> Attention | None:
    """The attention pattern headed by mul_mat `s`, or None: each node the only reader of the one before, with
    the shapes of q, k, v and the permute as Attention says, the cont contiguous."""
    users = scan.users
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
    if (cont is None or not (cont.op == "cont" or (spec.cast and cont.op == "cast")) or cont.src[0] is not perm
            or not cont.is_contiguous() or cont.nelements != o.nelements or not o.is_contiguous()):
        return None
    return Attention(s, p, o, perm, cont)


def _chain(head, spec, scan: _Scan) -> Chain | None:
    """The chain starting at `head`, or None when it would hold a single node."""
    nodes = [head]
    while True:
        user = only_user(nodes[-1], scan.users)
        if (user is None or "chain" not in OPS[user.op].fuses or user.src[0] is not nodes[-1] or user.ne != head.ne
                or scan.fused(user, "chain") is None or any(s is not None and not scan.ready(s, head)
                                                            for s in user.src[1:])):
            break
        nodes.append(user)
    return Chain(nodes) if len(nodes) > 1 else None


def _next_node(node, scan: _Scan):
    """The first node after `node` in graph order that is not a view, or None."""
    for n in scan.nodes[scan.position[id(node)] + 1:]:
        if not is_view(n):
            return n
    return None


def _scale_after(norm, head, scan: _Scan):
    """The mul(norm, w) reading the norm (its only reader) as the next node but views, w a row vector of the norm's
    type ready at head's turn; or None."""
    mul, _, _ = _add_after(norm, scan.users, keep_order=False, op="mul")
    if (mul is None or mul.ne != norm.ne or mul.type != norm.type or not _is_row_vector(mul.src[1], norm)
            or not scan.ready(mul.src[1], head) or _next_node(norm, scan) is not mul):
        return None
    return mul


def _add_rms_norm(norm, spec, scan: _Scan) -> AddRmsNorm | None:
    """rms_norm of add(a, b) (a, b and the sum of one shape, the add in no other pattern), the next node after the
    add but views; with Fused.scale, the mul by the norm's weight after it when there is one."""
    add = norm.src[0]
    if add.op != "add" or any(s.ne != add.ne for s in add.src[:2]) or id(add) in scan.taken or id(add) in scan.fusions:
        return None
    if _next_node(add, scan) is not norm:
        return None
    return AddRmsNorm(add, norm, _scale_after(norm, add, scan) if spec.scale else None)


def _rms_norm_mul(norm, spec, scan: _Scan) -> RmsNormMul | None:
    mul = _scale_after(norm, norm, scan)
    return RmsNormMul(norm, mul) if mul is not None else None


def _other(node, src):
    """The other of a binary node's first two sources when `src` is exactly one of them, else None."""
    a, b = node.src[:2]
    return b if a is src and b is not src else a if b is src and a is not src else None


def _glu(m, spec, scan: _Scan) -> Glu | None:
    """gate and up products of one x (m either, the other later in graph order, its weight ready at m's turn), an
    activation of gate and mul(act, up) in either order, all of one shape, each the only reader of what it reads;
    the gate's activation before the up product when the gate comes first (Glu.nodes is the graph order)."""
    users = scan.users
    user = only_user(m, users)
    if user is None:
        return None
    if user.op == "mul":
        up, mul = m, user
        act = _other(mul, up)
        gate = act.src[0] if act is not None and act.op in ACTIVATIONS else None
    elif user.op in ACTIVATIONS:
        gate, act = m, user
        mul = only_user(act, users)
        up = _other(mul, act) if mul is not None and mul.op == "mul" else None
    else:
        return None
    if gate is None or up is None or gate.op != "mul_mat" or up.op != "mul_mat" or gate.src[1] is not up.src[1]:
        return None
    other = up if gate is m else gate
    if (act.src[0] is not gate or only_user(gate, users) is not act or only_user(act, users) is not mul
            or only_user(up, users) is not mul or not gate.ne == up.ne == act.ne == mul.ne
            or not gate.type == up.type == act.type == mul.type
            or not scan.ready(other.src[0], m)):
        return None
    found = Glu(m, gate, up, act, mul)
    order = [scan.position[id(n)] for n in found.nodes]      # the planner's run: in graph order, the head first
    return found if order == sorted(order) else None


def _mul_mat_add(m, spec, scan: _Scan) -> MatMulAdd | None:
    """mul_mat -> (same-order views ->) add of a residual of the same shape and type computed before the product."""
    add, views = _residual_after(m, scan.users)
    if add is None or not m.is_contiguous():
        return None
    found = MatMulAdd(m, add, views)
    return found if scan.ready(found.residual, m) else None


def _rope_set_rows(rope, spec, scan: _Scan) -> RopeSetRows | None:
    """rope ne = (hd, heads, n, 1) -> same-order views -> set_rows of those rows (ne = (hd * heads, n)) at indices
    ne = (n,) ready at the rope's turn, the next node after the rope but views."""
    node, views = rope, []
    while True:
        user = only_user(node, scan.users)
        if user is None:
            return None
        if user.op == "set_rows":
            break
        if not is_view(user) or not _same_order_view(user, rope):
            return None
        views.append(user)
        node = user
    hd, heads, n, n3 = rope.ne
    rows, idx, dst = user.src[:3]
    if (rows is not node or n3 != 1 or rows.ne != (hd * heads, n, 1, 1) or idx.ne != (n, 1, 1, 1)
            or not rope.is_contiguous() or not scan.ready(idx, rope) or not scan.ready(dst, rope)
            or _next_node(rope, scan) is not user):
        return None
    return RopeSetRows(rope, user, tuple(views))


@dataclass
class NormMatVec(_Pattern):
    """rms_norm(x) -> mul(w) = h read only by `products` (mul_mats of h as src1, graph order), which may be a `glu`'s
    gate and up: computed at the norm's turn, writing each product's memory (or the glu's mul)."""
    head: Tensor
    mul: Tensor
    products: tuple
    glu: Glu | None = None
    pattern = "norm_mat_vec"
    weight = property(lambda self: self.mul.src[1])
    nodes = property(lambda self: [self.head])
    computed = property(lambda self: [self.head, self.mul, *(self.glu.nodes if self.glu else self.products)])
    outputs = property(lambda self: [self.glu.mul] if self.glu else list(self.products))
    early = property(lambda self: [self.mul] + self.outputs)    # planned at the head's turn (h: the kernel's scratch)

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+mul+" + (f"glu_{self.glu.act}" if self.glu else f"mat_vec{len(self.products)}")


def _norm_mat_vec(norm, spec, scan: _Scan) -> NormMatVec | None:
    """rms_norm -> mul(w) (as rms_norm_mul) whose result is read only as src1 of mul_mats with weights ready at the norm's
    turn; the glu of two of them when they form one."""
    mul = _scale_after(norm, norm, scan)
    readers = scan.users.get(id(mul), []) if mul is not None and not mul.is_output else []
    if not readers or any(r.op != "mul_mat" or r.src[1] is not mul or r.src[0] is mul or id(r) in scan.taken
                          or not scan.ready(r.src[0], norm) for r in readers):
        return None
    glu = _glu(readers[0], spec, scan) if len(readers) == 2 else None
    return NormMatVec(norm, mul, tuple(readers), glu)


@dataclass
class RopeKV(_Pattern):
    """The q rope (`head`), `k` (a RopeSetRows: the k rope into the K cache) and `v_store` (set_rows of v into the V
    cache at k's indices), computed at the q rope's turn: the q rope's memory and both caches' rows written."""
    head: Tensor
    k: RopeSetRows
    v_store: Tensor
    needs: tuple = ()       # k's and v's operands an earlier fused kernel writes (its `early`): run where it ran
    pattern = "rope_kv"
    anchor = last = property(lambda self: self.head)
    nodes = property(lambda self: [self.head])
    computed = property(lambda self: [self.head, *self.k.computed, self.v_store])
    skipped = property(lambda self: [self.k.head, *self.k.skipped, self.v_store])

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+rope_kv"


def _rope_kv(q, spec, scan: _Scan, given: tuple = ()) -> RopeKV | None:
    """The q rope, then the first later rope of its positions, factors, parameters and type, a rope_set_rows with its
    sources ready at q's turn, and the first later set_rows of a v ready then at the same indices; each cache a leaf
    read by its set_rows alone (its rows are written before that node's turn). k and v may instead be among `given`
    (what the kernel of a pattern around this one computes before: norm_rope_kv's products)."""
    ready = lambda t: any(operand(t) is g for g in given) or scan.ready(t, q)  # noqa: E731
    after = scan.nodes[scan.position[id(q)] + 1:]
    k = next((n for n in after if n.op == "rope" and [id(s) for s in n.src[1:]] == [id(s) for s in q.src[1:]]), None)
    ks = _rope_set_rows(k, spec, scan) if k is not None and k.type == q.type and k.op_params == q.op_params else None
    if ks is None or id(k) in scan.taken or not ready(k.src[0]) or not scan.ready(ks.idx, q):
        return None
    vs = next((n for n in after if n.op == "set_rows" and n.src[1] is ks.idx and n is not ks.set_rows), None)
    if vs is None or not ready(vs.src[0]) or any(s.src[2].op is not None or scan.users.get(id(s.src[2])) != [s]
                                                 for s in (ks.set_rows, vs)):
        return None
    return RopeKV(q, ks, vs, tuple(t for t in map(operand, (k.src[0], vs.src[0])) if scan.early.get(id(t), t) is not t))


@dataclass
class NormRopeKV(_Pattern):
    """A norm_mat_vec `mv` of q, k, v (graph order) and the rope_kv `kv` reading them, computed at the norm's turn:
    the q rope's memory (planned then: `early`) and both caches' rows written."""
    head: Tensor
    mv: NormMatVec
    kv: RopeKV
    pattern = "norm_rope_kv"
    last = property(lambda self: self.kv.head)
    nodes = property(lambda self: [self.head])
    early = property(lambda self: [self.kv.head])
    computed = property(lambda self: [*self.mv.computed, *self.kv.computed])
    skipped = property(lambda self: [*self.mv.skipped, self.kv.head, *self.kv.skipped])

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+mul+mat_vec3+rope_kv"


def _norm_rope_kv(norm, spec, scan: _Scan) -> NormRopeKV | None:
    """A norm_mat_vec of three products, each read (through same-order views) only by the q rope, the k rope and the
    v set_rows of one rope_kv, whose positions, factors and indices are ready at the norm's turn."""
    mv = _norm_mat_vec(norm, spec, scan)
    if mv is None or mv.glu is not None or len(mv.products) != 3:
        return None
    q, k, v = mv.products
    reader = lambda t, op: _add_after(t, scan.users, keep_order=True, op=op)[0]  # noqa: E731
    qr = reader(q, "rope")
    kv = _rope_kv(qr, spec, scan, (k, v)) if qr is not None else None
    if (kv is None or reader(k, "rope") is not kv.k.head or reader(v, "set_rows") is not kv.v_store
            or not all(_same_order_view(n.src[0], t) for n, t in ((qr, q), (kv.k.head, k), (kv.v_store, v)))
            or not all(scan.ready(t, norm) for t in (*qr.src[1:], kv.k.idx) if t is not None)):
        return None
    return NormRopeKV(norm, mv, kv)


PATTERNS = {"epilogue": _epilogue, "norm_affine": _norm_affine, "attention": _attention, "chain": _chain,
            "add_rms_norm": _add_rms_norm, "rms_norm_mul": _rms_norm_mul, "glu": _glu, "mul_mat_add": _mul_mat_add,
            "rope_set_rows": _rope_set_rows, "norm_mat_vec": _norm_mat_vec,
            "rope_kv": _rope_kv, "norm_rope_kv": _norm_rope_kv}
"""pattern name -> finder(anchor, the backend's Fused, _Scan): the pattern anchored at `anchor`, or None."""


def find_fusions(graph, fused: Callable) -> dict:
    """{id(head): the found pattern (Epilogue, Attention, Chain, AddRmsNorm, ...)} for the patterns of `graph` a backend runs. For each node
    not taken by an earlier pattern, the patterns its op anchors (Op.fuses), in order: fused(node, pattern) is the
    backend's Fused for it (None: it does not run that pattern anchored at this node), whose act / cast / residual
    choose the variant found and whose accepts(fusion) says whether its kernel takes the types and layouts found
    (else the nodes run one by one)."""
    scan = _Scan(graph, fused)
    for node in graph.nodes:
        if id(node) in scan.taken or node.op not in OPS:
            continue
        for pattern in OPS[node.op].fuses:
            spec = fused(node, pattern)
            found = PATTERNS[pattern](node, spec, scan) if spec is not None else None
            if found is not None and spec.accepts(found):
                scan.fusions[id(found.head)] = found
                scan.taken.update(id(n) for n in found.skipped)
                scan.early.update((id(n), found.head) for n in found.early)
                break
    return scan.fusions
