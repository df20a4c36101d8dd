"""SAM's window and relative-position ops: win_part / win_unpart (one thread per dst element, 32-bit index math
where the tensors fit), get_rel_pos (grid-stride) and add_rel_pos, which reads three tensors: its kernel takes the
usual Args (a, pw) and ph's address as a second kernel argument. F32 and F16, sources with any strides."""
from __future__ import annotations

import ctypes

from ..registry import register
from .common import BLOCK, C_TYPES, FLOATS, MAX_BLOCKS, SUFFIX, iparam32, tensor_ptr, vector_rows


_SOURCE = r"""
// win_part: src0 (C, W, H, B) -> dst (C, w, w, B * nwin), nwin = npx * npy windows per image;
// window b * nwin + py * npx + px, zeros past the image
template <typename T, typename I> __device__ void win_part_i(const Args& a) {
    const I w = (I)a.ne[1], npx = ((I)a.ne0[1] + w - 1) / w, nwin = npx * (((I)a.ne0[2] + w - 1) / w);
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        const I b = c[3] / nwin, p = c[3] % nwin, x = (p % npx) * w + c[1], y = (p / npx) * w + c[2];
        float v = 0.f;
        if (x < (I)a.ne0[1] && y < (I)a.ne0[2])
            v = to_f(*(const T*)(a.src0 + (c[0] * (I)a.nb0[0] + x * (I)a.nb0[1] + y * (I)a.nb0[2] + b * (I)a.nb0[3])));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}
template <typename T> __device__ void win_part(const Args& a) { DISPATCH_I(a, win_part_i, T); }

// win_unpart: src0 (C, w, w, B * nwin) -> dst (C, W, H, B), the inverse of win_part
template <typename T, typename I> __device__ void win_unpart_i(const Args& a) {
    const I w = (I)a.ne0[1], npx = ((I)a.ne[1] + w - 1) / w, nwin = npx * (((I)a.ne[2] + w - 1) / w);
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        const I p = c[3] * nwin + (c[2] / w) * npx + c[1] / w;
        const T v = *(const T*)(a.src0 + (c[0] * (I)a.nb0[0] + (c[1] % w) * (I)a.nb0[1] + (c[2] % w) * (I)a.nb0[2]
                                          + p * (I)a.nb0[3]));
        *(T*)(a.dst + byte_offset(c, a.nb)) = v;
    }
}
template <typename T> __device__ void win_unpart(const Args& a) { DISPATCH_I(a, win_unpart_i, T); }
// win_part / win_unpart four channels a thread (win_steps: C % 4 == 0, channels contiguous, rows 4-element aligned,
// dst contiguous, 32-bit offsets): thread i moves the windowed tensor's elements 4 i .. 4 i + 3
template <typename T, bool PART> __device__ void win_vec(const Args& a) {
    const i64* win = PART ? a.ne : a.ne0;                  // (C, w, w, B * nwin)
    const i64* img = PART ? a.ne0 : a.ne;                  // (C, W, H, B)
    const i64* inb = PART ? a.nb0 : a.nb;
    const unsigned C4 = (unsigned)win[0] / 4, w = (unsigned)win[1], W = (unsigned)img[1], H = (unsigned)img[2];
    const unsigned npx = (W + w - 1) / w, nwin = npx * ((H + w - 1) / w), n = (unsigned)(win[0] * win[1] * win[2] * win[3]) / 4;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned r = i / C4;
        const unsigned c4 = i - r * C4, tx = r % w; r /= w;
        const unsigned ty = r % w, q = r / w, b = q / nwin, p = q % nwin, x = (p % npx) * w + tx, y = (p / npx) * w + ty;
        const unsigned off = c4 * 4 * sizeof(T) + x * (unsigned)inb[1] + y * (unsigned)inb[2] + b * (unsigned)inb[3];
        if (PART) {
            const float4 v = x < W && y < H ? load4<T>(a.src0 + off) : make_float4(0.f, 0.f, 0.f, 0.f);
            store4<T>(a.dst + (size_t)i * 4 * sizeof(T), v);
        } else if (x < W && y < H) {
            store4<T>(a.dst + off, load4<T>(a.src0 + (size_t)i * 4 * sizeof(T)));
        }
    }
}
// dst (C, kh, qh): dst[q, k, :] = a[(kh - 1 - k) + q, :]
template <typename T> __device__ void get_rel_pos_k(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        i64 s[4] = {c[0], a.ne[1] - 1 - c[1] + c[2], 0, 0};
        *(T*)(a.dst + byte_offset(c, a.nb)) = *(const T*)(a.src0 + byte_offset(s, a.nb0));
    }
}
// dst = a + ph[kh, qw, qh, b] + pw[kw, qw, qh, b] with a (K*K, QW*QH, ...) = (kw + K kh, qw + QW qh, b); src1 = pw
template <typename T, typename P> __device__ void add_rel_pos_k(const Args& a, const char* ph) {
    const i64 k = a.ne1[0], qw = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        const i64 b = c[2] + c[3] * a.ne[2];
        const i64 q[4] = {0, c[1] % qw, c[1] / qw, b};
        const i64 base = q[1] * a.nb1[1] + q[2] * a.nb1[2] + q[3] * a.nb1[3];
        float w = to_f(*(const P*)(a.src1 + base + (c[0] % k) * a.nb1[0]));
        float h = to_f(*(const P*)(ph + base + (c[0] / k) * a.nb1[0]));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0))) + h + w);
    }
}
"""


def refusal(node) -> str | None:
    srcs = [s for s in node.src if s is not None]
    if any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return f"{node.op} on CUDA takes F32/F16 tensors with a result of the source's type"
    if node.op == "add_rel_pos":
        pw, ph = node.src[1], node.src[2]
        if pw.type != ph.type or pw.nb != ph.nb:
            return "add_rel_pos on CUDA needs pw and ph of one type and with the same strides"
    return None


def kernel_name(node) -> str:
    t = SUFFIX[node.src[0].type]
    if node.op == "add_rel_pos":
        return f"add_rel_pos_{t}_{SUFFIX[node.src[1].type]}"
    return f"{node.op}_{t}"


def iparam(node) -> int:
    """win_part / win_unpart: 32-bit index math where the tensors fit."""
    return iparam32(node) if node.op in ("win_part", "win_unpart") else 0


def _win_vec(node, ptrs) -> bool:
    """Whether win_vec moves node (win_part / win_unpart) four channels a thread."""
    src, es = node.src[0], node.type.size
    win, image = (node, src) if node.op == "win_part" else (src, node)
    return (node.ne[0] % 4 == 0 and win.is_contiguous() and vector_rows(image, ptrs, 4 * es)
            and max(node.nbytes, src.nbytes) < 1 << 31)


def win_steps(backend, node) -> list:
    """win_part / win_unpart: win_vec where it applies, else the one-element-a-thread kernel."""
    src = node.src[0]
    pd, ps = tensor_ptr(node), tensor_ptr(src)
    if not _win_vec(node, (pd, ps)):
        return [backend.launch_node(node)]
    n4 = max(node.nelements, src.nelements) // 4
    return [backend.launch(node, f"{node.op}_v_{SUFFIX[node.type]}", pd, node, [(ps, src)],
                           config=(min(MAX_BLOCKS, -(-n4 // BLOCK)), BLOCK))]


def add_rel_pos_steps(backend, node) -> list:
    """One launch with ph's address as the kernel's second argument."""
    a, pw, ph = node.src[:3]
    launch = backend.launch(node, kernel_name(node), tensor_ptr(node), node, [(tensor_ptr(a), a), (tensor_ptr(pw), pw)])
    extra = ctypes.c_void_p(tensor_ptr(ph))
    launch.args = (launch.args, extra)
    launch.params = (ctypes.c_void_p * 2)(ctypes.addressof(launch.args[0]), ctypes.addressof(extra))
    return [launch]


def source() -> str:
    parts = [_SOURCE]
    for t in FLOATS:
        c, s = C_TYPES[t], SUFFIX[t]
        parts.append(f'extern "C" __global__ void win_part_{s}(const Args a) {{ win_part<{c}>(a); }}\n')
        parts.append(f'extern "C" __global__ void win_unpart_{s}(const Args a) {{ win_unpart<{c}>(a); }}\n')
        parts.append(f'extern "C" __global__ void get_rel_pos_{s}(const Args a) {{ get_rel_pos_k<{c}>(a); }}\n')
        for op, part in (("win_part", "true"), ("win_unpart", "false")):
            parts.append(f'extern "C" __global__ void {op}_v_{s}(const Args a) {{ win_vec<{c}, {part}>(a); }}\n')
        for p in FLOATS:
            parts.append(f'extern "C" __global__ void add_rel_pos_{s}_{SUFFIX[p]}(const Args a, const char* ph) '
                         f'{{ add_rel_pos_k<{c}, {C_TYPES[p]}>(a, ph); }}\n')
    return "".join(parts)


register(ops=("win_part", "win_unpart"), source=source, refusal=refusal, kernel_name=kernel_name, iparam=iparam,
         steps=win_steps)
register(ops=("get_rel_pos",), source=source, refusal=refusal, kernel_name=kernel_name)
register(ops=("add_rel_pos",), source=source, refusal=refusal, kernel_name=kernel_name,
         steps=add_rel_pos_steps)
