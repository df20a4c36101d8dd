"""Quantized rows times activations on integer dot products, as ggml's CPU mat-vec: the activations are quantized once
into 8-bit blocks of 32 and each weight block's quants multiply them as int8 x int8 -> int32, the scales applied per
block in float32.

Activations (quantize_q8): ggml's q8_1 with float32 scales, stored apart: per 32 values x, d = max|x| / 127, the int8
quants q = round(x / d) (ties to even) and s = d * sum(q), the (d, s) of all blocks in one float32 array of pairs.
Every weight type uses these blocks (the K-quants too, one activation scale per 32 instead of q8_K's per 256), so a
block whose values are d_w * q_w + m_w gives d_w * d * sum(q_w q) + m_w * s. The int8 products are x86 instructions
named in LLVM IR: vpmaddubsw + vpmaddwd on AVX2, vpdpbusd with AVX512-VNNI (+VL) or AVX-VNNI; both multiply unsigned
by signed bytes, so signed weights (Q8_0, Q6_K's q - 32) go in as |q_w| with the activation's sign flipped where
q_w < 0 (vpsignb), as ggml does. Mat-vecs (one activation row) of the 32-block types on AVX512-BW/-VBMI/-VNNI hosts
take four blocks a step on 512-bit registers (dot_q8_row4x32; the activation grouped to match the gathered quants),
Q8_0 there as q_w + 128 with 128 * s taken back.
"""
import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.extending import intrinsic

from ....types import Q4_0, Q4_1, Q5_0, Q5_1, Q6_K, Q8_0, Q4_K, Q5_K, QUANT_TYPES
from .common import scalar
from .quants import INT8, NIBBLE, NIBBLE_2BITS, NIBBLE_BIT, NIBBLE_WORD_BIT


def _features() -> set:
    """The CPU features numba compiles for (its configured ones, else the host's)."""
    flags = config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()
    return {f[1:] for f in flags.split(",") if f.startswith("+")}


FEATURES = _features()
AVAILABLE = "avx2" in FEATURES
"""The integer kernels need x86 AVX2 (the mul_mat impl "q8" is refused elsewhere)."""
VNNI = {"avx512vnni", "avx512vl"} <= FEATURES or "avxvnni" in FEATURES
"""vpdpbusd instead of vpmaddubsw + vpmaddwd."""
ROWS4 = {"avx512bw", "avx512vbmi", "avx512vnni"} <= FEATURES
"""Mat-vecs (one activation row) of the 32-block types by dot_q8_row4x32, four blocks a step on 512-bit registers."""
QK = 32
"""Activation values per block."""


class _Ints:
    """LLVM IR for a block's 32 quants as <32 x i8> and their products."""

    def __init__(self, builder, vnni=None):
        self.b = builder
        self.vnni = VNNI if vnni is None else vnni
        self.i8, self.i16, self.i32, self.f32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
        self.v8, self.v16, self.vi, self.vf = (ir.VectorType(self.i8, 32), ir.VectorType(self.i16, 16),
                                               ir.VectorType(self.i32, 8), ir.VectorType(self.f32, 8))

    def fn(self, name, ret, args):
        return cgutils.get_or_insert_function(self.b.module, ir.FunctionType(ret, args), name)

    def ptr(self, addr, ty):
        return self.b.inttoptr(addr, ty.as_pointer())

    def bytes32(self, addr):
        return self.b.load(self.ptr(addr, self.v8), align=1)

    def scalar(self, addr, ty):
        return self.b.load(self.ptr(addr, ty), align=1)

    def half(self, addr):
        return self.b.fpext(self.scalar(addr, ir.HalfType()), self.f32)

    def splat8(self, n):
        return ir.Constant(self.v8, [n] * 32)

    def low(self, v, shift, mask):
        """(v >> shift) & mask per byte (shift, mask Python ints)."""
        return self.b.and_(self.b.lshr(v, self.splat8(shift)) if shift else v, self.splat8(mask))

    def nibbles16(self, addr, shift):
        """32 quants from the 16 bytes at addr: their low nibbles, then their high ones (shift 0); shift 4 gives
        the high nibbles of 32 bytes."""
        if shift:
            return self.low(self.bytes32(addr), 4, 15)
        half = self.b.load(self.ptr(addr, ir.VectorType(self.i8, 16)), align=1)
        lo = self.b.and_(half, ir.Constant(half.type, [15] * 16))
        hi = self.b.lshr(half, ir.Constant(half.type, [4] * 16))
        return self.b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(self.i32, 32), list(range(32))))

    def word_bits(self, addr):
        """Bit j of the uint32 at addr, as 16 in byte j (Q5_0 / Q5_1's fifth bits)."""
        bits = self.b.bitcast(self.scalar(addr, self.i32), ir.VectorType(ir.IntType(1), 32))
        return self.b.shl(self.b.zext(bits, self.v8), self.splat8(4))

    def signed(self, w, y):
        """(|w|, y with its sign flipped where w < 0, zero where w == 0: vpabsb, vpsignb): the unsigned-by-signed
        operands of signed w times y."""
        mag = self.b.call(self.fn("llvm.abs.v32i8", self.v8, [self.v8, ir.IntType(1)]), [w, ir.Constant(ir.IntType(1), 0)])
        return mag, self.b.call(self.fn("llvm.x86.avx2.psign.b", self.v8, [self.v8, self.v8]), [y, w])

    def madd(self, u, y):
        """<8 x i32>: lane i = sum of u[4i + t] * y[4i + t], t < 4 (u unsigned bytes, y signed; no saturation for
        the quants here: |u| <= 128, |y| <= 127)."""
        zero = ir.Constant(self.vi, [0] * 8)
        if self.vnni:
            return self.b.call(self.fn("llvm.x86.avx512.vpdpbusd.256", self.vi, [self.vi, self.v8, self.v8]),
                               [zero, u, y])
        pairs = self.b.call(self.fn("llvm.x86.avx2.pmadd.ub.sw", self.v16, [self.v8, self.v8]), [u, y])
        return self.b.call(self.fn("llvm.x86.avx2.pmadd.wd", self.vi, [self.v16, self.v16]),
                           [pairs, ir.Constant(self.v16, [1] * 16)])

    def quad_sums(self, w, ys):
        """<8 x i32> of the products of unsigned w with the four signed ys: lanes c and c + 4 sum column c's.
        Each 16-bit sum (vphaddw twice) holds 8 products: no overflow for w < 32 (the 4- and 5-bit quants), |y| <= 127."""
        pairs = [self.b.call(self.fn("llvm.x86.avx2.pmadd.ub.sw", self.v16, [self.v8, self.v8]), [w, y]) for y in ys]
        hadd = self.fn("llvm.x86.avx2.phadd.w", self.v16, [self.v16, self.v16])
        quad = self.b.call(hadd, [self.b.call(hadd, pairs[:2]), self.b.call(hadd, pairs[2:])])
        return self.b.call(self.fn("llvm.x86.avx2.pmadd.wd", self.vi, [self.v16, self.v16]),
                           [quad, ir.Constant(self.v16, [1] * 16)])

    def splat(self, x, vt):
        one = self.b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(self.i32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(self.i32, vt.count),
                                                                                       [0] * vt.count))

    def fma(self, x, y, z):
        return self.b.call(self.fn("llvm.fma.v8f32", self.vf, [self.vf] * 3), [x, y, z])

    def scaled(self, acc, scale, sums):
        """acc + scale * float(sums) (sums <8 x i32>, scale a float)."""
        return self.fma(self.splat(scale, self.vf), self.b.sitofp(sums, self.vf), acc)

    def total(self, acc, extra):
        reduce = self.fn(f"llvm.vector.reduce.fadd.v{acc.type.count}f32", self.f32, [self.f32, acc.type])
        return self.b.fadd(self.b.call(reduce, [ir.Constant(self.f32, 0.0), acc], fastmath=("reassoc",)), extra)

    def activation(self, xq, xds, t):
        """Activation block t (an integer value): its quants and <d, s>."""
        pair = self.b.load(self.ptr(self.b.add(xds, self.b.mul(t, ir.Constant(t.type, 8))), ir.VectorType(self.f32, 2)),
                           align=4)
        return self.bytes32(self.b.add(xq, self.b.mul(t, ir.Constant(t.type, QK)))), pair

    def lane(self, v, i):
        return self.b.extract_element(v, ir.Constant(self.i32, i))


@intrinsic(prefer_literal=True)
def quantize_q8(typingctx, grouped, x, xq, xds, nblocks):
    """The activation blocks (module doc) of the nblocks * 32 float32 at address x: quants at xq, (d, s) pairs at xds
    (addresses); grouped (a literal) as dot_q8_row4x32 reads them: per four blocks their first 16 quants, then their
    last 16 (128 int8 at xq), and their four d, then their four s (8 float32 at xds)."""
    if not isinstance(grouped, types.IntegerLiteral):
        return None

    def codegen(context, builder, sig, args):
        _, x, xq, xds, nblocks = args
        v = _Ints(builder)
        b = builder
        c = lambda n: ir.Constant(x.type, n)        # noqa: E731
        vf32 = ir.VectorType(v.f32, 32)
        with cgutils.for_range(b, nblocks) as loop:
            i = loop.index
            vals = b.load(v.ptr(b.add(x, b.mul(i, c(4 * QK))), vf32), align=1)
            mag = b.call(v.fn("llvm.fabs.v32f32", vf32, [vf32]), [vals])
            amax = b.call(v.fn("llvm.vector.reduce.fmax.v32f32", v.f32, [vf32]), [mag])
            d = b.fdiv(amax, ir.Constant(v.f32, 127.0))
            inv = b.select(b.fcmp_ordered("!=", d, ir.Constant(v.f32, 0.0)), b.fdiv(ir.Constant(v.f32, 1.0), d),
                           ir.Constant(v.f32, 0.0))
            scaled = b.fmul(vals, v.splat(inv, vf32))
            rounded = b.call(v.fn("llvm.roundeven.v32f32", vf32, [vf32]), [scaled])
            q32 = b.fptosi(rounded, ir.VectorType(v.i32, 32))
            q = b.trunc(q32, v.v8)
            total = b.call(v.fn("llvm.vector.reduce.add.v32i32", v.i32, [q32.type]), [q32])
            t = b.srem(i, c(4)) if grouped.literal_value else c(0)        # grouped: 16 and 4 bytes back per block t
            for h in range(2):        # of the group
                half = b.shuffle_vector(q, q, ir.Constant(ir.VectorType(v.i32, 16), list(range(16 * h, 16 * h + 16))))
                at = b.sub(b.add(xq, b.mul(i, c(QK))), b.sub(b.mul(t, c(16)), c(64 * h if grouped.literal_value else 16 * h)))
                b.store(half, v.ptr(at, half.type), align=1)
            at = b.sub(b.add(xds, b.mul(i, c(8))), b.mul(t, c(4)))
            b.store(d, v.ptr(at, v.f32), align=4)
            b.store(b.fmul(d, b.sitofp(total, v.f32)), v.ptr(b.add(at, c(16 if grouped.literal_value else 4)), v.f32), align=4)
        return context.get_dummy_value()
    i = types.intp
    return types.void(grouped, i, i, i, i), codegen


@intrinsic(prefer_literal=True)
def dot_q8_blocks32(typingctx, mode, has_min, row, xq, xds, nblocks, size, qh_at, qs_at, center):
    """sum over the nblocks 32-blocks of a row (bytes at address row, `size` each) of the block's values . the
    activation blocks at xq, xds: a block with f16 d at byte 0 holds d * (q - center), or, with has_min (a literal),
    d * q + m with f16 m at byte 2; its quants are nibbles at qs_at (NIBBLE; NIBBLE_WORD_BIT: fifth bits in the uint32
    at qh_at) or int8 at qs_at (INT8, center 0)."""
    if not isinstance(mode, types.IntegerLiteral) or not isinstance(has_min, types.IntegerLiteral):
        return None
    kind = mode.literal_value

    def codegen(context, builder, sig, args):
        _, _, row, xq, xds, nblocks, size, qh_at, qs_at, center = args
        b, v = builder, _Ints(builder)
        v2 = ir.VectorType(v.f32, 2)
        sums = [cgutils.alloca_once_value(b, ir.Constant(t, z)) for t, z in ((v.vf, [0.0] * 8), (v2, [0.0] * 2)) * 2]

        def step(index, acc, low):
            blk = b.add(row, b.mul(index, size))
            if has_min.literal_value:                    # <d, m> of the block times <d, s> of the activations
                dm = b.fpext(v.scalar(blk, ir.VectorType(ir.HalfType(), 2)), v2)
            else:                                        # <d, d>: the offset's -center applied to the sum at the end
                dm = v.splat(v.half(blk), v2)
            y, ds = v.activation(xq, xds, index)
            scales = b.fmul(dm, ds)
            if kind == INT8:
                w, y = v.signed(v.bytes32(b.add(blk, qs_at)), y)
            else:
                w = v.nibbles16(b.add(blk, qs_at), 0)
                if kind == NIBBLE_WORD_BIT:
                    w = b.or_(w, v.word_bits(b.add(blk, qh_at)))
            b.store(v.scaled(b.load(acc), v.lane(scales, 0), v.madd(w, y)), acc)
            if kind != INT8:                            # Q8_0's blocks have no offset; lane 1 sums m * s
                b.store(b.fadd(b.load(low), scales), low)
        two = ir.Constant(nblocks.type, 2)
        with cgutils.for_range(b, b.sdiv(nblocks, two)) as loop:        # two chains of sums: blocks 2i and 2i + 1
            step(b.mul(loop.index, two), *sums[:2])
            step(b.add(b.mul(loop.index, two), ir.Constant(nblocks.type, 1)), *sums[2:])
        with b.if_then(b.icmp_signed("!=", b.srem(nblocks, two), ir.Constant(nblocks.type, 0))):
            step(b.sub(nblocks, ir.Constant(nblocks.type, 1)), *sums[:2])
        acc = b.fadd(b.load(sums[0]), b.load(sums[2]))
        low = v.lane(b.fadd(b.load(sums[1]), b.load(sums[3])), 1)
        return v.total(acc, low if has_min.literal_value else b.fmul(low, b.fneg(center)))
    i = types.intp
    return types.float32(mode, has_min, i, i, i, i, i, i, i, types.float32), codegen


@intrinsic(prefer_literal=True)
def dot_q8_row4x32(typingctx, mode, has_min, row, xg, nblocks, size, qh_at, qs_at, center):
    """dot_q8_blocks32 (same arguments, size to qs_at literals) with the activation row grouped by quantize_q8 at
    address xg (quants, then (d, s) from xg + 128 * ceil(nblocks / 4)), four blocks a step on 512-bit registers
    (ROWS4): their 4 * size bytes in two 64-byte loads (Q8_0: four), the quants gathered by byte
    permutes into [16 of block i in lane i] (nibbles: low ones, then high; Q8_0's + 128, taken back as a center of
    128), two vpdpbusd sum four int32 per block, one vcvtph2ps converts the four d (and m), which times the
    activations' d (and s) scale the sums. The last nblocks % 4 blocks load by masked loads (none past the row), the
    missing blocks' scales zero."""
    lits = (mode, has_min, size, qh_at, qs_at)
    if not all(isinstance(t, types.IntegerLiteral) for t in lits):
        return None
    kind, minimum, s, qh, qs = (t.literal_value for t in lits)
    pairs = ((0, 64), (18, 72)) if kind == INT8 else ((0, 4 * s - 64),)        # offsets of two 64-byte loads

    def codegen(context, builder, sig, args):
        row, xg, nblocks, center = args[2], args[3], args[4], args[8]
        b, v = builder, _Ints(builder)
        c = lambda n: ir.Constant(row.type, n)        # noqa: E731
        vec = ir.VectorType
        v64, f16, f8 = vec(v.i8, 64), vec(v.f32, 16), vec(v.f32, 8)
        bytes64 = lambda n: ir.Constant(v64, [n] * 64 if isinstance(n, int) else n)        # noqa: E731
        acc = cgutils.alloca_once_value(b, ir.Constant(f16, [0.0] * 16))
        low = cgutils.alloca_once_value(b, ir.Constant(f8, [0.0] * 8))
        full = b.sdiv(nblocks, c(4))
        ds_at = b.add(xg, b.mul(b.sdiv(b.add(nblocks, c(3)), c(4)), c(128)))
        dpbusd = v.fn("llvm.x86.avx512.vpdpbusd.512", vec(v.i32, 16), [vec(v.i32, 16), v64, v64])

        def step(blk, g, rest=None):
            def load(o):        # the last step's only the rest * size bytes there
                at = v.ptr(b.add(blk, c(o)), v64)
                if rest is None:
                    return b.load(at, align=1)
                mask = b.icmp_unsigned("<", bytes64(list(range(o, o + 64))), v.splat(b.trunc(b.mul(rest, c(s)), v.i8), v64))
                masked = v.fn("llvm.masked.load.v64i8.p0", v64, [at.type, v.i32, mask.type, v64])
                return b.call(masked, [at, ir.Constant(v.i32, 1), mask, ir.Constant(v64, None)])
            regs = [(load(o0), o0, load(o1), o1) for o0, o1 in pairs]

            def pick(pair, at):        # the bytes at the group's offsets `at` (vpermt2b)
                r0, o0, r1, o1 = pair
                index = [p - o0 if p < o0 + 64 else 64 + p - o1 for p in at]
                return b.shuffle_vector(r0, r1, ir.Constant(vec(v.i32, 64), index + [0] * (64 - len(index))))
            lanes = [(i, t) for i in range(4) for t in range(16)]
            if kind == INT8:
                w = [b.xor(pick(pair, [s * i + qs + 16 * h + t for i, t in lanes]), bytes64(128))
                     for h, pair in enumerate(regs)]
            else:
                packed = pick(regs[0], [s * i + qs + t for i, t in lanes])
                w = [b.and_(packed, bytes64(15)), b.lshr(packed, bytes64(4))]
                if kind == NIBBLE_WORD_BIT:        # value t of half h: bit 16 h + t of the block's uint32
                    for h in range(2):
                        bits = b.and_(pick(regs[0], [s * i + qh + 2 * h + t // 8 for i, t in lanes]),
                                      bytes64([1 << (t % 8) for _, t in lanes]))
                        w[h] = b.select(b.icmp_unsigned("!=", bits, bytes64(0)), b.or_(w[h], bytes64(16)), w[h])
            x = b.add(xg, b.mul(g, c(128)))
            sums = ir.Constant(vec(v.i32, 16), [0] * 16)
            for h in range(2):
                sums = b.call(dpbusd, [sums, w[h], b.load(v.ptr(b.add(x, c(64 * h)), v64), align=1)])
            halves = b.bitcast(pick(regs[0], [s * (h % 4) + 2 * (minimum and h > 3) + e for h in range(8) for e in (0, 1)]),
                               vec(ir.HalfType(), 32))
            dm = b.fpext(b.shuffle_vector(halves, halves, ir.Constant(vec(v.i32, 8), list(range(8)))), f8)
            scales = b.fmul(dm, b.load(v.ptr(b.add(ds_at, b.mul(g, c(32))), f8), align=4))   # d dx x4 | m s (d s)
            if rest is not None:
                there = b.icmp_signed("<", ir.Constant(vec(row.type, 8), [0, 1, 2, 3] * 2), v.splat(rest, vec(row.type, 8)))
                scales = b.select(there, scales, ir.Constant(f8, [0.0] * 8))
            each = b.shuffle_vector(scales, scales, ir.Constant(vec(v.i32, 16), [i // 4 for i in range(16)]))
            b.store(b.call(v.fn("llvm.fma.v16f32", f16, [f16] * 3), [each, b.sitofp(sums, f16), b.load(acc)]), acc)
            b.store(b.fadd(b.load(low), scales), low)
        with cgutils.for_range(b, full) as loop:
            step(b.add(row, b.mul(loop.index, c(4 * s))), loop.index)
        rest = b.sub(nblocks, b.mul(full, c(4)))
        with b.if_then(b.icmp_signed("!=", rest, c(0))):
            step(b.add(row, b.mul(full, c(4 * s))), full, rest)
        mins = v.total(b.shuffle_vector(b.load(low), b.load(low), ir.Constant(vec(v.i32, 4), [4, 5, 6, 7])),
                       ir.Constant(v.f32, 0.0))
        center = ir.Constant(v.f32, 128.0) if kind == INT8 else center
        return v.total(b.load(acc), mins if minimum else b.fmul(mins, b.fneg(center)))
    i = types.intp
    return types.float32(mode, has_min, i, i, i, size, qh_at, qs_at, types.float32), codegen


@intrinsic(prefer_literal=True)
def dot_q8_tile32(typingctx, mode, has_min, nr, nc, row, rstride, xq, kq, xt, ldt, nblocks, size, qh_at, qs_at,
                  center, out, ostride):
    """The nr x nc dot products of nr rows of 32-blocks (bytes at address row, rstride apart; blocks as
    dot_q8_blocks32 has them) with nc activation columns (quants at xq, kq bytes apart; block t's d of column j at
    float32 xt[t * ldt + j], its s at xt[(nblocks + t) * ldt + j]), written to float32 out[j * ostride + i] (ostride in
    bytes): each weight block is unpacked once for the nc columns, each activation block loaded once for the nr rows
    (nr, nc literals: nr * nc accumulators in registers). The nibble types with nc a multiple of 4 sum four columns'
    products in one vector (quad_sums): one conversion and one scaling for four columns (+25% GFLOP/s)."""
    lits = (mode, has_min, nr, nc)
    if not all(isinstance(t, types.IntegerLiteral) for t in lits):
        return None
    kind, minimum, rows, cols = (t.literal_value for t in lits)

    def codegen(context, builder, sig, args):
        row, rstride, xq, kq, xt, ldt, nblocks, size, qh_at, qs_at, center, out, ostride = args[4:]
        b, v = builder, _Ints(builder)
        c = lambda n: ir.Constant(row.type, n)        # noqa: E731
        vc = ir.VectorType(v.f32, cols)
        quads = kind != INT8 and cols % 4 == 0 and not v.vnni
        acc = [[cgutils.alloca_once_value(b, ir.Constant(v.vf, [0.0] * 8)) for _ in range(cols // 4 if quads else cols)]
               for _ in range(rows)]
        low = [cgutils.alloca_once_value(b, ir.Constant(vc, [0.0] * cols)) for _ in range(rows)]
        with cgutils.for_range(b, nblocks) as loop:
            t = loop.index
            ys = [v.bytes32(b.add(b.add(xq, b.mul(c(j), kq)), b.mul(t, c(QK)))) for j in range(cols)]
            at = b.add(xt, b.mul(t, b.mul(ldt, c(4))))
            if quads:                                   # <d of columns 4g .. 4g + 3> twice
                dx = [b.shuffle_vector(d4, d4, ir.Constant(v.vi, [0, 1, 2, 3] * 2)) for d4 in
                      (b.load(v.ptr(b.add(at, c(16 * g)), ir.VectorType(v.f32, 4)), align=4) for g in range(cols // 4))]
            else:
                dx = [v.splat(v.scalar(b.add(at, c(4 * j)), v.f32), v.vf) for j in range(cols)]
            sx = b.load(v.ptr(b.add(at, b.mul(nblocks, b.mul(ldt, c(4)))), vc), align=4)
            for i in range(rows):
                blk = b.add(b.add(row, b.mul(c(i), rstride)), b.mul(t, size))
                dw = v.half(blk)
                if kind == INT8:
                    w = v.bytes32(b.add(blk, qs_at))
                else:
                    w = v.nibbles16(b.add(blk, qs_at), 0)
                    if kind == NIBBLE_WORD_BIT:
                        w = b.or_(w, v.word_bits(b.add(blk, qh_at)))
                    mw = v.half(b.add(blk, c(2))) if minimum else dw        # the offset's m, or d for -center
                    b.store(b.fadd(b.load(low[i]), b.fmul(v.splat(mw, vc), sx)), low[i])
                for g in range(cols // 4 if quads else 0):
                    part = b.sitofp(v.quad_sums(w, ys[4 * g:4 * g + 4]), v.vf)
                    b.store(v.fma(b.fmul(v.splat(dw, v.vf), dx[g]), part, b.load(acc[i][g])), acc[i][g])
                for j in range(0 if quads else cols):
                    u, y = v.signed(w, ys[j]) if kind == INT8 else (w, ys[j])
                    part = b.fmul(b.sitofp(v.madd(u, y), v.vf), dx[j])
                    b.store(v.fma(v.splat(dw, v.vf), part, b.load(acc[i][j])), acc[i][j])
        for i in range(rows):
            for j in range(cols):
                extra = ir.Constant(v.f32, 0.0) if kind == INT8 else v.lane(b.load(low[i]), j)
                extra = extra if minimum else b.fmul(extra, b.fneg(center))
                if quads:
                    quad = b.load(acc[i][j // 4])
                    value = b.fadd(b.fadd(v.lane(quad, j % 4), v.lane(quad, j % 4 + 4)), extra)
                else:
                    value = v.total(b.load(acc[i][j]), extra)
                b.store(value, v.ptr(b.add(out, b.add(b.mul(c(j), ostride), c(4 * i))), v.f32), align=4)
        return context.get_dummy_value()
    i = types.intp
    return types.void(mode, has_min, nr, nc, i, i, i, i, i, i, i, i, i, i, types.float32, i, i), codegen


@intrinsic(prefer_literal=True)
def dot_q8_blocks256(typingctx, mode, row, xq, xds, nblocks):
    """sum over the nblocks 256-blocks of a K-quant row (bytes at address row; mode NIBBLE: Q4_K, NIBBLE_BIT: Q5_K,
    NIBBLE_2BITS: Q6_K) of the block's values . the activation blocks at xq, xds (quants.py's dequantize_* say
    where the quants, scales and mins lie)."""
    if not isinstance(mode, types.IntegerLiteral):
        return None
    kind = mode.literal_value

    def codegen(context, builder, sig, args):
        _, row, xq, xds, nblocks = args
        b, v = builder, _Ints(builder)
        c = lambda n: ir.Constant(row.type, n)        # noqa: E731
        byte = lambda blk, at: b.zext(v.scalar(b.add(blk, c(at)), v.i8), v.i32)        # noqa: E731
        bits = lambda x, shift, mask: b.and_(b.lshr(x, ir.Constant(v.i32, shift)), ir.Constant(v.i32, mask))  # noqa: E731
        acc = [cgutils.alloca_once_value(b, ir.Constant(v.vf, [0.0] * 8)) for _ in range(2)]     # two chains of sums
        low = [cgutils.alloca_once_value(b, ir.Constant(v.f32, 0.0)) for _ in range(2)]
        with cgutils.for_range(b, nblocks) as loop:
            blk = b.add(row, b.mul(loop.index, c({NIBBLE: 144, NIBBLE_BIT: 176}.get(kind, 210))))
            first = b.mul(loop.index, c(8))
            total, mins = [b.load(a) for a in acc], [b.load(a) for a in low]
            for j in range(8):                            # the 8 sub-blocks of 32 values, one activation block each
                y, ds = v.activation(xq, xds, b.add(first, c(j)))
                dy, sy = v.lane(ds, 0), v.lane(ds, 1)
                if kind == NIBBLE_2BITS:                  # n, k: half and quarter; scales per 16 values
                    n, k = j // 4, j % 4
                    w = v.low(v.bytes32(b.add(blk, c(64 * n + 32 * (k % 2)))), 4 * (k // 2), 15)
                    w = b.or_(w, b.shl(v.low(v.bytes32(b.add(blk, c(128 + 32 * n))), 2 * k, 3), v.splat8(4)))
                    u, y = v.signed(b.sub(w, v.splat8(32)), y)
                    sc = [b.sext(v.scalar(b.add(blk, c(192 + 8 * n + 2 * k + g)), v.i8), v.i32) for g in range(2)]
                    scales = b.shuffle_vector(v.splat(sc[0], v.vi), v.splat(sc[1], v.vi),
                                              ir.Constant(v.vi, [0, 0, 0, 0, 8, 8, 8, 8]))
                    total[j % 2] = v.scaled(total[j % 2], b.fmul(v.half(b.add(blk, c(208))), dy),
                                            b.mul(v.madd(u, y), scales))
                    continue
                if j < 4:
                    sc, m = bits(byte(blk, 4 + j), 0, 63), bits(byte(blk, 8 + j), 0, 63)
                else:
                    four = ir.Constant(v.i32, 4)
                    sc = b.or_(bits(byte(blk, 8 + j), 0, 15), b.shl(bits(byte(blk, j), 6, 3), four))
                    m = b.or_(bits(byte(blk, 8 + j), 4, 15), b.shl(bits(byte(blk, 4 + j), 6, 3), four))
                qs = (48 if kind == NIBBLE_BIT else 16) + 32 * (j // 2)
                w = v.low(v.bytes32(b.add(blk, c(qs))), 4 * (j % 2), 15)
                if kind == NIBBLE_BIT:
                    w = b.or_(w, b.shl(v.low(v.bytes32(b.add(blk, c(16))), j, 1), v.splat8(4)))
                scale = b.fmul(b.fmul(v.half(blk), b.uitofp(sc, v.f32)), dy)
                total[j % 2] = v.scaled(total[j % 2], scale, v.madd(w, y))
                mins[j % 2] = b.fadd(mins[j % 2], b.fmul(b.fmul(v.half(b.add(blk, c(2))), b.uitofp(m, v.f32)), sy))
            for a, value in zip(acc + low, total + mins):
                b.store(value, a)
        return v.total(b.fadd(b.load(acc[0]), b.load(acc[1])), b.fneg(b.fadd(b.load(low[0]), b.load(low[1]))))
    i = types.intp
    return types.float32(mode, i, i, i, i), codegen


# -- dot_q8_<type>(row, xq, xds): row's values . the activation blocks (xq int8, xds float32 (d, s) pairs) -------

@scalar
def dot_q8_q4_0(row, xq, xds):
    return dot_q8_blocks32(NIBBLE, 0, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // QK, 18, 0, 2,
                           np.float32(8.0))


@scalar
def dot_q8_q4_1(row, xq, xds):
    return dot_q8_blocks32(NIBBLE, 1, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // QK, 20, 0, 4,
                           np.float32(0.0))


@scalar
def dot_q8_q5_0(row, xq, xds):
    return dot_q8_blocks32(NIBBLE_WORD_BIT, 0, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // QK, 22,
                           2, 6, np.float32(16.0))


@scalar
def dot_q8_q5_1(row, xq, xds):
    return dot_q8_blocks32(NIBBLE_WORD_BIT, 1, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // QK, 24,
                           4, 8, np.float32(0.0))


@scalar
def dot_q8_q8_0(row, xq, xds):
    return dot_q8_blocks32(INT8, 0, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // QK, 34, 0, 2,
                           np.float32(0.0))


@scalar
def dot_q8_q4_k(row, xq, xds):
    return dot_q8_blocks256(NIBBLE, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // 256)


@scalar
def dot_q8_q5_k(row, xq, xds):
    return dot_q8_blocks256(NIBBLE_BIT, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // 256)


@scalar
def dot_q8_q6_k(row, xq, xds):
    return dot_q8_blocks256(NIBBLE_2BITS, row.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // 256)


_DOTS = {Q4_0: dot_q8_q4_0, Q4_1: dot_q8_q4_1, Q5_0: dot_q8_q5_0, Q5_1: dot_q8_q5_1, Q8_0: dot_q8_q8_0,
         Q4_K: dot_q8_q4_k, Q5_K: dot_q8_q5_k, Q6_K: dot_q8_q6_k}
Q8_TYPES = tuple(t for t in QUANT_TYPES if t in _DOTS)
"""The weight types with integer dot products (the first of QUANT_TYPES; the others run mul_mat as `dot`)."""
assert QUANT_TYPES[:len(Q8_TYPES)] == Q8_TYPES
DOT_Q8 = tuple(_DOTS[t] for t in Q8_TYPES)
"""By quants.CODES."""


@scalar
def quantize_row_q8(xq, xds, x):
    """x (float32, contiguous, a multiple of 32 values) into the activation blocks xq (int8) and xds (float32 (d, s)
    pairs, contiguous)."""
    quantize_q8(0, x.ctypes.data, xq.ctypes.data, xds.ctypes.data, xq.size // QK)


# -- tile_q8_<type>(a, r0, r1, xq, xds, xt, out): out[j, r - r0] = row r of a . activation column j, r0 <= r < r1 ---

TILE_COLS = 8
"""Activation columns per register tile of dot_q8_tile32 (one row of a each)."""


@scalar
def _tile(mode, has_min, nc, size, qh_at, qs_at, center, a, r, r0, j, xq, xt, out):
    """dot_q8_tile32 on row r of a and columns j .. j + nc - 1, into out[j:, r - r0]."""
    dot_q8_tile32(mode, has_min, 1, nc, a[r].ctypes.data, a.strides[0], xq[j].ctypes.data, xq.strides[0],
                  xt.ctypes.data + 4 * j, xq.shape[0], xq.shape[1] // QK, size, qh_at, qs_at, center,
                  out[j].ctypes.data + 4 * (r - r0), out.strides[0])


@scalar
def _tiles32(mode, has_min, size, qh_at, qs_at, center, a, r0, r1, xq, xds, xt, out):
    """The 32-block types' tile_q8 (dot_q8_blocks32's arguments for the type first): TILE_COLS columns at a time
    times each row of a (the columns' activation blocks stay in L1), then four, then the last columns one dot product
    at a time (faster than a 1-column tile); one column with ROWS4 by dot_q8_row4x32 on the grouped activation in xt."""
    n, nb = xq.shape[0], xq.shape[1] // QK
    if ROWS4 and n == 1:
        for r in range(r0, r1):
            out[0, r - r0] = dot_q8_row4x32(mode, has_min, a[r].ctypes.data, xt.ctypes.data, nb, size, qh_at, qs_at,
                                            center)
        return
    full = n - n % TILE_COLS
    four = full + (n - full) // 4 * 4
    for j in range(0, full, TILE_COLS):
        for r in range(r0, r1):
            _tile(mode, has_min, TILE_COLS, size, qh_at, qs_at, center, a, r, r0, j, xq, xt, out)
    for r in range(r0, r1):
        if four > full:
            _tile(mode, has_min, 4, size, qh_at, qs_at, center, a, r, r0, full, xq, xt, out)
        for j in range(four, n):
            out[j, r - r0] = dot_q8_blocks32(mode, has_min, a[r].ctypes.data, xq[j].ctypes.data, xds[j].ctypes.data,
                                             nb, size, qh_at, qs_at, center)


@scalar
def _dots(dot, a, r0, r1, xq, xds, out):
    """tile_q8 by one dot product per row and column (the K-quants)."""
    for r in range(r0, r1):
        for j in range(xq.shape[0]):
            out[j, r - r0] = dot(a[r], xq[j], xds[j])


@scalar
def tile_q8_q4_0(a, r0, r1, xq, xds, xt, out):
    _tiles32(NIBBLE, 0, 18, 0, 2, np.float32(8.0), a, r0, r1, xq, xds, xt, out)


@scalar
def tile_q8_q4_1(a, r0, r1, xq, xds, xt, out):
    _tiles32(NIBBLE, 1, 20, 0, 4, np.float32(0.0), a, r0, r1, xq, xds, xt, out)


@scalar
def tile_q8_q5_0(a, r0, r1, xq, xds, xt, out):
    _tiles32(NIBBLE_WORD_BIT, 0, 22, 2, 6, np.float32(16.0), a, r0, r1, xq, xds, xt, out)


@scalar
def tile_q8_q5_1(a, r0, r1, xq, xds, xt, out):
    _tiles32(NIBBLE_WORD_BIT, 1, 24, 4, 8, np.float32(0.0), a, r0, r1, xq, xds, xt, out)


@scalar
def tile_q8_q8_0(a, r0, r1, xq, xds, xt, out):
    _tiles32(INT8, 0, 34, 0, 2, np.float32(0.0), a, r0, r1, xq, xds, xt, out)


@scalar
def tile_q8_q4_k(a, r0, r1, xq, xds, xt, out):
    _dots(dot_q8_q4_k, a, r0, r1, xq, xds, out)


@scalar
def tile_q8_q5_k(a, r0, r1, xq, xds, xt, out):
    _dots(dot_q8_q5_k, a, r0, r1, xq, xds, out)


@scalar
def tile_q8_q6_k(a, r0, r1, xq, xds, xt, out):
    _dots(dot_q8_q6_k, a, r0, r1, xq, xds, out)


_TILES = {Q4_0: tile_q8_q4_0, Q4_1: tile_q8_q4_1, Q5_0: tile_q8_q5_0, Q5_1: tile_q8_q5_1, Q8_0: tile_q8_q8_0,
          Q4_K: tile_q8_q4_k, Q5_K: tile_q8_q5_k, Q6_K: tile_q8_q6_k}
TILE_Q8 = tuple(_TILES[t] for t in Q8_TYPES)
"""By quants.CODES."""
Q8_TILED = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
"""The types whose tile_q8 runs on dot_q8_tile32's register tiles (the K-quants' on one dot product per pair)."""

