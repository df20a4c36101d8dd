"""ggml's block formats in numba kernels: rows of blocks dequantized to float32, and F32 rows quantized.

Every dequantizer but those of Q2_K, Q3_K, IQ4_NL and IQ4_XS (scalar loops over groups of 16) goes through
unpack16, which turns 16 quants into 16 floats with vector instructions (written in LLVM IR: numba's loop
vectoriser gives up on the short loops over a block's bytes). A row is a contiguous uint8
array of whole blocks, its float32 output contiguous. `DEQUANTIZE[code]` is the row dequantizer of the type with
`CODES[type]`, `DOT[code]` a row's dot product with a float32 vector; `QUANTIZE[QUANTIZE_CODES[type]]` the row quantizer of the types cpy writes (ggml's
quantize_row_*_ref, bit for bit).
"""
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ....ops.layout import QUANTIZE_TO
from ....types import (IQ4_NL, IQ4_XS, KVALUES_IQ4NL, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0,
                       QUANT_TYPES)
from .common import scalar
from .fp16 import float_to_half

CODES = {t: i for i, t in enumerate(QUANT_TYPES)}
NIBBLE, INT8, NIBBLE_BIT, NIBBLE_2BITS, NIBBLE_WORD_BIT = range(5)
"""unpack16's modes: how a quant q is made from its byte b = src[j] (j < 16), h = hsrc[j], w = the uint32 at hsrc:
(b >> shift) & 15; b + 128 (int8 as unsigned); (b >> shift) & 15 | ((h >> hshift) & 1) << 4, the same with
(h >> hshift) & 3, and with (w >> (hshift + j)) & 1."""
LANES = 16


class _Vectors:
    """LLVM IR for 16 lanes: the quants of a block's bytes as floats (see the modes above), splats, fma."""

    def __init__(self, builder):
        self.b = builder
        self.i32, self.f32 = ir.IntType(32), ir.FloatType()
        self.v32, self.vf = ir.VectorType(self.i32, LANES), ir.VectorType(self.f32, LANES)
        self.fma_fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(self.vf, [self.vf] * 3),
                                                     f"llvm.fma.v{LANES}f32")

    def splat(self, x, vt):
        one = self.b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(self.i32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(self.v32, [0] * LANES))

    def load(self, addr, element):
        return self.b.load(self.b.inttoptr(addr, ir.VectorType(element, LANES).as_pointer()), align=1)

    def field(self, v, by, mask):
        return self.b.and_(self.b.lshr(v, by), ir.Constant(self.v32, [mask] * LANES))

    def quants(self, kind, src, hsrc, shift, hshift, bias=0):
        """The 16 quants q_j (see the modes) from the bytes at src and hsrc (integer addresses), minus `bias`, as
        floats."""
        b, v32 = self.b, self.v32
        q = b.zext(self.load(src, ir.IntType(8)), v32)
        if kind == INT8:
            q = b.xor(q, ir.Constant(v32, [128] * LANES))
        else:
            q = self.field(q, self.splat(b.trunc(shift, self.i32), v32), 15)
        if kind in (NIBBLE_BIT, NIBBLE_2BITS):
            h = self.field(b.zext(self.load(hsrc, ir.IntType(8)), v32), self.splat(b.trunc(hshift, self.i32), v32),
                           1 if kind == NIBBLE_BIT else 3)
        elif kind == NIBBLE_WORD_BIT:
            word = self.splat(b.load(b.inttoptr(hsrc, self.i32.as_pointer()), align=1), v32)
            h = self.field(word, b.add(self.splat(b.trunc(hshift, self.i32), v32),
                                       ir.Constant(v32, list(range(LANES)))), 1)
        if kind in (NIBBLE_BIT, NIBBLE_2BITS, NIBBLE_WORD_BIT):
            q = b.or_(q, b.shl(h, ir.Constant(v32, [4] * LANES)))
        if bias:
            return b.sitofp(b.sub(q, ir.Constant(v32, [bias] * LANES)), self.vf)
        return b.uitofp(q, self.vf)

    def fma(self, x, y, z):
        return self.b.call(self.fma_fn, [x, y, z])


@intrinsic(prefer_literal=True)
def unpack16(typingctx, dst, src, hsrc, mode, shift, hshift, scale, offset):
    """dst[j] = scale * q_j + offset for j < 16: float32 at address dst, quants q_j made as `mode` (a literal) says
    from the bytes at addresses src and hsrc."""
    if not isinstance(mode, types.IntegerLiteral):
        return None

    def codegen(context, builder, sig, args):
        dst, src, hsrc, _, shift, hshift, scale, offset = args
        v = _Vectors(builder)
        value = v.fma(v.quants(mode.literal_value, src, hsrc, shift, hshift), v.splat(scale, v.vf),
                      v.splat(offset, v.vf))
        builder.store(value, builder.inttoptr(dst, v.vf.as_pointer()), align=4)
        return context.get_dummy_value()
    sig = types.void(types.intp, types.intp, types.intp, mode, types.intp, types.intp, types.float32, types.float32)
    return sig, codegen


@intrinsic(prefer_literal=True)
def dot_blocks32(typingctx, mode, row, x, nblocks, size, m_at, qh_at, qs_at, center):
    """sum over the nblocks 32-blocks of a row (bytes at address row, `size` each) of the block's values . x's 32
    (float32 at address x), without storing the values: a block with f16 d at byte 0 holds d * (q - center), or,
    when m_at > 0, d * q + m with f16 m at byte m_at; its quants are made as `mode` says from its bytes at qs_at (the
    second 16: the high nibbles, or the next 16 bytes for INT8) and qh_at (fifth bits at 0 and 16)."""
    if not isinstance(mode, types.IntegerLiteral):
        return None
    kind = mode.literal_value

    def codegen(context, builder, sig, args):
        _, row, x, nblocks, size, m_at, qh_at, qs_at, center = args
        v = _Vectors(builder)
        half = ir.HalfType().as_pointer()
        acc = [cgutils.alloca_once_value(builder, ir.Constant(v.vf, [0.0] * LANES)) for _ in range(2)]
        zero, four, sixteen = (ir.Constant(x.type, n) for n in (0, 4, 16))
        with cgutils.for_range(builder, nblocks) as loop:
            blk = builder.add(row, builder.mul(loop.index, size))
            d = builder.fpext(builder.load(builder.inttoptr(blk, half), align=1), v.f32)
            m_ptr = builder.inttoptr(builder.add(blk, m_at), half)
            m = builder.select(builder.icmp_signed(">", m_at, zero),
                               builder.fpext(builder.load(m_ptr, align=1), v.f32), builder.fmul(d, builder.fneg(center)))
            xs = builder.add(x, builder.mul(loop.index, ir.Constant(x.type, 128)))
            xl, xh = v.load(xs, v.f32), v.load(builder.add(xs, ir.Constant(x.type, 64)), v.f32)
            qs, qh = builder.add(blk, qs_at), builder.add(blk, qh_at)
            second = builder.add(qs, sixteen) if kind == INT8 else qs
            t = builder.fmul(v.quants(kind, qs, qh, zero, zero), xl)
            t = v.fma(v.quants(kind, second, qh, zero if kind == INT8 else four, sixteen), xh, t)
            builder.store(v.fma(v.splat(d, v.vf), t, builder.load(acc[0])), acc[0])
            builder.store(v.fma(v.splat(m, v.vf), builder.fadd(xl, xh), builder.load(acc[1])), acc[1])
        total = builder.fadd(builder.load(acc[0]), builder.load(acc[1]))
        reduce = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v.f32, [v.f32, v.vf]),
                                                f"llvm.vector.reduce.fadd.v{LANES}f32")
        return builder.call(reduce, [ir.Constant(v.f32, 0.0), total])
    i = types.intp
    return types.float32(mode, i, i, i, i, i, i, i, types.float32), codegen


@intrinsic(prefer_literal=True)
def dot_blocks256(typingctx, mode, row, x, nblocks):
    """sum over the nblocks 256-blocks of a K-quant row (bytes at address row; mode NIBBLE: Q4_K, NIBBLE_BIT: Q5_K,
    NIBBLE_2BITS: Q6_K) of the block's values . x's 256 (float32 at address x), without storing the values: each
    block's 16 chunks of 16 values unrolled, their scales and mins decoded in registers (dequantize_* says how)."""
    if not isinstance(mode, types.IntegerLiteral):
        return None
    kind = mode.literal_value

    def codegen(context, builder, sig, args):
        _, row, x, nblocks = args
        v = _Vectors(builder)
        c = lambda n: ir.Constant(row.type, n)        # noqa: E731

        def at(blk, offset, element):
            return builder.load(builder.inttoptr(builder.add(blk, c(offset)), element.as_pointer()), align=1)

        def byte(blk, offset):
            return builder.zext(at(blk, offset, ir.IntType(8)), v.i32)

        def bits(value, shift, mask):
            return builder.and_(builder.lshr(value, ir.Constant(v.i32, shift)), ir.Constant(v.i32, mask))

        acc = [cgutils.alloca_once_value(builder, ir.Constant(v.vf, [0.0] * LANES)) for _ in range(2)]
        with cgutils.for_range(builder, nblocks) as loop:
            blk = builder.add(row, builder.mul(loop.index, c({NIBBLE: 144, NIBBLE_BIT: 176}.get(kind, 210))))
            xb = builder.add(x, builder.mul(loop.index, c(1024)))
            sums = [builder.load(a) for a in acc]
            for j in range(8):                           # pairs of chunks: a K-quant's 32-value sub-block
                xs = [v.load(builder.add(xb, c(128 * j + 64 * h)), v.f32) for h in range(2)]
                if kind == NIBBLE_2BITS:                 # a scale per chunk, q - 32 as a signed integer
                    n, k = j // 4, j % 4
                    d = builder.fpext(at(blk, 208, ir.HalfType()), v.f32)
                    for g in range(2):
                        q = v.quants(kind, builder.add(blk, c(64 * n + 32 * (k % 2) + 16 * g)),
                                     builder.add(blk, c(128 + 32 * n + 16 * g)), c(4 * (k // 2)), c(2 * k), 32)
                        sc = builder.sitofp(at(blk, 192 + 8 * n + 2 * k + g, ir.IntType(8)), v.f32)
                        sums[0] = v.fma(v.splat(builder.fmul(d, sc), v.vf), builder.fmul(q, xs[g]), sums[0])
                    continue
                if j < 4:
                    sc, m = bits(byte(blk, 4 + j), 0, 63), bits(byte(blk, 8 + j), 0, 63)
                else:
                    four = ir.Constant(v.i32, 4)
                    sc = builder.or_(bits(byte(blk, 8 + j), 0, 15), builder.shl(bits(byte(blk, j), 6, 3), four))
                    m = builder.or_(bits(byte(blk, 8 + j), 4, 15), builder.shl(bits(byte(blk, 4 + j), 6, 3), four))
                qs = (48 if kind == NIBBLE_BIT else 16) + 32 * (j // 2)
                q = [v.quants(kind, builder.add(blk, c(qs + 16 * h)), builder.add(blk, c(16 + 16 * h)), c(4 * (j % 2)),
                              c(j)) for h in range(2)]
                t = v.fma(q[1], xs[1], builder.fmul(q[0], xs[0]))
                scale = builder.fmul(builder.fpext(at(blk, 0, ir.HalfType()), v.f32), builder.uitofp(sc, v.f32))
                low = builder.fmul(builder.fpext(at(blk, 2, ir.HalfType()), v.f32), builder.uitofp(m, v.f32))
                sums[0] = v.fma(v.splat(scale, v.vf), t, sums[0])
                sums[1] = v.fma(v.splat(builder.fneg(low), v.vf), builder.fadd(xs[0], xs[1]), sums[1])
            for a, total in zip(acc, sums):
                builder.store(total, a)
        total = builder.fadd(builder.load(acc[0]), builder.load(acc[1]))
        reduce = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v.f32, [v.f32, v.vf]),
                                                f"llvm.vector.reduce.fadd.v{LANES}f32")
        return builder.call(reduce, [ir.Constant(v.f32, 0.0), total])
    return types.float32(mode, types.intp, types.intp, types.intp), codegen


@intrinsic
def half_at(typingctx, addr):
    """The IEEE half at byte address `addr` as float32 (one vcvtph2ps with F16C)."""
    def codegen(context, builder, sig, args):
        h = builder.load(builder.inttoptr(args[0], ir.HalfType().as_pointer()), align=1)
        return builder.fpext(h, ir.FloatType())
    return types.float32(types.intp), codegen


# -- dequantizers: dequantize_<type>(out, row), out float32 (ne0,), row uint8 (ne0 / block * size,) ------------

@scalar
def _nibbles(o, s, d, m):
    """Elements 0-15 of a 32-block from the low nibbles of the 16 bytes at s, 16-31 from the high ones."""
    unpack16(o, s, 0, NIBBLE, 0, 0, d, m)
    unpack16(o + 64, s, 0, NIBBLE, 4, 0, d, m)


@scalar
def dequantize_q4_0(out, row):
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 32):
        d = half_at(r + 18 * b)
        _nibbles(o + 128 * b, r + 18 * b + 2, d, np.float32(-8.0) * d)


@scalar
def dequantize_q4_1(out, row):
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 32):
        p = r + 20 * b
        _nibbles(o + 128 * b, p + 4, half_at(p), half_at(p + 2))


@scalar
def _q5(o, qs, qh, d, m):
    """A 32-block of 5-bit quants: nibbles at qs, fifth bits in the uint32 at qh."""
    unpack16(o, qs, qh, NIBBLE_WORD_BIT, 0, 0, d, m)
    unpack16(o + 64, qs, qh, NIBBLE_WORD_BIT, 4, 16, d, m)


@scalar
def dequantize_q5_0(out, row):
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 32):
        p = r + 22 * b
        d = half_at(p)
        _q5(o + 128 * b, p + 6, p + 2, d, np.float32(-16.0) * d)


@scalar
def dequantize_q5_1(out, row):
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 32):
        p = r + 24 * b
        _q5(o + 128 * b, p + 8, p + 4, half_at(p), half_at(p + 2))


@scalar
def dequantize_q8_0(out, row):
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 32):
        p = r + 34 * b
        d = half_at(p)
        unpack16(o + 128 * b, p + 2, 0, INT8, 0, 0, d, np.float32(-128.0) * d)
        unpack16(o + 128 * b + 64, p + 18, 0, INT8, 0, 0, d, np.float32(-128.0) * d)


@scalar
def _scale_min(row, at, j):
    """The 6-bit (scale, min) of sub-block j (0-7) of the 12 packed bytes at row[at:] (Q4_K, Q5_K)."""
    if j < 4:
        return row[at + j] & 63, row[at + j + 4] & 63
    return ((row[at + j + 4] & 15) | ((row[at + j - 4] >> 6) << 4),
            (row[at + j + 4] >> 4) | ((row[at + j] >> 6) << 4))


@scalar
def _k_quant_4_5(out, row, size, fifth):
    """Q4_K (fifth False) or Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; the 64 values of pair j come
    from the 32 bytes of nibbles at qs + 32 j (low nibbles, then high), Q5_K's fifth bits from bits 2j, 2j + 1 of
    its 32 qh bytes."""
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 256):
        at = size * b
        d, dmin = half_at(r + at), half_at(r + at + 2)
        qh = r + at + 16
        qs = qh + 32 if fifth else qh
        for j in range(8):
            sc, m = _scale_min(row, at + 4, j)
            scale, offset = d * np.float32(sc), -dmin * np.float32(m)
            dst = o + 4 * (256 * b + 32 * j)
            for half in range(2):
                src = qs + 32 * (j // 2) + 16 * half
                if fifth:
                    unpack16(dst + 64 * half, src, qh + 16 * half, NIBBLE_BIT, 4 * (j % 2), j, scale, offset)
                else:
                    unpack16(dst + 64 * half, src, 0, NIBBLE, 4 * (j % 2), 0, scale, offset)


@scalar
def dequantize_q4_k(out, row):
    _k_quant_4_5(out, row, 144, False)


@scalar
def dequantize_q5_k(out, row):
    _k_quant_4_5(out, row, 176, True)


@scalar
def dequantize_q6_k(out, row):
    """Per half n of a 256-block: ql bytes at 64n, qh at 128 + 32n, int8 scales at 192 + 8n; value 32k + l
    (l < 32) of the half is nibble k // 2 of ql[l + 32 (k % 2)] with bits 2k, 2k+1 of qh[l], scale 2k + l // 16."""
    o, r = out.ctypes.data, row.ctypes.data
    for b in range(out.size // 256):
        at = 210 * b
        d = half_at(r + at + 208)
        for n in range(2):
            for k in range(4):
                for g in range(2):
                    sc = d * np.float32(np.int8(row[at + 192 + 8 * n + g + 2 * k]))
                    dst = o + 4 * (256 * b + 128 * n + 32 * k + 16 * g)
                    src = r + at + 64 * n + 32 * (k % 2) + 16 * g
                    unpack16(dst, src, r + at + 128 + 32 * n + 16 * g, NIBBLE_2BITS, 4 * (k // 2), 2 * k, sc,
                             np.float32(-32.0) * sc)


# -- Q2_K, Q3_K, IQ4_NL, IQ4_XS: groups of 16 values d_g * q + m_g, in scalar loops -------------------------------

Q2K, Q3K, IQ4NL, IQ4XS = range(4)
"""_group's and _quant's kinds."""
_SIZE, _BLOCK = (84, 110, 18, 136), (256, 256, 32, 256)
_KVALUES = np.array(KVALUES_IQ4NL, np.float32)


@scalar
def _group(row, at, kind, g):
    """(d_g, m_g) of the values 16g .. 16g + 15 of the block at row[at:]: Q2_K: d * (scale & 15), -dmin * (scale >> 4)
    of byte g; Q3_K: d * (s - 32), s's 6 bits packed in the 12 bytes at 96; IQ4_NL: d; IQ4_XS: d * (s - 32), s of
    sub-block g // 2 from its nibble at 4 and 2 bits of the uint16 at 2."""
    zero, r = np.float32(0.0), row.ctypes.data + at
    if kind == Q2K:
        sc = row[at + g]
        return half_at(r + 80) * np.float32(sc & 15), -(half_at(r + 82) * np.float32(sc >> 4))
    if kind == Q3K:
        s = ((row[at + 96 + g % 8] >> (4 * (g // 8))) & 15) | (((row[at + 104 + g % 4] >> (2 * (g // 4))) & 3) << 4)
        return half_at(r + 108) * np.float32(np.int32(s) - 32), zero
    if kind == IQ4NL:
        return half_at(r), zero
    ib = g // 2
    high = (np.int32(row[at + 2]) | np.int32(row[at + 3]) << 8) >> (2 * ib)
    s = ((row[at + 4 + ib // 2] >> (4 * (ib % 2))) & 15) | ((high & 3) << 4)
    return half_at(r) * np.float32(np.int32(s) - 32), zero


@scalar
def _quant(row, at, kind, g, e):
    """q of value 16g + e of the block at row[at:]: Q2_K / Q3_K: value 128h + 32j + i from bits 2j of byte 32h + i of
    the quants (Q3_K: minus 4 where bit 4h + j of hmask byte i is 0); IQ4: KVALUES_IQ4NL at a nibble (32-blocks as
    Q4_0's)."""
    if kind == Q2K or kind == Q3K:
        h, j, i = g // 8, (g // 2) % 4, 16 * (g % 2) + e
        q = np.int32((row[at + (16 if kind == Q2K else 32) + 32 * h + i] >> (2 * j)) & 3)
        if kind == Q3K and (row[at + i] >> (4 * h + j)) & 1 == 0:
            q -= 4
        return np.float32(q)
    qs = at + 2 + e if kind == IQ4NL else at + 8 + 16 * (g // 2) + e
    return _KVALUES[(row[qs] >> (4 * (g % 2))) & 15]


@scalar
def _dequantize_small(out, row, kind):
    size, groups = _SIZE[kind], _BLOCK[kind] // 16
    for b in range(out.size // _BLOCK[kind]):
        for g in range(groups):
            d, m = _group(row, size * b, kind, g)
            o = _BLOCK[kind] * b + 16 * g
            for e in range(16):
                out[o + e] = d * _quant(row, size * b, kind, g, e) + m


@scalar
def dequantize_q2_k(out, row):
    _dequantize_small(out, row, Q2K)


@scalar
def dequantize_q3_k(out, row):
    _dequantize_small(out, row, Q3K)


@scalar
def dequantize_iq4_nl(out, row):
    _dequantize_small(out, row, IQ4NL)


@scalar
def dequantize_iq4_xs(out, row):
    _dequantize_small(out, row, IQ4XS)


DEQUANTIZE = tuple({Q4_0: dequantize_q4_0, Q4_1: dequantize_q4_1, Q5_0: dequantize_q5_0, Q5_1: dequantize_q5_1,
                    Q8_0: dequantize_q8_0, Q4_K: dequantize_q4_k, Q5_K: dequantize_q5_k, Q6_K: dequantize_q6_k,
                    Q2_K: dequantize_q2_k, Q3_K: dequantize_q3_k, IQ4_NL: dequantize_iq4_nl,
                    IQ4_XS: dequantize_iq4_xs}[t] for t in QUANT_TYPES)


# -- row dot products: dot_<type>(row, x) = row's values . x (x contiguous float32 (ne0,)) ---------------------

@scalar
def dot_q4_0(row, x):
    return dot_blocks32(NIBBLE, row.ctypes.data, x.ctypes.data, x.size // 32, 18, 0, 0, 2, np.float32(8.0))


@scalar
def dot_q4_1(row, x):
    return dot_blocks32(NIBBLE, row.ctypes.data, x.ctypes.data, x.size // 32, 20, 2, 0, 4, np.float32(0.0))


@scalar
def dot_q5_0(row, x):
    return dot_blocks32(NIBBLE_WORD_BIT, row.ctypes.data, x.ctypes.data, x.size // 32, 22, 0, 2, 6, np.float32(16.0))


@scalar
def dot_q5_1(row, x):
    return dot_blocks32(NIBBLE_WORD_BIT, row.ctypes.data, x.ctypes.data, x.size // 32, 24, 2, 4, 8, np.float32(0.0))


@scalar
def dot_q8_0(row, x):
    return dot_blocks32(INT8, row.ctypes.data, x.ctypes.data, x.size // 32, 34, 0, 0, 2, np.float32(128.0))


@scalar
def dot_q4_k(row, x):
    return dot_blocks256(NIBBLE, row.ctypes.data, x.ctypes.data, x.size // 256)


@scalar
def dot_q5_k(row, x):
    return dot_blocks256(NIBBLE_BIT, row.ctypes.data, x.ctypes.data, x.size // 256)


@scalar
def dot_q6_k(row, x):
    return dot_blocks256(NIBBLE_2BITS, row.ctypes.data, x.ctypes.data, x.size // 256)


@scalar
def _dot_small(row, x, kind):
    """sum over groups of 16 of d_g (q . x) + m_g sum(x) (_group, _quant), in float32."""
    size, groups, total = _SIZE[kind], _BLOCK[kind] // 16, np.float32(0.0)
    for b in range(x.size // _BLOCK[kind]):
        for g in range(groups):
            d, m = _group(row, size * b, kind, g)
            o, t, sx = _BLOCK[kind] * b + 16 * g, np.float32(0.0), np.float32(0.0)
            for e in range(16):
                t += _quant(row, size * b, kind, g, e) * x[o + e]
                sx += x[o + e]
            total += d * t + m * sx
    return total


@scalar
def dot_q2_k(row, x):
    return _dot_small(row, x, Q2K)


@scalar
def dot_q3_k(row, x):
    return _dot_small(row, x, Q3K)


@scalar
def dot_iq4_nl(row, x):
    return _dot_small(row, x, IQ4NL)


@scalar
def dot_iq4_xs(row, x):
    return _dot_small(row, x, IQ4XS)


DOT = tuple({Q4_0: dot_q4_0, Q4_1: dot_q4_1, Q5_0: dot_q5_0, Q5_1: dot_q5_1, Q8_0: dot_q8_0, Q4_K: dot_q4_k,
             Q5_K: dot_q5_k, Q6_K: dot_q6_k, Q2_K: dot_q2_k, Q3_K: dot_q3_k, IQ4_NL: dot_iq4_nl,
             IQ4_XS: dot_iq4_xs}[t] for t in QUANT_TYPES)
"""By code."""


# -- quantizers: quantize_<type>(row, x), x float32 (ne0,), row uint8 -------------------------------------------

@scalar
def _put_half(row, at, value):
    h = float_to_half(value)
    row[at], row[at + 1] = h & 0xFF, h >> 8


@scalar
def _roundf(v):
    """C's roundf: halves away from zero."""
    return math.copysign(math.floor(abs(np.float64(v)) + 0.5), v)


@scalar
def quantize_q8_0(row, x):
    for b in range(x.size // 32):
        xb = x[32 * b:32 * b + 32]
        amax = np.float32(0.0)
        for v in xb:
            amax = max(amax, abs(v))
        d = amax / np.float32(127.0)
        inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
        _put_half(row, 34 * b, d)
        for j in range(32):
            row[34 * b + 2 + j] = np.uint8(np.int8(_roundf(xb[j] * inv)))


@scalar
def _quantize_32(row, at, x, bits, symmetric):
    """One 32-block of x into Q4_0 / Q5_0 (symmetric: d = -max / 2^(bits-1), max the value of largest magnitude)
    or Q4_1 / Q5_1 (d = (max - min) / (2^bits - 1), m = min) at row[at:]: d (and m), Q5's qh, the nibbles."""
    lo, hi, big = x[0], x[0], np.float32(0.0)
    for v in x:
        lo, hi = min(lo, v), max(hi, v)
        if abs(v) > abs(big):
            big = v
    top = (1 << bits) - 1
    d = big / np.float32(-(1 << (bits - 1))) if symmetric else (hi - lo) / np.float32(top)
    inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
    _put_half(row, at, d)
    if not symmetric:
        _put_half(row, at + 2, lo)
    qh = 0
    qs = at + (2 if symmetric else 4) + (4 if bits == 5 else 0)
    for j in range(32):
        if symmetric:
            q = min(top, int(np.int8(x[j] * inv + np.float32((1 << (bits - 1)) + 0.5))))
        else:
            q = min(top, int(np.uint8((x[j] - lo) * inv + np.float32(0.5))))
        qh |= (q >> 4) << j
        if j < 16:
            row[qs + j] = q & 15
        else:
            row[qs + j - 16] |= (q & 15) << 4
    if bits == 5:
        for i in range(4):
            row[qs - 4 + i] = (qh >> (8 * i)) & 0xFF


@scalar
def _quantize_rows32(row, x, size, bits, symmetric):
    for b in range(x.size // 32):
        _quantize_32(row, size * b, x[32 * b:32 * b + 32], bits, symmetric)


@scalar
def quantize_q4_0(row, x):
    _quantize_rows32(row, x, 18, 4, True)


@scalar
def quantize_q4_1(row, x):
    _quantize_rows32(row, x, 20, 4, False)


@scalar
def quantize_q5_0(row, x):
    _quantize_rows32(row, x, 22, 5, True)


@scalar
def quantize_q5_1(row, x):
    _quantize_rows32(row, x, 24, 5, False)


QUANTIZE = tuple({Q4_0: quantize_q4_0, Q4_1: quantize_q4_1, Q5_0: quantize_q5_0, Q5_1: quantize_q5_1,
                  Q8_0: quantize_q8_0}[t] for t in QUANTIZE_TO)
"""Row quantizers by QUANTIZE_CODES[type] (the types cpy and cast write: ops/layout.py's QUANTIZE_TO)."""
QUANTIZE_CODES = {t: i for i, t in enumerate(QUANTIZE_TO)}
