// rope's angle (kernels/rope.py), shared by rope.cu and the norm_mmvq_rope kernel (quant_norm.cu) so that both give
// the same bits.
#pragma once
#include "common.cuh"

// cos and sin (times YaRN's mscale) of pair j's angle at position pos, in double as the CPU's. A rope's Args: src2 F32
// frequency factors or null; p0: freq_base, p1: freq_scale; ip: n_dims, then the float bits of ext_factor, mscale and
// YaRN's corr dims low, high
__device__ __forceinline__ void rope_cos_sin(const Args& a, int pos, i64 j, float& cs, float& sn) {
    const int n_dims = a.ip[0];
    const float ext = __int_as_float(a.ip[1]), mscale = __int_as_float(a.ip[2]);
    const float low = __int_as_float(a.ip[3]), high = __int_as_float(a.ip[4]);
    double extrap = (double)pos * pow((double)a.p0, -2.0 * j / n_dims);
    if (a.src2) extrap /= ((const float*)a.src2)[j];
    double theta = extrap * a.p1;
    if (ext != 0.f) {
        const double mix = ext * (1.0 - fmin(1.0, fmax(0.0, (j - low) / fmax(0.001, (double)high - low))));
        theta = theta * (1.0 - mix) + extrap * mix;
    }
    double s, co;
    sincos(theta, &s, &co);
    cs = (float)co * mscale;
    sn = (float)s * mscale;
}
