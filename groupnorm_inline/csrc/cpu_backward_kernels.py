"""C++ source: the CPU backward kernels (NCHW and channels-last), vectorised with `at::vec` (see cpu_vec.py).

The formulas are those of group_norm_backward_cpu.py. Per (n, c), about the saved mean m of the channel's
slice (so nothing cancels when |mean| >> std), in the compute type folded into double every kBlock elements:

    ds[n, c] = sum dz * (x - m),   db[n, c] = sum dz,   dm[n, c] = sum (x - m)

with dz = dy, or dy * act'(z), z = (x - m) * rstd * w[c] + bias[c], with the fused activation. Then per
(n, g): delta = sum_c dm / D (the rounding of the saved mean), S, B, coef_x, coef_1, and in a second pass

    dx = rstd * w[c] * dz + coef_x * (x - m) + coef_1.

Work is cut as in the forward (cpu_forward_kernels.py): NCHW one task per slice doing both passes when the
slices share out evenly over the threads, otherwise every slice cut into parts (per-part sums added per
channel, then dx over the same parts); channels-last per sample and part of its rows, with kWidth channels of
sums in registers down a tile of rows. The per-(n, c) sums ds - delta * db and db are handed back for the
parameter gradients.
"""

from .cpu_forward_kernels import CPU_FORWARD_KERNELS

CPU_BACKWARD_KERNELS = CPU_FORWARD_KERNELS + r"""
#ifndef GN_INLINE_CPU_BACKWARD_KERNELS
#define GN_INLINE_CPU_BACKWARD_KERNELS
#include <memory>
#include <vector>

namespace gn_cpu {

// Sums of one channel's elements (or of a part of them), in double.
struct ChannelSums {
  double ds = 0, db = 0, dm = 0;
};

// The gradient of the normalised value: dy (K = kNone), or dy * act'(z) with z = d * a + bias, d = x - m, for the
// activation K known at compile time. The loops that call it run inside with_activation_kind, so each is compiled
// once per activation with the derivative inlined.
template <typename T, int K>
GN_CPU_INLINE Pack<T> grad_z(const Pack<T>& dy, const Pack<T>& d, const Pack<T>& a, const Pack<T>& bias,
                             const gn_act::Params& act) {
  if constexpr (K == gn_act::kNone) {
    return dy;
  } else {
    return dy * derivative_pack<K>(act, fmadd(d, a, bias));
  }
}

// Channels shorter than one vector ((N, C) inputs, 2x2 maps) are walked element by element: a masked load or
// store copies through a buffer, and with a handful of elements per channel those copies and the lane sums cost
// more than the arithmetic. (8, 64) G4 float32, one thread: backward
// 13.4 us per call in the kernel, against ~3 us for PyTorch's. (With an activation, backward_nchw computes dz of
// such channels a pack at a time first; the element-by-element case below then only meets pieces of a channel cut
// by a part boundary.)

// Adds the sums of len elements of one NCHW channel (x, dy) to out; m: the saved mean, a = rstd * w[c],
// bias: bias[c] (a, bias only read with an activation).
template <typename T, bool kAct>
void channel_sums_vectors(const T* x, const T* dy, int64_t len, compute_t<T> m, compute_t<T> a, compute_t<T> bias,
                          const gn_act::Params& act, ChannelSums& out, compute_t<T>* dz_out) {
  with_activation_kind<kAct>(act, [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    using P = Pack<T>;
    using C = compute_t<T>;
    constexpr int64_t W = P::kWidth;
    const P vm = P::broadcast(m), va = P::broadcast(a), vb = P::broadcast(bias);
    for (int64_t start = 0; start < len; start += kBlock) {
      const int64_t end = std::min(len, start + kBlock);
      P sd = P::broadcast(C(0)), sb = sd, sm = sd;
      int64_t i = start;
      for (; i + W <= end; i += W) {
        const P d = P::load(x + i) - vm;
        const P g = grad_z<T, K>(P::load(dy + i), d, va, vb, act);
        if (dz_out != nullptr) g.lanes(dz_out + i);
        sd = fmadd(g, d, sd);
        sb = sb + g;
        sm = sm + d;
      }
      if (i < end) {
        const int64_t cnt = end - i;
        const P d = (P::load(x + i, cnt) - vm).first(cnt);
        const P g = grad_z<T, K>(P::load(dy + i, cnt), d, va, vb, act).first(cnt);
        if (dz_out != nullptr) g.lanes(dz_out + i);  // (dz_out has a pack of room past len)
        sd = fmadd(g, d, sd);
        sb = sb + g;
        sm = sm + d;
      }
      out.ds += sum_lanes(sd);
      out.db += sum_lanes(sb);
      out.dm += sum_lanes(sm);
    }
  });
}

// dx = a * dz + cx * (x - m) + c1 for len elements of one NCHW channel; dz from dz_in where the sums pass kept it
// (channel_sums' dz_out), else computed again.
template <typename T, bool kAct>
void channel_grad_input_vectors(const T* x, const T* dy, T* dx, int64_t len, compute_t<T> m, compute_t<T> a,
                                compute_t<T> bias, compute_t<T> cx, compute_t<T> c1, const gn_act::Params& act,
                                bool stream, const compute_t<T>* dz_in) {
  using P = Pack<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  const P vm = P::broadcast(m), va = P::broadcast(a), vb = P::broadcast(bias), vcx = P::broadcast(cx),
          vc1 = P::broadcast(c1);
  // Packs streamed: whole lines only, none that the overlapping last pack (normal stores) writes again.
  const int64_t streamed = stream ? streamed_prefix(dx, len % W == 0 ? len : (len >= W ? len - W : 0)) : 0;
  // `run` and `grad` are compiled out of line (one per activation); what they read through their captures they
  // take as locals first: a store to dx may alias any memory the closure points at, so a captured constant was
  // loaded again after every store (eight loads a pack in the bfloat16 loop, which ran at 1.1-1.2x PyTorch's time).
  auto run = [&](auto grad) {
    const T* const xr = x;
    T* const dxr = dx;
    const int64_t n = len, streamed_end = streamed;
    const P m_ = vm, a_ = va, cx_ = vcx, c1_ = vc1;
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      const P d = P::load(xr + i) - m_;
      const P out = fmadd(a_, grad(i, d, W), fmadd(cx_, d, c1_));
      if (i + W <= streamed_end) out.store_stream(dxr + i);
      else out.store(dxr + i);
    }
    if (i == n) return;
    if (n >= W) {
      // The last pack ends at len, over elements of the one before, which it writes again with the same values
      // (as normalize_run: no counted load and store, out of line for 16-bit data).
      i = n - W;
      const P d = P::load(xr + i) - m_;
      fmadd(a_, grad(i, d, W), fmadd(cx_, d, c1_)).store(dxr + i);
      return;
    }
    const int64_t cnt = n - i;
    const P d = P::load(xr + i, cnt) - m_;
    fmadd(a_, grad(i, d, cnt), fmadd(cx_, d, c1_)).store(dxr + i, cnt);
  };
  if (dz_in != nullptr) {  // (dz_in has a pack of room past len)
    run([dz_in](int64_t i, const P&, int64_t) { return P{V::loadu(dz_in + i), V::loadu(dz_in + i + P::kVec)}; });
    return;
  }
  with_activation_kind<kAct>(act, [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    run([dy, va, vb, act](int64_t i, const P& d, int64_t cnt) {
      return grad_z<T, K>(P::load(dy + i, cnt), d, va, vb, act);
    });
  });
}

// Sums of one channel of len < kWidth elements: sd = sum g (x - m), sb = sum g, sm = sum (x - m), with g the
// gradient of the normalised value (dy without an activation, dz from a buffer with one; G: its type). float: one
// whole vector first where the channel holds one (at most one), its lanes added by ATen's shuffle tree (double has
// no SIMD form of it, see sum_lanes); then kShortLanes interleaved chains per sum (see kShortLanes), added pairwise.
// The chains are indexed by compile-time constants only: a run-time index into them (a tail loop adding into
// chain j) kept them in memory, each addition a store-to-load round trip.
template <typename T, typename G>
GN_CPU_INLINE void short_channel_sums(const T* x, const G* g, int64_t len, compute_t<T> m, compute_t<T>& sd,
                                      compute_t<T>& sb, compute_t<T>& sm) {
  using C = compute_t<T>;
  C vd[kShortLanes] = {}, vb[kShortLanes] = {}, vm[kShortLanes] = {};
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<G, float>) {
    using V = Vectorized<C>;
    if (len >= V::size()) {
      auto add = [](const V& u, const V& v) { return u + v; };
      const V d = V::loadu(x) - V(m), gv = V::loadu(g);
      vd[0] = at::vec::vec_reduce_all<C>(add, gv * d);
      vb[0] = at::vec::vec_reduce_all<C>(add, gv);
      vm[0] = at::vec::vec_reduce_all<C>(add, d);
      i = V::size();
    }
  }
  for (; i + kShortLanes <= len; i += kShortLanes) {
    for (int j = 0; j < kShortLanes; ++j) {
      const C d = static_cast<C>(x[i + j]) - m, gz = static_cast<C>(g[i + j]);
      vd[j] += gz * d;
      vb[j] += gz;
      vm[j] += d;
    }
  }
  C td = 0, tb = 0, tm = 0;  // the last < kShortLanes elements (a chain of their own: the lanes stay registers)
  for (; i < len; ++i) {
    const C d = static_cast<C>(x[i]) - m, gz = static_cast<C>(g[i]);
    td += gz * d;
    tb += gz;
    tm += d;
  }
  sd = add_lanes(vd) + td;
  sb = add_lanes(vb) + tb;
  sm = add_lanes(vm) + tm;
}

// The two above with the short-channel case inlined into the caller's loop (see above): an out-of-line call
// per channel of one to a few elements cost more than the channel's arithmetic ((64, 64) G4 and (256, 64) G8
// float32 forward + backward 1.6-2.5x PyTorch's with the calls).
// dz_out (with an activation; may be null): where the channel's dz are kept for channel_grad_input, len elements
// and a pack of room past them.
template <typename T, bool kAct>
GN_CPU_INLINE void channel_sums(const T* x, const T* dy, int64_t len, compute_t<T> m, compute_t<T> a,
                                compute_t<T> bias, const gn_act::Params& act, ChannelSums& out,
                                compute_t<T>* dz_out = nullptr) {
  using C = compute_t<T>;
  if (len < Pack<T>::kWidth) {
    C sd = 0, sb = 0, sm = 0;
    if constexpr (kAct) {
      // With an activation too: its derivative element by element (one branch on its kind per channel). A masked
      // pack evaluated it on all kWidth lanes for len of them: (8, 1024) G4 + SiLU forward + backward took 7.4x
      // PyTorch's time, + Mish 16x.
      gn_act::with_kind(act.kind, [&](auto kind) {
        constexpr int K = decltype(kind)::value;
        for (int64_t i = 0; i < len; ++i) {
          const C d = static_cast<C>(x[i]) - m;
          const C g = static_cast<C>(dy[i]) * gn_act::derivative_as<K>(act, d * a + bias);
          if (dz_out != nullptr) dz_out[i] = g;
          sd += g * d;
          sb += g;
          sm += d;
        }
      });
    } else {
      short_channel_sums(x, dy, len, m, sd, sb, sm);
    }
    out.ds += static_cast<double>(sd);
    out.db += static_cast<double>(sb);
    out.dm += static_cast<double>(sm);
    return;
  }
  channel_sums_vectors<T, kAct>(x, dy, len, m, a, bias, act, out, dz_out);
}

// dz_in (with an activation; may be null): the channel's dz as channel_sums kept them.
template <typename T, bool kAct>
GN_CPU_INLINE void channel_grad_input(const T* x, const T* dy, T* dx, int64_t len, compute_t<T> m, compute_t<T> a,
                                      compute_t<T> bias, compute_t<T> cx, compute_t<T> c1,
                                      const gn_act::Params& act, bool stream, const compute_t<T>* dz_in = nullptr) {
  using C = compute_t<T>;
  if (len < Pack<T>::kWidth) {
    if (kAct && dz_in != nullptr) {
      for (int64_t i = 0; i < len; ++i)
        dx[i] = static_cast<T>(a * dz_in[i] + (cx * (static_cast<C>(x[i]) - m) + c1));
    } else if constexpr (kAct) {
      gn_act::with_kind(act.kind, [&](auto kind) {
        constexpr int K = decltype(kind)::value;
        for (int64_t i = 0; i < len; ++i) {
          const C d = static_cast<C>(x[i]) - m;
          const C g = static_cast<C>(dy[i]) * gn_act::derivative_as<K>(act, d * a + bias);
          dx[i] = static_cast<T>(a * g + (cx * d + c1));
        }
      });
    } else {
      for (int64_t i = 0; i < len; ++i)
        dx[i] = static_cast<T>(a * static_cast<C>(dy[i]) + (cx * (static_cast<C>(x[i]) - m) + c1));
    }
    return;
  }
  channel_grad_input_vectors<T, kAct>(x, dy, dx, len, m, a, bias, cx, c1, act, stream, dz_in);
}

// The coefficients of one (n, g) from its channels' sums (cpg of them), and the per-channel sums handed back
// for the parameter gradients: ds_out[cl] = (ds - delta * db) * rstd (about the exact mean, the weight gradient's
// term of this sample), db_out[cl] = db.
struct GroupCoefficients {
  double delta, coef_x, coef_1;
};

// The coefficients of dx = a dz + coef_x (x - m) + coef_1 for a group of D elements (inv_d = 1 / D), from
// S = sum w dz (x - mean) about the exact mean, B = sum w dz, delta = the exact mean - the saved mean m, r = rstd.
inline GroupCoefficients coefficients_of(double S, double B, double delta, double r, double inv_d) {
  GroupCoefficients k;
  k.delta = delta;
  k.coef_x = -r * r * r * S * inv_d;
  k.coef_1 = -r * B * inv_d - k.coef_x * delta;
  return k;
}

template <typename W>
inline GroupCoefficients group_coefficients(const ChannelSums* sums, int64_t cpg, int64_t HW, const W* w,
                                            double rstd, double* ds_out, double* db_out) {
  // One pass of three independent sums, each in two chains: dm, S0 = sum w ds and B = sum w db; then
  // S = sum w (ds - delta db) = S0 - delta B. (A chain over dm, the division, then a chain over S that waited on it
  // was a third of the channels-last backward of samples of 6 rows: perf at (32,128,3,2) float32.)
  const double inv_d = 1.0 / static_cast<double>(cpg * HW);
  double dm0 = 0, dm1 = 0, s0 = 0, s1 = 0, b0 = 0, b1 = 0;
  int64_t cl = 0;
  for (; cl + 2 <= cpg; cl += 2) {
    const double w0 = w ? static_cast<double>(w[cl]) : 1.0, w1 = w ? static_cast<double>(w[cl + 1]) : 1.0;
    dm0 += sums[cl].dm;
    dm1 += sums[cl + 1].dm;
    s0 += w0 * sums[cl].ds;
    s1 += w1 * sums[cl + 1].ds;
    b0 += w0 * sums[cl].db;
    b1 += w1 * sums[cl + 1].db;
  }
  if (cl < cpg) {
    const double w0 = w ? static_cast<double>(w[cl]) : 1.0;
    dm0 += sums[cl].dm;
    s0 += w0 * sums[cl].ds;
    b0 += w0 * sums[cl].db;
  }
  const double delta = (dm0 + dm1) * inv_d, B = b0 + b1, S = (s0 + s1) - delta * B;
  for (cl = 0; cl < cpg; ++cl) {
    ds_out[cl] = (sums[cl].ds - delta * sums[cl].db) * rstd;
    db_out[cl] = sums[cl].db;
  }
  return coefficients_of(S, B, delta, rstd, inv_d);
}

// group_coefficients for a slice whose per-channel sums are already in ds_out / db_out (raw: ds_out gets
// (ds - delta * db) * rstd written back) and dm = the slice's sum of (x - m); the divisions by D as products with
// 1 / D, off the slice's dependent chain. w: the group's weights, or null.
template <typename W>
inline GroupCoefficients coefficients_of_sums(double dm, int64_t cpg, int64_t D, const W* w, double rstd,
                                              double* ds_out, const double* db_out) {
  // S = sum w (ds - delta db) = sum w ds - delta B: the two sums in two chains each, independent of delta, then
  // ds_out in a loop of independent elements (one chain through S waited on each channel's product: ~5 cycles a
  // channel, 4% of the samples of (16,640,32) G32 float32's backward, AVX2).
  const double inv_d = 1.0 / static_cast<double>(D), delta = dm * inv_d;
  double s0 = 0, s1 = 0, b0 = 0, b1 = 0;
  int64_t cl = 0;
  for (; cl + 2 <= cpg; cl += 2) {
    const double w0 = w ? static_cast<double>(w[cl]) : 1.0, w1 = w ? static_cast<double>(w[cl + 1]) : 1.0;
    s0 += w0 * ds_out[cl];
    s1 += w1 * ds_out[cl + 1];
    b0 += w0 * db_out[cl];
    b1 += w1 * db_out[cl + 1];
  }
  if (cl < cpg) {
    const double w0 = w ? static_cast<double>(w[cl]) : 1.0;
    s0 += w0 * ds_out[cl];
    b0 += w0 * db_out[cl];
  }
  const double B = b0 + b1, S = (s0 + s1) - delta * B;
  for (cl = 0; cl < cpg; ++cl) ds_out[cl] = (ds_out[cl] - delta * db_out[cl]) * rstd;
  return coefficients_of(S, B, delta, rstd, inv_d);
}

// Inputs of the backward kernels. x, dy, dx: the input's layout (dx null: not asked for); mean, rstd: (N*G,);
// w, bias: (C,) in the compute type, or null; ds, db: (N, C) per-(n, c) sums written for the parameter gradients
// (ds already times its group's rstd: dw[c] = sum_n ds[n, c], db[c] = sum_n db[n, c]).
template <typename T>
struct BackwardArgs {
  const T* x;
  const T* dy;
  T* dx;
  const compute_t<T>* mean;
  const compute_t<T>* rstd;
  const compute_t<T>* w;
  const compute_t<T>* bias;
  int64_t N, G, channels, HW;
  gn_act::Params act;
  double* ds;
  double* db;
};

// dz = dy * act'(z) for elements [b, e) of one NCHW slice (xs, dys) of channels shorter than a pack, into
// dz[0, e - b): z element by element (element i is in channel i / HW of the group: a = rstd * w[cl], bias[cl]; w,
// bias: the group's, or null), then act' a pack at a time, in place.
template <typename T>
void short_channels_grad_z(const T* xs, const T* dys, int64_t b, int64_t e, int64_t HW, compute_t<T> m,
                           compute_t<T> rstd, const compute_t<T>* w, const compute_t<T>* bias,
                           const gn_act::Params& act, compute_t<T>* dz) {
  using C = compute_t<T>;
  constexpr int64_t W = Pack<T>::kWidth;
  static_assert(Pack<C>::kWidth == W, "dz packs and data packs hold the same elements");
  for (int64_t i = b; i < e;) {
    const int64_t cl = i / HW, ce = std::min(e, (cl + 1) * HW);
    const C a = rstd * (w ? w[cl] : C(1)), bc = bias ? bias[cl] : C(0);
    for (; i < ce; ++i) dz[i - b] = (static_cast<C>(xs[i]) - m) * a + bc;
  }
  with_activation_kind<true>(act, [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    for (int64_t i = b; i < e; i += W) {
      const int64_t cnt = std::min(W, e - i);
      const Pack<T> dy = Pack<T>::load(dys + i, cnt);
      (Pack<C>{dy.lo, dy.hi} * derivative_pack<K>(act, Pack<C>::load(dz + i - b, cnt))).store(dz + i - b, cnt);
    }
  });
}

// Both passes over NCHW slice s of channels shorter than a pack (1 < HW < kWidth), whole (one task per slice), as
// straight-line code: the channels' sums (short_channel_sums) go straight into the ds / db outputs, the group's
// coefficients follow, then dx. dz: D elements of scratch with an activation (its dz computed first, once). Taken by
// float64 data and builds without AVX-512; float32 and 16-bit data on AVX-512 take backward_short_rows_avx512. Through
// the general per-item steps (a ChannelSums slot per channel, per-part lambdas, an integer division per channel) the
// per-slice overhead dominated: (64, 64, 4, 4) and (64, 96, 3, 3) G32 float32 backward ~2x PyTorch's.
template <typename T, bool kAct>
void backward_short_slice(const BackwardArgs<T>& p, int64_t s, compute_t<T>* dz) {
  using C = compute_t<T>;
  const int64_t G = p.G, cpg = p.channels / G, HW = p.HW, D = cpg * HW, n = s / G, c0 = (s % G) * cpg;
  const T* xs = p.x + s * D;
  const T* dys = p.dy + s * D;
  const C m = p.mean[s], rstd = p.rstd[s];
  const C* w = p.w ? p.w + c0 : nullptr;
  if constexpr (kAct) short_channels_grad_z(xs, dys, 0, D, HW, m, rstd, w, p.bias ? p.bias + c0 : nullptr, p.act, dz);
  double* ds_out = p.ds + n * p.channels + c0;
  double* db_out = p.db + n * p.channels + c0;
  double dm = 0;
  for (int64_t cl = 0; cl < cpg; ++cl) {
    C sd, sb, sm;
    if constexpr (kAct) short_channel_sums(xs + cl * HW, dz + cl * HW, HW, m, sd, sb, sm);
    else short_channel_sums(xs + cl * HW, dys + cl * HW, HW, m, sd, sb, sm);
    ds_out[cl] = static_cast<double>(sd);
    db_out[cl] = static_cast<double>(sb);
    dm += static_cast<double>(sm);
  }
  const GroupCoefficients k = coefficients_of_sums(dm, cpg, D, w, static_cast<double>(rstd), ds_out, db_out);
  if (!p.dx) return;
  const C cx = static_cast<C>(k.coef_x), c1 = static_cast<C>(k.coef_1);
  T* dxs = p.dx + s * D;
  for (int64_t cl = 0; cl < cpg; ++cl) {
    const C a = rstd * (w ? w[cl] : C(1));
    const int64_t o = cl * HW;
    for (int64_t i = o; i < o + HW; ++i) {
      const C g = kAct ? dz[i] : static_cast<C>(dys[i]);
      dxs[i] = static_cast<T>(a * g + (cx * (static_cast<C>(xs[i]) - m) + c1));
    }
  }
}

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
// dy * act'(z), z = d a + bias, on 16 float lanes (dy itself without an activation).
template <int K>
GN_CPU_INLINE __m512 act_grad_z(const gn_act::Params& act, __m512 dy, __m512 d, __m512 a, __m512 bias) {
  if constexpr (K == gn_act::kNone) {
    (void)act;
    (void)d;
    (void)a;
    (void)bias;
    return dy;
  } else {
    using V = Vectorized<float>;
    const V dz = V(dy) * derivative_vector<K>(act, V(_mm512_fmadd_ps(d, a, bias)));
    return dz;
  }
}

// Slices [s0, s1) of NCHW float32 / bfloat16 / float16 channels of 1 < HW <= kMaxBatchedRow elements, 16
// channels (rows of HW elements: global row r = n * C + c = s * cpg + cl) at a time. Channel by channel, the
// per-channel sums of a few elements left most of each vector's lanes idle and cost a horizontal reduction per sum
// per channel: (64, 64, 4, 4) G32 backward 1.6x PyTorch's kernel time, (64, 96, 3, 3) 1.6x; and for channels of a
// few vectors the three reductions, their conversions to double and the slice's coefficients still outweighed the
// channel's own loads: (16, 32, 48) G32 1.7-1.9x, (160, 32, 48) 2.0x, (2, 320, 2, 5, 5) G32 1.5x (bfloat16 1.9x),
// operator against operator, 2-core AVX-512 machine. Here:
//   sums  each channel's HW elements are one masked load (two for HW > 16; for longer rows, whole vectors then a
//         masked one, summed in the channel's lanes) of x and of dy, d = x - m and dy * d formed in its lanes, and
//         the three sums of 16 channels come out of one shuffle tree each (fold_pair, fold_eight), 16 at a time
//         into ds / db. (Gathering element j of 16 channels per step instead: 1.57x PyTorch's time at
//         (64, 64, 4, 4), the gathers' loads the bound.) With an activation K, dz = dy act'(z) takes dy's place,
//         formed per lane with the row's channel's scale and bias and kept in dz_kept (the rows from r0 on, laid
//         out as the data) for dx. Channel by channel (slice by slice below 32 elements), (16, 32, 48) G32 float32
//         backward with SiLU, tanh, sigmoid or ReLU took 0.96-1.12x PyTorch's activation backward then GroupNorm
//         backward, (64, 64, 4, 4) with SiLU 1.03-1.05x; this way 0.62-0.86x and 0.79-0.80x (Xeon host of an H200
//         machine, 2 threads, builds alternated).
//   coefficients  per slice, in double (coefficients_of_sums, as backward_short_slice).
//   dx    rows shorter than 32: the 16 channels' 16 * HW elements are contiguous: each vector of them takes its
//         lanes' per-channel constants from 16-entry tables by one permute each (row_of: lane l of vector k is in
//         channel (16 k + l) / HW of the block, tabled once per task). Longer rows: row by row, the constants
//         broadcast.
// sm: s1 * cpg - s0 * cpg floats of scratch; cx, c1: s1 - s0 floats each.
// Rows longer than kMaxBatchedRow go the general way: its per-channel reductions matter less there, and its loop
// keeps more sums in flight than one chain per row (operator alone, builds alternated, 2 threads: float32 rows of
// 128 13-17.5 us against 17.3-17.5, 256 29-37 against 36-38, bfloat16 320 35.5-37 against 48-64; float32 400
// 84-94 against 84-86 and 512 34 against 29.5-31 lost).
enum class ShortRows { kOneVector, kTwoVectors, kLong };  // HW <= 16, HW < 32, 32 <= HW <= kMaxBatchedRow
constexpr int64_t kMaxBatchedRow = 320;
template <typename T, ShortRows kRows, int K = gn_act::kNone>
void backward_short_rows_avx512(const BackwardArgs<T>& p, int64_t s0, int64_t s1, const __m512i* row_of,
                                float* sm, float* cx, float* c1, float* dz_kept = nullptr) {
  static_assert(std::is_same_v<compute_t<T>, float>, "float32 or 16-bit data");
  const int64_t G = p.G, C = p.channels, cpg = C / G, HW = p.HW, D = cpg * HW;
  // The arguments in locals: through p, every store to ds / db made the compiler load them again.
  const T* x = p.x;
  const T* dy = p.dy;
  T* dx = p.dx;
  const float* mean = p.mean;
  const float* rstd_of = p.rstd;
  const float* w = p.w;
  double* ds_out = p.ds;
  double* db_out = p.db;
  const int64_t r0 = s0 * cpg, r1 = s1 * cpg;
  const __m512 zero = _mm512_setzero_ps();
  // the lanes of a channel's (first) vector, and of its second
  const __mmask16 first_mask = first_lanes(HW), second_mask = first_lanes(HW - 16);
  int64_t slice_of[16], channel_of[16];  // 64-bit: N * G may pass 2^31 slices
  // The slice and channel of each of the 16 rows from r (lanes past r1 repeat the last row).
  auto lanes_of = [&](int64_t r, int64_t count) {
    int64_t s = r / cpg, cl = r - s * cpg;
    for (int l = 0; l < 16; ++l) {
      slice_of[l] = s;
      channel_of[l] = (s % G) * cpg + cl;
      if (l + 1 < count && ++cl == cpg) {
        cl = 0;
        ++s;
      }
    }
  };
  // Row i of the block at r: its dy * d, dy and d as vectors (zeros past the block's count rows).
  auto row_terms = [&](int64_t r, int i, int64_t count, __m512& gd, __m512& g, __m512& d) {
    if (i >= count) {
      gd = g = d = zero;
      return;
    }
    const __m512 m = _mm512_set1_ps(mean[slice_of[i]]);
    const T* xr = x + (r + i) * HW;
    const T* gr = dy + (r + i) * HW;
    // With an activation, dz = dy act'(z) replaces dy, z = (x - m) a + bias with the row's channel's a and bias;
    // the row's dz are kept for dx (dz_kept: the rows from r0 on, HW floats each, laid out as the data).
    // (Lanes past the row: dy = 0 and d = 0, so dz = 0 * act'(bias) = 0 there.)
    const int64_t ch = channel_of[i];
    const __m512 va = _mm512_set1_ps(K != gn_act::kNone ? rstd_of[slice_of[i]] * (w ? w[ch] : 1.0f) : 0.0f);
    const __m512 vbias = _mm512_set1_ps(K != gn_act::kNone && p.bias ? p.bias[ch] : 0.0f);
    float* const keep = K != gn_act::kNone ? dz_kept + (r + i - r0) * HW : nullptr;
    auto grad_z = [&](__m512 dyv, __m512 dv, int64_t at, __mmask16 lanes) {
      const __m512 dz = act_grad_z<K>(p.act, dyv, dv, va, vbias);
      if constexpr (K != gn_act::kNone) _mm512_mask_storeu_ps(keep + at, lanes, dz);
      return dz;
    };
    if constexpr (kRows == ShortRows::kLong) {
      d = _mm512_sub_ps(load16(xr, 0xffff), m);
      g = grad_z(load16(gr, 0xffff), d, 0, 0xffff);
      gd = _mm512_mul_ps(g, d);
      int64_t j = 16;
      for (; j + 16 <= HW; j += 16) {
        const __m512 dj = _mm512_sub_ps(load16(xr + j, 0xffff), m);
        const __m512 gj = grad_z(load16(gr + j, 0xffff), dj, j, 0xffff);
        gd = _mm512_fmadd_ps(gj, dj, gd);
        g = _mm512_add_ps(g, gj);
        d = _mm512_add_ps(d, dj);
      }
      if (j < HW) {
        const __mmask16 tail = first_lanes(HW - j);
        const __m512 dj = _mm512_maskz_sub_ps(tail, load16(xr + j, tail), m);
        const __m512 gj = grad_z(load16(gr + j, tail), dj, j, tail);
        gd = _mm512_fmadd_ps(gj, dj, gd);
        g = _mm512_add_ps(g, gj);
        d = _mm512_add_ps(d, dj);
      }
      return;
    }
    d = _mm512_maskz_sub_ps(first_mask, load16(xr, first_mask), m);
    g = grad_z(load16(gr, first_mask), d, 0, first_mask);
    gd = _mm512_mul_ps(g, d);
    if constexpr (kRows == ShortRows::kTwoVectors) {
      const __m512 d2 = _mm512_maskz_sub_ps(second_mask, load16(xr + 16, second_mask), m);
      const __m512 g2 = grad_z(load16(gr + 16, second_mask), d2, 16, second_mask);
      gd = _mm512_fmadd_ps(g2, d2, gd);
      g = _mm512_add_ps(g, g2);
      d = _mm512_add_ps(d, d2);
    }
  };
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t count = std::min<int64_t>(16, r1 - r);
    const __mmask16 mask = first_lanes(count);
    lanes_of(r, count);
    __m512 fd[8], fb[8], fx[8];
    for (int i = 0; i < 8; ++i) {
      __m512 gd0, g0, d0, gd1, g1, d1;
      row_terms(r, 2 * i, count, gd0, g0, d0);
      row_terms(r, 2 * i + 1, count, gd1, g1, d1);
      fd[i] = fold_pair(gd0, gd1);
      fb[i] = fold_pair(g0, g1);
      fx[i] = fold_pair(d0, d1);
    }
    const __m512 sd = fold_eight(fd), sb = fold_eight(fb), sx = fold_eight(fx);
    store16_as_double(ds_out + r, mask, sd);
    store16_as_double(db_out + r, mask, sb);
    _mm512_mask_storeu_ps(sm + (r - r0), mask, sx);
  }
  // (g: slice s's group, counted rather than s % G: a 64-bit division per slice was 3-4% of the samples of the
  // AVX2 kernel's backward of (512,64,1,2) G32 float16, slices of 4 elements)
  for (int64_t s = s0, g = s0 % G; s < s1; ++s, g = g + 1 == G ? 0 : g + 1) {
    const int64_t rs = s * cpg;
    double dm = 0;
    for (int64_t cl = 0; cl < cpg; ++cl) dm += static_cast<double>(sm[rs - r0 + cl]);
    const GroupCoefficients k = coefficients_of_sums(dm, cpg, D, w ? w + g * cpg : nullptr,
                                                     static_cast<double>(rstd_of[s]), ds_out + rs, db_out + rs);
    cx[s - s0] = static_cast<float>(k.coef_x);
    c1[s - s0] = static_cast<float>(k.coef_1);
  }
  if (!dx) return;
  if constexpr (kRows == ShortRows::kLong) {
    const __mmask16 tail = first_lanes(HW % 16);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t s = r / cpg;
      const __m512 m = _mm512_set1_ps(mean[s]), kx = _mm512_set1_ps(cx[s - s0]), k1 = _mm512_set1_ps(c1[s - s0]);
      const int64_t ch = (s % G) * cpg + (r - s * cpg);
      const __m512 a = _mm512_set1_ps(rstd_of[s] * (w ? w[ch] : 1.0f));
      const T* xr = x + r * HW;
      const T* gr = dy + r * HW;
      T* dxr = dx + r * HW;
      const float* const kept = K != gn_act::kNone ? dz_kept + (r - r0) * HW : nullptr;
      // dz: dy, or the sums pass's kept dz (the derivative is not evaluated twice)
      auto out = [&](__m512 xv, int64_t at, __mmask16 lanes) {
        const __m512 dz = K != gn_act::kNone ? _mm512_maskz_loadu_ps(lanes, kept + at) : load16(gr + at, lanes);
        return _mm512_fmadd_ps(a, dz, _mm512_fmadd_ps(kx, _mm512_sub_ps(xv, m), k1));
      };
      int64_t j = 0;
      for (; j + 16 <= HW; j += 16) store16(dxr + j, 0xffff, out(load16(xr + j, 0xffff), j, 0xffff));
      if (j < HW) store16(dxr + j, tail, out(load16(xr + j, tail), j, tail));
    }
    return;
  }
  __at_align__ float mean_of[16], a_of[16], cx_of[16], c1_of[16];
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t count = std::min<int64_t>(16, r1 - r);
    lanes_of(r, count);
    for (int l = 0; l < 16; ++l) {
      const int64_t s = slice_of[l];
      mean_of[l] = mean[s];
      a_of[l] = rstd_of[s] * (w ? w[channel_of[l]] : 1.0f);
      cx_of[l] = cx[s - s0];
      c1_of[l] = c1[s - s0];
    }
    const __m512 m = _mm512_load_ps(mean_of), a = _mm512_load_ps(a_of);
    const __m512 kx = _mm512_load_ps(cx_of), k1 = _mm512_load_ps(c1_of);
    const T* xb = x + r * HW;
    const T* gb = dy + r * HW;
    T* dxb = dx + r * HW;
    const int64_t elements = count * HW;
    for (int64_t k = 0; 16 * k < elements; ++k) {
      const __mmask16 mask = first_lanes(elements - 16 * k);
      const __m512i q = row_of[k];
      const __m512 xv = load16(xb + 16 * k, mask);
      const __m512 g = K != gn_act::kNone ? _mm512_maskz_loadu_ps(mask, dz_kept + (r - r0) * HW + 16 * k)
                                          : load16(gb + 16 * k, mask);
      const __m512 lin = _mm512_fmadd_ps(_mm512_permutexvar_ps(q, kx),
                                         _mm512_sub_ps(xv, _mm512_permutexvar_ps(q, m)), _mm512_permutexvar_ps(q, k1));
      store16(dxb + 16 * k, mask, _mm512_fmadd_ps(_mm512_permutexvar_ps(q, a), g, lin));
    }
  }
}
#endif

#if defined(CPU_CAPABILITY_AVX2) && defined(__AVX2__) && defined(__FMA__)
// AVX2 builds (no AVX-512: most laptops, AMD Zen 1-3), float32, bfloat16 and float16 data without an activation:
// NCHW slices whose channels hold kMinRowAvx2 to kMaxRowAvx2 elements (1 to 8 vectors), whole. Through the
// per-channel steps (channel_sums, then channel_grad_input: three 16-lane reductions and two out-of-line calls per
// channel) a channel of 16 elements cost ~130 instructions of sums and ~120 of dx: (64,512,4,4) G32 float32
// backward 9.3 M instructions per call against PyTorch's 4.7 M, 1.6x its time at one thread (2-core AMD EPYC
// without AVX-512); 16-bit channels also paid at::vec's counted load and store of each channel's partial pack out
// of line: (16,640,34) G32 bfloat16 backward 2.1x PyTorch's time at 2 threads, (16,640,32) 1.24x.
// Here, per chunk of slices:
//   sums  each channel's elements in 8-lane float accumulators (d = x - m, dy * d, dy; the last HW % 8 masked),
//         two channels at a time, and 8 channels' three sums (of one slice or several) out of one hadd tree each
//         (sums_of_eight) into ds / db; blocks of 8 within a slice left groups of 2 channels ((64,64,8,8) G32)
//         1.06-1.09x PyTorch's, the tree on 6 empty channels;
//   dx    slice by slice over its D contiguous elements in whole vectors: where HW is a whole number of vectors,
//         channel by channel with rstd * w[c] broadcast; else the per-element rstd * w[c] from a scratch row
//         filled channel by channel with broadcasts (each channel's last vector spills into the next channel's
//         elements, which that channel then overwrites), so no store is masked (a masked store is microcoded on
//         AMD). float32: non-temporal stores where the output is large, as Pack::store_stream.
// Shorter channels keep backward_short_slice (scalar chains and one vector: the 8-channel tree and masked loads
// gained nothing below 8 elements, 1 thread, 2-core AMD EPYC). Channels of exactly one vector (8) come here: on
// backward_short_slice (64,64,2,4) G32 bfloat16 took 1.29-1.51x PyTorch's kernel time, (32,64,2,4) G32 float32
// 1.6x, here 0.70-0.75x and 0.96-1.01x (one thread, the kernels alone). Longer channels take the per-channel
// path, where the three reductions are a small share of a channel and its two 16-lane chains per sum stream
// faster (float32 HW 128-320 ran 0.80-0.90x PyTorch's that way, 0.92-0.97x here). 16-bit channels up to
// kMaxRowAvx2Half: the per-channel path paid its out-of-line counted loads and stores there too (bfloat16
// backward, 2 threads, 2-core AMD EPYC: HW 80, 100, 225 at 1.11x, 1.30x, 1.14x PyTorch's time that way, 0.99-1.02x
// here; from 400 on, equal either way at the time). Since the grad_input loop of the per-channel path was made
// to keep its constants in registers, 16-bit channels of 306 to 16384 elements still ran faster here (one thread,
// kernels alone, (16,64,HW) G16 bfloat16: HW 306-1024 1.01-1.22x PyTorch's time per channel -> 0.75-0.96x here,
// 2304-16384 0.91-0.97x -> 0.76-0.82x; float16 0.22-0.28x -> 0.18-0.25x), so they come here up to
// kMaxRowAvx2Half = 4096: each lane of a channel's float accumulators then adds at most 512 values (the
// per-channel path folds into double every kBlock elements). With an activation the bound stays at the 256
// measured before (kMaxRowAvx2HalfAct; the longer channels with one are not measured here).
// a_row: D + 8 floats of scratch (4 ((s1 - s0) D + 8) for slices shorter than kMaxFlatSlice); stream: dx stored
// non-temporally, never a line partly (stream_fence after).
// 16-bit channels shorter than a vector come here too, from kMinRowAvx2BFloat16 / kMinRowAvx2Float16 elements:
// backward_short_slice converts them element by element, which PyTorch's kernel does not (one thread, kernels
// alone, (64,64,HW) G32 against PyTorch's, short_slice -> here: bfloat16 HW 3 1.09-1.13x -> 1.01-1.06x, HW 4-7
// 0.98-1.29x -> 0.73-0.88x; float16 HW 3-7 1.42-1.59x -> 0.74-1.07x, HW 2 1.47-1.71x -> 1.15-1.17x; bfloat16 HW 2
// 1.08-1.13x -> 1.21x at first; 1.00-1.05x with the flat dx pass below, so bfloat16 HW 2 comes here too, where
// short_slice took 1.16-1.27x PyTorch's time). float32 shorter than a vector measured the same either way
// (PyTorch's own kernel is scalar there: ours 0.2-0.45x its time) and stays on backward_short_slice.
// Slices shorter than kMaxFlatSlice whose channels are not whole vectors take dx in one flat pass over the chunk:
// each element's constants (a = rstd w[c], m, cx, c1) first spread into four rows by broadcast stores (each
// store's lanes past its channel or slice overwritten by the next one's), then 8 elements a step across slice
// boundaries. Slice by slice, such a slice was a vector or none and a scalar tail of D % 8 elements. One thread,
// kernels alone, both ways alternated call by call in one process, ours / PyTorch's time: (512,64,1,2) G32
// float16 1.15x -> 1.10x, (512,64,1,3) G32 float16 1.03x -> 0.93x, bfloat16 1.03x -> 0.88x, (256,64,1,5) G32
// bfloat16 0.73x -> 0.67x; longer slices lost ((64,64,9) G16 float32, D 36: 0.88x -> 0.96x; (32,64,17) G16
// bfloat16 0.82x -> 0.93x), and (64,64,3,3) G32 float16 (D 18) was equal.
constexpr int64_t kMinRowAvx2 = 8, kMaxRowAvx2 = 64, kMaxRowAvx2Half = 4096, kMaxRowAvx2HalfAct = 256;
constexpr int64_t kMinRowAvx2BFloat16 = 2, kMinRowAvx2Float16 = 2;
constexpr int64_t kMaxFlatSlice = 16;
template <typename T>
constexpr int64_t min_row_avx2() {
  if constexpr (std::is_same_v<T, c10::BFloat16>) return kMinRowAvx2BFloat16;
  else if constexpr (std::is_same_v<T, c10::Half>) return kMinRowAvx2Float16;
  else return kMinRowAvx2;
}
// Asks for the line kAheadBytes past p (the first pass over a chunk reads x and dy ahead of use: ~250 cycles of
// memory latency at ~4 cycles a line of work; a hint, never faults).
constexpr int64_t kAheadBytes = 4096;
template <typename T>
GN_CPU_INLINE void prefetch_ahead(const T* p) {
  __builtin_prefetch(reinterpret_cast<const char*>(p) + kAheadBytes, 0, 3);
}

// Lane j of the result: the sum of the 8 lanes of v[j].
GN_CPU_INLINE __m256 sums_of_eight(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // per 128-bit half: channels 0-3, 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// 8 consecutive elements as floats (16-bit data: exact), and 8 floats stored as T (rounded to nearest even, NaN
// kept a NaN, as c10's conversions).
GN_CPU_INLINE __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
GN_CPU_INLINE __m256 load8(const c10::BFloat16* p) {  // the bits, 16 places up
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
GN_CPU_INLINE __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
GN_CPU_INLINE void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
GN_CPU_INLINE void store8(c10::BFloat16* p, __m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
GN_CPU_INLINE void store8(c10::Half* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// The 8 elements at p whose lanes are set in `lanes` (the first of them), as floats, the others 0. `past_ok`: the 8
// elements from p lie inside the tensor (a row that is not the tensor's last: its partial vector reads into the
// next row, then masked), else only the lanes' elements are read. float32: a masked load either way.
template <typename T>
GN_CPU_INLINE __m256 load8_first(const T* p, __m256i lanes, int64_t count, bool past_ok) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_maskload_ps(p, lanes);
  } else {
    if (past_ok) return _mm256_and_ps(load8(p), _mm256_castsi256_ps(lanes));
    __at_align__ T buf[8] = {};
    for (int64_t j = 0; j < count; ++j) buf[j] = p[j];
    return load8(buf);
  }
}

// Slices [s0, s1) (a chunk that stays in L1 between the passes). Rows r = s * cpg + cl of the chunk are the
// input's (n, c) = (r / C, r % C), so their sums land at p.ds + r, p.db + r, and blocks of 8 rows run across slice
// boundaries (groups of fewer than 8 channels fill whole blocks). sm: (s1 - s0) * cpg doubles of scratch.
// With an activation K: dz = dy * act'(z) of the chunk's slices first, into dz_rows ((s1 - s0) * D + 8 floats), each
// slice a vector at a time over its D elements with each element's scale and bias from rows filled channel by
// channel as a_row below (b_row: D + 8 floats); the two passes then read dz where they read dy (the GroupNorm
// backward of dz). Channel by channel through the general path, each channel of 32 paid a dispatch, the
// derivative's constants and three reductions: (16,640,32) G32 float32 backward + SiLU 1.42x PyTorch's SiLU
// backward then GroupNorm backward, (16,640,34) 1.54x (2 threads, AVX2).
template <typename T, int K = gn_act::kNone>
void backward_short_rows_avx2(const BackwardArgs<T>& p, int64_t s0, int64_t s1, double* sm_rows, float* a_row,
                              bool stream, float* b_row = nullptr, float* dz_rows = nullptr) {
  const int64_t G = p.G, cpg = p.channels / G, HW = p.HW, D = cpg * HW;
  const int64_t r0 = s0 * cpg, r1 = s1 * cpg, rows = p.N * p.channels;
  const __m256 zero = _mm256_setzero_ps();
  // The gradient the passes read: dy, or dz in float (rows from r0 on).
  using G_t = std::conditional_t<K == gn_act::kNone, T, float>;
  const G_t* grad = nullptr;
  if constexpr (K == gn_act::kNone) {
    grad = p.dy + r0 * HW;
  } else {
    using V = Vectorized<float>;
    for (int64_t s = s0, g = s0 % G; s < s1; ++s, g = g + 1 == G ? 0 : g + 1) {
      const int64_t c0 = g * cpg;
      const float rstd = p.rstd[s];
      const __m256 vm = _mm256_set1_ps(p.mean[s]);
      const T* xs = p.x + s * D;
      const T* dys = p.dy + s * D;
      float* const dzs = dz_rows + (s - s0) * D;
      // dz of the 8 elements x, dy whose rstd * w[c] and bias[c] are va, vb
      auto dz_of = [&](__m256 x, __m256 dy, __m256 va, __m256 vb) {
        const V z(_mm256_fmadd_ps(_mm256_sub_ps(x, vm), va, vb));
        return _mm256_mul_ps(dy, derivative_vector<K>(p.act, z));
      };
      if (HW % 8 == 0) {  // whole vectors per channel: the channel's constants broadcast once, no scratch rows
        for (int64_t cl = 0; cl < cpg; ++cl) {
          const __m256 va = _mm256_set1_ps(rstd * (p.w ? p.w[c0 + cl] : 1.0f));
          const __m256 vb = _mm256_set1_ps(p.bias ? p.bias[c0 + cl] : 0.0f);
          for (int64_t i = cl * HW; i < (cl + 1) * HW; i += 8) {
            prefetch_ahead(xs + i);
            prefetch_ahead(dys + i);
            _mm256_storeu_ps(dzs + i, dz_of(load8(xs + i), load8(dys + i), va, vb));
          }
        }
        continue;
      }
      for (int64_t cl = 0; cl < cpg; ++cl) {
        const __m256 va = _mm256_set1_ps(rstd * (p.w ? p.w[c0 + cl] : 1.0f));
        const __m256 vb = _mm256_set1_ps(p.bias ? p.bias[c0 + cl] : 0.0f);
        for (int64_t i = cl * HW; i < (cl + 1) * HW; i += 8) {
          _mm256_storeu_ps(a_row + i, va);
          _mm256_storeu_ps(b_row + i, vb);
        }
      }
      int64_t i = 0;
      for (; i + 8 <= D; i += 8) {
        prefetch_ahead(xs + i);
        prefetch_ahead(dys + i);
        _mm256_storeu_ps(dzs + i, dz_of(load8(xs + i), load8(dys + i), _mm256_loadu_ps(a_row + i),
                                        _mm256_loadu_ps(b_row + i)));
      }
      if (i < D) {  // the slice's last D % 8 elements, through buffers (a_row and b_row hold 8 past D)
        __at_align__ float xb[8] = {}, gb[8] = {}, zb[8];
        for (int64_t j = i; j < D; ++j) {
          xb[j - i] = static_cast<float>(xs[j]);
          gb[j - i] = static_cast<float>(dys[j]);
        }
        _mm256_store_ps(zb, dz_of(_mm256_load_ps(xb), _mm256_load_ps(gb), _mm256_loadu_ps(a_row + i),
                                  _mm256_loadu_ps(b_row + i)));
        for (int64_t j = i; j < D; ++j) dzs[j] = zb[j - i];
      }
    }
    grad = dz_rows;
  }
  const int64_t whole = HW / 8 * 8;
  const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(HW - whole)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t rb = r0; rb < r1; rb += 8) {
    __m256 sd[8], sb[8], sm[8];
    // Rows two at a time, one chain per sum each (the two rows' chains are independent: a channel of 64 is 8
    // dependent additions of ~3-5 cycles otherwise). Rows of different slices have different means. A block's
    // row past r1 repeats its partner's reads and is zeroed after. (Two chains of one row a time held 6
    // accumulators and 4 operands at once: gcc spilled two accumulators to the stack, and each iteration waited
    // on a store-to-load forward: (16,640,32) G32 float32 backward 1.2-1.3x PyTorch's time, 1-2 threads.)
    // sum (x - m) on the multiply-add units (e * 1 + acc: exact as an addition): AMD Zen 1-2 add on two pipes and
    // multiply-add on two others, and the subtraction and two sums otherwise all went to the adders.
    int64_t sa = rb / cpg, cla = rb - sa * cpg;  // row ra's slice and channel in it (no division per row)
    for (int j = 0; j < 8; j += 2) {
      const int64_t ra = rb + j, rc = std::min(rb + j + 1, r1 - 1);
      if (ra >= r1) {
        sd[j] = sb[j] = sm[j] = sd[j + 1] = sb[j + 1] = sm[j + 1] = zero;
        continue;
      }
      const __m256 vma = _mm256_set1_ps(p.mean[sa]);
      const __m256 vmc = _mm256_set1_ps(p.mean[rc == ra || cla + 1 < cpg ? sa : sa + 1]);
      for (cla += 2; cla >= cpg; cla -= cpg) ++sa;
      const T* xa = p.x + ra * HW;
      const T* xc = p.x + rc * HW;
      const G_t* ga = grad + (ra - r0) * HW;
      const G_t* gc = grad + (rc - r0) * HW;
      __m256 da = zero, ba = zero, ma = zero, dc = zero, bc = zero, mc = zero;
      // the two rows' centred values e and gradients g added into their sums
      auto accumulate = [&](__m256 ea, __m256 gva, __m256 ec, __m256 gvc) {
        da = _mm256_fmadd_ps(gva, ea, da);
        ba = _mm256_add_ps(ba, gva);
        ma = _mm256_fmadd_ps(ea, one, ma);
        dc = _mm256_fmadd_ps(gvc, ec, dc);
        bc = _mm256_add_ps(bc, gvc);
        mc = _mm256_fmadd_ps(ec, one, mc);
      };
      int64_t i = 0;
      for (; i < whole; i += 8) {
        // The rows' bytes kAheadBytes on (the pair's span, a line an iteration for float32): the two passes over
        // a chunk interleave reads from memory with reads from L1, and the hardware's streams alone left each
        // iteration waiting on its loads (perf: a quarter of the kernel's samples at one load, (16,640,64) G32).
        // (With an activation the dz pass read them: prefetched there.)
        if constexpr (K == gn_act::kNone) {
          prefetch_ahead(xa + 2 * i);
          prefetch_ahead(ga + 2 * i);
        }
        accumulate(_mm256_sub_ps(load8(xa + i), vma), load8(ga + i), _mm256_sub_ps(load8(xc + i), vmc), load8(gc + i));
      }
      if (i < HW) {  // masked lanes load as 0: d there is -m, so it is masked again
        // (i + 8 <= 2 HW: the next row holds the lanes past this one; dz in float is read masked either way)
        const __m256 keep = _mm256_castsi256_ps(tail);
        const __m256 ea = _mm256_and_ps(_mm256_sub_ps(load8_first(xa + i, tail, HW - i, ra + 1 < rows), vma), keep);
        const __m256 gva = load8_first(ga + i, tail, HW - i, ra + 1 < rows);
        const __m256 ec = _mm256_and_ps(_mm256_sub_ps(load8_first(xc + i, tail, HW - i, rc + 1 < rows), vmc), keep);
        accumulate(ea, gva, ec, load8_first(gc + i, tail, HW - i, rc + 1 < rows));
      }
      sd[j] = da;
      sb[j] = ba;
      sm[j] = ma;
      const bool second = rb + j + 1 < r1;
      sd[j + 1] = second ? dc : zero;
      sb[j + 1] = second ? bc : zero;
      sm[j + 1] = second ? mc : zero;
    }
    const __m256 rd = sums_of_eight(sd), rb8 = sums_of_eight(sb), rm = sums_of_eight(sm);
    if (rb + 8 <= r1) {
      auto store8_double = [](double* out, __m256 v) {
        _mm256_storeu_pd(out, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        _mm256_storeu_pd(out + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
      };
      store8_double(p.ds + rb, rd);
      store8_double(p.db + rb, rb8);
      store8_double(sm_rows + (rb - r0), rm);
    } else {
      __at_align__ float d8[8], b8[8], m8[8];
      _mm256_store_ps(d8, rd);
      _mm256_store_ps(b8, rb8);
      _mm256_store_ps(m8, rm);
      for (int64_t j = 0; rb + j < r1; ++j) {
        p.ds[rb + j] = static_cast<double>(d8[j]);
        p.db[rb + j] = static_cast<double>(b8[j]);
        sm_rows[rb + j - r0] = static_cast<double>(m8[j]);
      }
    }
  }
  // dx of short slices whose channels are not whole vectors in one flat pass over the chunk (see kMaxFlatSlice):
  // a_row then holds four rows of the chunk's (s1 - s0) * D + 8 floats, each element's a, m, cx and c1
  const bool flat = p.dx != nullptr && HW != whole && D < kMaxFlatSlice;
  float* const m_row = a_row + (s1 - s0) * D + 8;
  float* const cx_row = m_row + (s1 - s0) * D + 8;
  float* const c1_row = cx_row + (s1 - s0) * D + 8;
  for (int64_t s = s0, g = s0 % G; s < s1; ++s, g = g + 1 == G ? 0 : g + 1) {  // (g counted: as the AVX-512 kernel)
    const int64_t c0 = g * cpg;
    const float* w = p.w ? p.w + c0 : nullptr;
    const float m = p.mean[s], rstd = p.rstd[s];
    const double* sm_slice = sm_rows + (s - s0) * cpg;
    double dm0 = 0, dm1 = 0;
    int64_t cl = 0;
    for (; cl + 2 <= cpg; cl += 2) {
      dm0 += sm_slice[cl];
      dm1 += sm_slice[cl + 1];
    }
    if (cl < cpg) dm0 += sm_slice[cl];
    const GroupCoefficients k =
        coefficients_of_sums(dm0 + dm1, cpg, D, w, static_cast<double>(rstd), p.ds + s * cpg, p.db + s * cpg);
    if (!p.dx) continue;
    const float cx = static_cast<float>(k.coef_x), c1 = static_cast<float>(k.coef_1);
    const __m256 vm = _mm256_set1_ps(m), vcx = _mm256_set1_ps(cx), vc1 = _mm256_set1_ps(c1);
    if (flat) {  // the slice's constants into the chunk's rows (each store's lanes past the slice or channel
                 // are overwritten by the next one's, the last slice's land in the rows' 8 floats of padding)
      const int64_t o = (s - s0) * D;
      for (int64_t i = 0; i < D; i += 8) {
        _mm256_storeu_ps(m_row + o + i, vm);
        _mm256_storeu_ps(cx_row + o + i, vcx);
        _mm256_storeu_ps(c1_row + o + i, vc1);
      }
      for (cl = 0; cl < cpg; ++cl) {
        const __m256 va = _mm256_set1_ps(rstd * (w ? w[cl] : 1.0f));
        for (int64_t i = cl * HW; i < (cl + 1) * HW; i += 8) _mm256_storeu_ps(a_row + o + i, va);
      }
      continue;
    }
    const T* xs = p.x + s * D;
    const G_t* dys = grad + (s - s0) * D;
    T* const dxs = p.dx + s * D;
    // Vectors streamed: every one where D % 8 == 0 and the slices are 32-byte aligned (all of the chunk's stores
    // then stream, a line shared by two slices included: (256,64,36) G32, slices of 288 bytes, ran 0.85x PyTorch's
    // time that way and 1.1-1.4x with only each slice's own whole lines streamed); otherwise the whole lines of
    // the slice before its scalar tail, where the slice starts on a line (no line partly streamed).
    const int64_t streamed =
        !stream ? 0
        : (D % 8 == 0 && (reinterpret_cast<uintptr_t>(dxs) & (kStreamAlign - 1)) == 0) ? D
        : streamed_prefix(dxs, D / 8 * 8);
    // dx of the 8 elements from i, whose rstd * w[c] are va
    auto dx_at = [&](int64_t i, __m256 va) {
      const __m256 d = _mm256_sub_ps(load8(xs + i), vm);
      const __m256 out = _mm256_fmadd_ps(va, load8(dys + i), _mm256_fmadd_ps(vcx, d, vc1));
      if constexpr (std::is_same_v<T, float>) {
        if (i + 8 <= streamed) {
          stream_vector(dxs + i, out);
          return;
        }
      }
      store8(dxs + i, out);
    };
    if (HW == whole) {  // whole vectors per channel: rstd * w[c] broadcast once per channel, no scratch row
      for (cl = 0; cl < cpg; ++cl) {
        const __m256 va = _mm256_set1_ps(rstd * (w ? w[cl] : 1.0f));
        for (int64_t i = cl * HW; i < (cl + 1) * HW; i += 8) dx_at(i, va);
      }
      continue;
    }
    for (cl = 0; cl < cpg; ++cl) {
      const __m256 va = _mm256_set1_ps(rstd * (w ? w[cl] : 1.0f));
      float* const row = a_row + cl * HW;
      for (int64_t i = 0; i < HW; i += 8) _mm256_storeu_ps(row + i, va);
    }
    int64_t i = 0;
    for (; i + 8 <= D; i += 8) dx_at(i, _mm256_loadu_ps(a_row + i));
    for (; i < D; ++i) {
      dxs[i] = static_cast<T>(std::fma(a_row[i], static_cast<float>(dys[i]),
                                       std::fma(cx, static_cast<float>(xs[i]) - m, c1)));
    }
  }
  if (flat) {  // the chunk's E contiguous elements, 8 at a time, each with its own constants from the rows
    const int64_t E = (s1 - s0) * D;
    const T* xs = p.x + s0 * D;
    T* const dxs = p.dx + s0 * D;
    const int64_t streamed = stream ? streamed_prefix(dxs, E / 8 * 8) : 0;
    int64_t i = 0;
    for (; i + 8 <= E; i += 8) {
      const __m256 d = _mm256_sub_ps(load8(xs + i), _mm256_loadu_ps(m_row + i));
      const __m256 out = _mm256_fmadd_ps(_mm256_loadu_ps(a_row + i), load8(grad + i),
                                         _mm256_fmadd_ps(_mm256_loadu_ps(cx_row + i), d, _mm256_loadu_ps(c1_row + i)));
      if constexpr (std::is_same_v<T, float>) {
        if (i + 8 <= streamed) {
          stream_vector(dxs + i, out);
          continue;
        }
      }
      store8(dxs + i, out);
    }
    for (; i < E; ++i) {
      dxs[i] = static_cast<T>(std::fma(a_row[i], static_cast<float>(grad[i]),
                                       std::fma(cx_row[i], static_cast<float>(xs[i]) - m_row[i], c1_row[i])));
    }
  }
}
#endif

template <typename T, bool kAct>
void backward_nchw(const BackwardArgs<T>& p) {
  using C = compute_t<T>;
  const int64_t G = p.G, cpg = p.channels / G, HW = p.HW, slices = p.N * G, D = cpg * HW;
  const int64_t parts = split_parts(slices, D, kMinPartElements);
  const int64_t items = slices * parts;
  auto begin_of = [&](int64_t item) { return part_begin(D, parts, item % parts, kPartAlign); };
  auto end_of = [&](int64_t item) { return part_begin(D, parts, item % parts + 1, kPartAlign); };
  auto a_of = [&](int64_t s, int64_t c) { return p.rstd[s] * (p.w ? p.w[c] : C(1)); };
  auto bias_of = [&](int64_t c) { return (p.bias ? p.bias[c] : C(0)); };
  // Channel sums per (item, channel of the group), and each slice's coefficients (sized below, past the
  // one-element-channel path, which needs neither).
  std::vector<ChannelSums> sums;
  std::vector<GroupCoefficients> coefs;
  // Channels shorter than a pack with an activation, in slices cut into parts (whole slices take
  // backward_short_rows_avx512, or backward_short_slice): dz = dy * act'(z) for a run [b, e) of the item is computed
  // into buf first (short_channels_grad_z), in each pass; the channel sums and dx then read dz from buf. Element by
  // element through libm (channel_sums' short case), (16, 256, 2, 2) G32 float32 + tanh forward + backward took 2.5x
  // PyTorch's time, + Mish 3.1x, + ReLU 1.0-1.1x. Runs of at most kShortRun elements (8 KB of dz in float32, on the
  // stack of the task).
  constexpr int64_t kPackWidth = Pack<T>::kWidth;
  constexpr int64_t kShortRun = 64 * kPackWidth;
  static_assert(Pack<C>::kWidth == kPackWidth, "dz packs and data packs hold the same elements");
  const bool short_act = kAct && HW < kPackWidth;
  auto short_grad_z = [&](int64_t s, int64_t b, int64_t e, C* buf) {
    const int64_t c0 = (s % G) * cpg;
    short_channels_grad_z(p.x + s * D, p.dy + s * D, b, e, HW, p.mean[s], p.rstd[s], p.w ? p.w + c0 : nullptr,
                          p.bias ? p.bias + c0 : nullptr, p.act, buf);
  };
  auto short_sums = [&](int64_t it, int64_t b, int64_t e, const C* dz) {
    const int64_t s = it / parts;
    const T* xs = p.x + s * D;
    const C m = p.mean[s];
    for (int64_t i = b; i < e;) {
      const int64_t cl = i / HW, ce = std::min(e, (cl + 1) * HW);
      C sd = 0, sb = 0, sm = 0;
      for (; i < ce; ++i) {
        const C d = static_cast<C>(xs[i]) - m, gz = dz[i - b];
        sd += gz * d;
        sb += gz;
        sm += d;
      }
      ChannelSums& out = sums[it * cpg + cl];
      out.ds += static_cast<double>(sd);
      out.db += static_cast<double>(sb);
      out.dm += static_cast<double>(sm);
    }
  };
  auto short_grad_input = [&](int64_t s, int64_t b, int64_t e, const C* dz) {
    const int64_t c0 = (s % G) * cpg;
    const T* xs = p.x + s * D;
    T* dxs = p.dx + s * D;
    const C m = p.mean[s], cx = static_cast<C>(coefs[s].coef_x), c1 = static_cast<C>(coefs[s].coef_1);
    for (int64_t i = b; i < e;) {
      const int64_t cl = i / HW, ce = std::min(e, (cl + 1) * HW);
      const C a = a_of(s, c0 + cl);
      for (; i < ce; ++i) dxs[i] = static_cast<T>(a * dz[i - b] + (cx * (static_cast<C>(xs[i]) - m) + c1));
    }
  };
  // The short-channel case of one pass over item it: runs [b, e) of at most kShortRun elements, the run's dz
  // computed into buf (kShortRun elements of scratch) before step(b, e, dz) reads it.
  auto for_each_short_run = [&](int64_t it, C* buf, auto step) {
    const int64_t s = it / parts, hi = end_of(it);
    for (int64_t b = begin_of(it); b < hi; b += kShortRun) {
      const int64_t e = std::min(hi, b + kShortRun);
      short_grad_z(s, b, e, buf);
      step(b, e, static_cast<const C*>(buf));
    }
  };
  // slice_dz (whole slices; may be null): where the slice's dz are kept for grad_input_of_item.
  auto sums_of_item = [&](int64_t it, C* buf, C* slice_dz) {
    const int64_t s = it / parts, g = s % G, lo = begin_of(it), hi = end_of(it);
    if (short_act) {
      for_each_short_run(it, buf, [&](int64_t b, int64_t e, const C* dz) { short_sums(it, b, e, dz); });
      return;
    }
    const T* xs = p.x + s * D;
    const T* dys = p.dy + s * D;
    for (int64_t cl = lo / HW; cl * HW < hi; ++cl) {
      const int64_t b = std::max(lo, cl * HW), e = std::min(hi, (cl + 1) * HW), c = g * cpg + cl;
      channel_sums<T, kAct>(xs + b, dys + b, e - b, p.mean[s], a_of(s, c), bias_of(c), p.act, sums[it * cpg + cl],
                            slice_dz != nullptr ? slice_dz + b : nullptr);
    }
  };
  // Adds the parts' sums into part 0's, then the slice's coefficients.
  auto finish_slice = [&](int64_t s) {
    ChannelSums* total = &sums[s * parts * cpg];
    for (int64_t j = 1; j < parts; ++j) {
      for (int64_t cl = 0; cl < cpg; ++cl) {
        const ChannelSums& part = sums[(s * parts + j) * cpg + cl];
        total[cl].ds += part.ds;
        total[cl].db += part.db;
        total[cl].dm += part.dm;
      }
    }
    const int64_t n = s / G, g = s % G;
    coefs[s] = group_coefficients(total, cpg, HW, p.w ? p.w + g * cpg : nullptr, static_cast<double>(p.rstd[s]),
                                  p.ds + n * p.channels + g * cpg, p.db + n * p.channels + g * cpg);
  };
  const bool stream = p.dx && stream_output<T>(p.N * p.channels * HW);
  auto grad_input_of_item = [&](int64_t it, C* buf, const C* slice_dz) {
    const int64_t s = it / parts, g = s % G, lo = begin_of(it), hi = end_of(it);
    if (short_act) {
      for_each_short_run(it, buf, [&](int64_t b, int64_t e, const C* dz) { short_grad_input(s, b, e, dz); });
      return;
    }
    const GroupCoefficients& k = coefs[s];
    for (int64_t cl = lo / HW; cl * HW < hi; ++cl) {
      const int64_t b = std::max(lo, cl * HW), e = std::min(hi, (cl + 1) * HW), c = g * cpg + cl;
      channel_grad_input<T, kAct>(p.x + s * D + b, p.dy + s * D + b, p.dx + s * D + b, e - b, p.mean[s], a_of(s, c),
                                  bias_of(c), static_cast<C>(k.coef_x), static_cast<C>(k.coef_1), p.act, stream,
                                  slice_dz != nullptr ? slice_dz + b : nullptr);
    }
    if (stream) stream_fence();  // once per item: its streamed stores are ordered before the pool's join
  };
  // One-element channels (HW == 1): every element of a slice is a channel of its own, so a channel's sums are its
  // element and need no memory. Two passes over a range [lo, hi) of slice s, the same arithmetic as
  // sums_of_item, finish_slice and grad_input_of_item:
  //   one_element_sums   sum (x - m), sum w dz (x - m) and sum w dz over the range, in double, kChains
  //                      interleaved chains each (one running double sum is a chain of dependent ~4-cycle
  //                      additions, which bounded this path at long slices: (8, 1024) G4 bfloat16 backward
  //                      1.1-1.2x PyTorch's with single chains);
  //   one_element_write  each channel's ds (times rstd) and db, and dx, once its slice's sums are known.
  // A slice cut into parts (few slices: (1, 262144) G1) sums its parts in one parallel region and writes them in a
  // second. Through the general steps, each channel's sums took a ChannelSums slot and three loops: (256, 64) G8
  // forward + backward ran at 1.7-1.9x PyTorch's time, (8, 1024) G4 + ReLU at 3x, (1, 262144) G1 backward 3x.
  // kind: the activation (kNone: none), whose derivative scales dy: dz of the range is computed a pack at a time
  // (the channels are consecutive, so w and bias load as vectors too) into dz_buf (the range rounded up to a
  // pack), once per pass. Element by element through libm, (8, 1024) G4 + SiLU forward + backward took 2x
  // PyTorch's time, + Mish 5x.
  struct OneElementSums {
    double dm, swd, sw;  // sum (x - m), sum w dz (x - m), sum w dz
  };
  auto one_element_dz = [&](int64_t s, int64_t lo, int64_t hi, auto kind, C* dz_buf) {
    if constexpr (decltype(kind)::value != gn_act::kNone) {
      using P = Pack<T>;
      using PC = Pack<C>;
      const int64_t c0 = (s % G) * cpg;
      const T* xs = p.x + s * D;
      const P vm = P::broadcast(p.mean[s]), vr = P::broadcast(p.rstd[s]);
      for (int64_t cl = lo; cl < hi; cl += P::kWidth) {
        const int64_t cnt = std::min<int64_t>(P::kWidth, hi - cl);
        const P d = P::load(xs + cl, cnt) - vm;
        // w and bias are in the compute type: loaded as Pack<C>, whose two vectors are Pack<T>'s.
        auto params = [&](const C* v) { const PC pc = PC::load(v + c0 + cl, cnt); return P{pc.lo, pc.hi}; };
        const P a = p.w ? vr * params(p.w) : vr;
        const P bias = p.bias ? params(p.bias) : P::broadcast(C(0));
        constexpr int K = decltype(kind)::value;
        (P::load(p.dy + s * D + cl, cnt) * derivative_pack<K>(p.act, fmadd(d, a, bias))).lanes(dz_buf + cl - lo);
      }
    }
  };
  // dz of element cl of slice s, in a range starting at lo whose dz (with an activation) is in dz_buf.
  auto one_element_grad_z = [&](int64_t s, int64_t cl, int64_t lo, auto kind, const C* dz_buf) {
    if constexpr (decltype(kind)::value == gn_act::kNone) {
      return static_cast<C>(p.dy[s * D + cl]);
    } else {
      return dz_buf[cl - lo];
    }
  };
  // (Fills dz_buf with the range's dz first.)
  auto one_element_sums = [&](int64_t s, int64_t lo, int64_t hi, auto kind, C* dz_buf) {
    one_element_dz(s, lo, hi, kind, dz_buf);
    const int64_t c0 = (s % G) * cpg;
    const T* xs = p.x + s * D;
    const C m = p.mean[s];
    constexpr int64_t kChains = 4;
    double dm[kChains] = {}, swd[kChains] = {}, sw[kChains] = {};
    auto add_element = [&](int64_t cl, int64_t k) {
      const C d = static_cast<C>(xs[cl]) - m, gz = one_element_grad_z(s, cl, lo, kind, dz_buf);
      const double wc = p.w ? static_cast<double>(p.w[c0 + cl]) : 1.0;
      dm[k] += static_cast<double>(d);
      swd[k] += wc * static_cast<double>(gz * d);
      sw[k] += wc * static_cast<double>(gz);
    };
    const int64_t whole = lo + (hi - lo) / kChains * kChains;
    for (int64_t cl = lo; cl < whole; cl += kChains) {
      for (int64_t k = 0; k < kChains; ++k) add_element(cl + k, k);
    }
    for (int64_t cl = whole; cl < hi; ++cl) add_element(cl, cl - whole);
    return OneElementSums{(dm[0] + dm[1]) + (dm[2] + dm[3]), (swd[0] + swd[1]) + (swd[2] + swd[3]),
                          (sw[0] + sw[1]) + (sw[2] + sw[3])};
  };
  // t: the slice's sums; dz_buf: the range's dz (with an activation), as one_element_sums or one_element_dz left
  // it. ds = dz (x - m) - delta dz per channel, delta = sum (x - m) / D (the saved mean's rounding), so the
  // slice's sum of w ds is swd - delta sw.
  auto one_element_write = [&](int64_t s, int64_t lo, int64_t hi, auto kind, const C* dz_buf,
                               const OneElementSums& t) {
    const int64_t n = s / G, c0 = (s % G) * cpg;
    const T* xs = p.x + s * D;
    const C m = p.mean[s];
    const double inv_d = 1.0 / static_cast<double>(D), delta = t.dm * inv_d, rstd = static_cast<double>(p.rstd[s]);
    double* ds_out = p.ds + n * p.channels + c0;
    double* db_out = p.db + n * p.channels + c0;
    const GroupCoefficients k = coefficients_of(t.swd - delta * t.sw, t.sw, delta, rstd, inv_d);
    const C cx = static_cast<C>(k.coef_x), c1 = static_cast<C>(k.coef_1);
    T* dxs = p.dx ? p.dx + s * D : nullptr;
    for (int64_t cl = lo; cl < hi; ++cl) {
      const C d = static_cast<C>(xs[cl]) - m, gz = one_element_grad_z(s, cl, lo, kind, dz_buf);
      const double db = static_cast<double>(gz);
      ds_out[cl] = (static_cast<double>(gz * d) - delta * db) * rstd;
      db_out[cl] = db;
      if (dxs) dxs[cl] = static_cast<T>(a_of(s, c0 + cl) * gz + (cx * d + c1));
    }
  };
  // f(kind) with the activation's kind as a compile-time constant (kNone without one).
  auto with_act_kind = [&](auto f) {
    if constexpr (kAct) {
      gn_act::with_kind(p.act.kind, f);
    } else {
      f(std::integral_constant<int, gn_act::kNone>{});
    }
  };
  if (HW == 1) {  // (N, C) inputs: every element is a channel of its own
    if (parts == 1) {
      at::parallel_for(0, slices, grain_items(slices, D), [&](int64_t first, int64_t last) {
        std::vector<C> dz_buf(kAct ? static_cast<size_t>(round_up(cpg, Pack<T>::kWidth)) : 0);
        with_act_kind([&](auto kind) {
          for (int64_t s = first; s < last; ++s) {
            const OneElementSums t = one_element_sums(s, 0, D, kind, dz_buf.data());  // fills dz_buf
            one_element_write(s, 0, D, kind, dz_buf.data(), t);
          }
        });
      });
      return;
    }
    std::vector<OneElementSums> part_sums(static_cast<size_t>(items));
    auto over_parts = [&](auto step) {
      at::parallel_for(0, items, 1, [&](int64_t first, int64_t last) {
        for (int64_t it = first; it < last; ++it) {
          const int64_t lo = begin_of(it), hi = end_of(it);
          const std::unique_ptr<C[]> dz_buf(kAct ? new C[static_cast<size_t>(round_up(hi - lo, Pack<T>::kWidth))]
                                                 : nullptr);  // (one_element_dz writes it before any read)
          with_act_kind([&](auto kind) { step(it, lo, hi, kind, dz_buf.get()); });
        }
      });
    };
    over_parts([&](int64_t it, int64_t lo, int64_t hi, auto kind, C* dz_buf) {
      part_sums[it] = one_element_sums(it / parts, lo, hi, kind, dz_buf);
    });
    for (int64_t s = 0; s < slices; ++s) {  // part 0 <- the slice's total, parts added in order
      OneElementSums& total = part_sums[s * parts];
      for (int64_t j = 1; j < parts; ++j) {
        const OneElementSums& part = part_sums[s * parts + j];
        total.dm += part.dm;
        total.swd += part.swd;
        total.sw += part.sw;
      }
    }
    over_parts([&](int64_t it, int64_t lo, int64_t hi, auto kind, C* dz_buf) {
      one_element_dz(it / parts, lo, hi, kind, dz_buf);
      one_element_write(it / parts, lo, hi, kind, dz_buf, part_sums[it / parts * parts]);
    });
    return;
  }
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
  if constexpr (std::is_same_v<compute_t<T>, float>) {
    if (HW > 1 && HW <= kMaxBatchedRow && parts == 1) {
      // Float32 and 16-bit data, whole slices of channels up to kMaxBatchedRow long: 16 channels at a time
      // (backward_short_rows_avx512), in chunks of slices of at most 2048 elements (x and dy: 16 KB in float32)
      // that stay in L1 between the sums and dx. (float64 goes slice by slice below, or the general path.)
      const int64_t chunk = std::max<int64_t>(1, 2048 / D);
      at::parallel_for(0, slices, grain_items(slices, D), [&](int64_t first, int64_t last) {
        __m512i row_of[32];  // lane l of vector k of a block of 16 channels: channel (16 k + l) / HW of the block
        for (int64_t k = 0; k < HW && k < 32; ++k) {
          __at_align__ int32_t q[16];
          for (int l = 0; l < 16; ++l) q[l] = static_cast<int32_t>(std::min<int64_t>(15, (16 * k + l) / HW));
          row_of[k] = _mm512_load_si512(q);
        }
        const int64_t n = std::min(chunk, last - first);
        // sums of x - m per channel, cx and c1 per slice; with an activation, the chunk's dz (not filled: the sums
        // pass writes every element dx reads)
        std::vector<float> scratch(static_cast<size_t>(n * cpg + 2 * n));
        float* sm = scratch.data();
        const std::unique_ptr<float[]> dz_kept(kAct ? new float[static_cast<size_t>(n * D)] : nullptr);
        for (int64_t s = first; s < last; s += chunk) {
          const int64_t e = std::min(last, s + chunk);
          with_activation_kind<kAct>(p.act, [&](auto kind) {
            constexpr int K = decltype(kind)::value;
            float* const cx = sm + n * cpg;
            float* const c1 = cx + n;
            if (HW >= kPackWidth) {
              backward_short_rows_avx512<T, ShortRows::kLong, K>(p, s, e, row_of, sm, cx, c1, dz_kept.get());
            } else if (HW > 16) {
              backward_short_rows_avx512<T, ShortRows::kTwoVectors, K>(p, s, e, row_of, sm, cx, c1, dz_kept.get());
            } else {
              backward_short_rows_avx512<T, ShortRows::kOneVector, K>(p, s, e, row_of, sm, cx, c1, dz_kept.get());
            }
          });
        }
      });
      return;
    }
  }
#endif
#if defined(CPU_CAPABILITY_AVX2) && defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<compute_t<T>, float>) {
    const int64_t max_row = std::is_same_v<T, float> ? kMaxRowAvx2 : kAct ? kMaxRowAvx2HalfAct : kMaxRowAvx2Half;
    // (With an activation, channels shorter than a pack keep backward_short_slice's path below.)
    const int64_t min_row = kAct ? kPackWidth : min_row_avx2<T>();
    if (HW >= min_row && HW <= max_row && parts == 1) {  // backward_short_rows_avx2
      // chunks of slices of at most 2048 elements (x and dy: 16 KB), as the AVX-512 kernel
      const int64_t chunk = std::max<int64_t>(1, 2048 / D);
      at::parallel_for(0, slices, grain_items(slices, D), [&](int64_t first, int64_t last) {
        const int64_t n = std::min(chunk, last - first);
        // a_row: one slice's row, or for slices shorter than kMaxFlatSlice four rows of the chunk's (a, m, cx, c1 of
        // every element, see backward_short_rows_avx2)
        std::vector<float> a_row(static_cast<size_t>(D < kMaxFlatSlice ? 4 * (n * D + 8) : D + 8));
        std::vector<double> sm_rows(static_cast<size_t>(n * cpg));
        // with an activation: each element's bias, and the chunk's dz (not filled: written before they are read)
        const std::unique_ptr<float[]> b_row(kAct ? new float[static_cast<size_t>(D + 8)] : nullptr);
        const std::unique_ptr<float[]> dz_rows(kAct ? new float[static_cast<size_t>(n * D + 8)] : nullptr);
        with_activation_kind<kAct>(p.act, [&](auto kind) {
          constexpr int K = decltype(kind)::value;
          for (int64_t s = first; s < last; s += chunk) {
            backward_short_rows_avx2<T, K>(p, s, std::min(last, s + chunk), sm_rows.data(), a_row.data(), stream,
                                           b_row.get(), dz_rows.get());
          }
        });
        if (stream) stream_fence();
      });
      return;
    }
  }
#endif
  if (HW > 1 && HW < kPackWidth && parts == 1) {  // channels shorter than a pack, slices whole
    at::parallel_for(0, slices, grain_items(slices, D), [&](int64_t first, int64_t last) {
      std::vector<C> dz(kAct ? static_cast<size_t>(D) : 0);
      for (int64_t s = first; s < last; ++s) backward_short_slice<T, kAct>(p, s, dz.data());
    });
    return;
  }
  sums.resize(static_cast<size_t>(items * cpg));
  coefs.resize(static_cast<size_t>(slices));
  if (parts == 1) {  // whole slices of channels a pack or longer (shorter ones took the paths above): no scratch
    TORCH_INTERNAL_ASSERT(!short_act);
    // With an activation built on exp, erf or tanh, a slice's dz from the sums pass is kept for dx (slices of up to
    // kMaxKeptDz elements, a buffer that stays in L2) rather than the derivative evaluated a second time: 2 threads,
    // 2-core AVX-512 machine, float32 backward against PyTorch's activation backward then GroupNorm backward,
    // SiLU at (2,320,32,32) 1.14x -> 0.93x, (8,64,32,32) 1.27x -> 0.92x; cheap ones (ReLU) are recomputed, which
    // costs less than the buffer's traffic.
    constexpr int64_t kMaxKeptDz = 65536;
    const bool keep_dz = kAct && p.dx && D <= kMaxKeptDz && activation_is_costly(p.act.kind);
    at::parallel_for(0, slices, grain_items(slices, D), [&](int64_t first, int64_t last) {
      // (Not zero-filled: the sums pass writes every element dx reads, whole packs included; a value-initialised
      // vector cleared up to 256 KB per task.)
      const std::unique_ptr<C[]> dz(keep_dz ? new C[static_cast<size_t>(D + kPackWidth)] : nullptr);
      C* const slice_dz = dz.get();
      for (int64_t s = first; s < last; ++s) {
        sums_of_item(s, nullptr, slice_dz);
        finish_slice(s);
        if (p.dx) grad_input_of_item(s, nullptr, slice_dz);
      }
    });
    return;
  }
  // Slices cut into parts: scratch of the short-channel path, per task (one element when that path cannot run).
  constexpr int64_t kScratch = kAct ? kShortRun : 1;
  at::parallel_for(0, items, 1, [&](int64_t first, int64_t last) {
    __at_align__ C buf[kScratch];
    for (int64_t it = first; it < last; ++it) sums_of_item(it, buf, nullptr);
  });
  for (int64_t s = 0; s < slices; ++s) finish_slice(s);
  if (!p.dx) return;
  at::parallel_for(0, items, 1, [&](int64_t first, int64_t last) {
    __at_align__ C buf[kScratch];
    for (int64_t it = first; it < last; ++it) grad_input_of_item(it, buf, nullptr);
  });
}

// Per-channel sums of rows [lo, hi) of one channels-last sample (rows of `channels` values, `stride` apart) into
// ds[c], db[c], dm[c] (written), two ways (see
// channel_sums_rows for which). m, a, bias: per-channel vectors (the group's saved mean, rstd * w[c], bias[c])
// zero-padded to a multiple of kWidth.
// In row order: two sequential streams (x, dy), each row added into per-channel accumulators of the compute
// type that stay in L1 (3 x C values), folded into double every kTileRows rows.
// float64 data leaves dm out (0): dm only measures the saved mean's rounding (delta = sum dm / D), which for a
// mean computed and saved in double is ~1e-16 of |mean| (a 1e-12 relative change of dx at |mean| = 1e4 std),
// and its accumulator cost the loop 14-19%: 2-core AVX-512 machine, (2,320,64,64) channels-last sums pass
// 1.18 -> 1.02 ms and 1.27 -> 1.03 ms against PyTorch's 0.82-0.97 (variants alternated call by call in one
// process). Four rows per accumulator pass (a quarter of the accumulator traffic) gained nothing (1.24 ms).
template <typename T, bool kAct>
void channel_sums_in_row_order(const T* x, const T* dy, int64_t channels, int64_t stride, int64_t lo, int64_t hi,
                               const compute_t<T>* m, const compute_t<T>* a, const compute_t<T>* bias,
                               const gn_act::Params& act, double* ds, double* db, double* dm, T* dz) {
  using P = Pack<T>;
  using C = compute_t<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  constexpr bool kDm = !std::is_same_v<C, double>;
  const int64_t cpad = round_up(channels, W);
  // Per thread, kept across calls (a fresh vector per call, i.e. per sample of the whole-sample path, was a tenth
  // of the backward of samples of 6 rows in malloc and free: perf at (32,128,3,2)).
  thread_local std::vector<C> acc;
  if (acc.size() < static_cast<size_t>(3 * cpad)) acc.resize(static_cast<size_t>(3 * cpad));
  C* const sd = acc.data();   // sum dz (x - m)
  C* const sb = sd + cpad;    // sum dz
  C* const sm = sb + cpad;    // sum (x - m)
  auto vload = [](const C* v, int64_t c) { return P{V::loadu(v + c), V::loadu(v + c + P::kVec)}; };
  with_activation_kind<kAct>(act, [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    for (int64_t r0 = lo; r0 < hi; r0 += kTileRows) {
      const int64_t r1 = std::min(hi, r0 + kTileRows);
      std::fill_n(acc.data(), 3 * cpad, C(0));
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * stride;
        const T* gr = dy + r * stride;
        for (int64_t c = 0; c < channels; c += W) {
          const int64_t cnt = std::min(W, channels - c);  // lanes past cnt: x, dy, m, a and bias 0, so d = g = 0
          const P d = P::load(xr + c, cnt) - vload(m, c);
          const P g = grad_z<T, K>(P::load(gr + c, cnt), d, vload(a, c), vload(bias, c), act);
          if constexpr (kAct && std::is_same_v<T, C>) {
            if (dz) g.store(dz + r * stride + c, cnt);
          }
          fmadd(g, d, vload(sd, c)).lanes(sd + c);
          (vload(sb, c) + g).lanes(sb + c);
          if constexpr (kDm) (vload(sm, c) + d).lanes(sm + c);
        }
      }
      if (r0 == lo) {  // the first tile's sums written (no zero fill first), later ones added
        for (int64_t c = 0; c < channels; ++c) ds[c] = static_cast<double>(sd[c]);
        for (int64_t c = 0; c < channels; ++c) db[c] = static_cast<double>(sb[c]);
        for (int64_t c = 0; c < channels; ++c) dm[c] = static_cast<double>(sm[c]);  // 0 without kDm
      } else {
        for (int64_t c = 0; c < channels; ++c) ds[c] += static_cast<double>(sd[c]);
        for (int64_t c = 0; c < channels; ++c) db[c] += static_cast<double>(sb[c]);
        for (int64_t c = 0; c < channels; ++c) dm[c] += static_cast<double>(sm[c]);
      }
    }
  });
}

// By columns: a tile of kTileRows rows walked one kWidth-channel chunk at a time, the sums in registers (fewer
// instructions per element; each row read in C / kWidth strided pieces). A row longer than a pack but not a whole
// number of them ends with the whole pack that ends at its last channel, its lanes over channels already summed
// masked out of the sums (and their dz, where kept, stored again with the same values): at::vec's counted loads
// are out-of-line calls, one per row and operand. Kernels alone, one thread, 2-core AMD EPYC (AVX2): bfloat16
// (8,40,14,18) G1 0.90x -> 0.65-0.67x PyTorch's time, (32,40,7,9) 0.97x -> 0.73x, (8,24,14,18) G4 0.37x -> 0.24-0.26x;
// float32 (4,37,20,20) G1 0.70x -> 0.63x.
template <typename T, bool kAct>
void channel_sums_columns(const T* x, const T* dy, int64_t channels, int64_t stride, int64_t lo, int64_t hi,
                          const compute_t<T>* m, const compute_t<T>* a, const compute_t<T>* bias,
                          const gn_act::Params& act, double* ds, double* db, double* dm, T* dz) {
  with_activation_kind<kAct>(act, [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    using P = Pack<T>;
    using C = compute_t<T>;
    using V = typename P::V;
    constexpr int64_t W = P::kWidth;
    __at_align__ C l1[W];
    __at_align__ C l2[W];
    __at_align__ C l3[W];
    // Where the tail is whole compute vectors of the data's own type, its counted load is two plain loads
    // (at::vec's fast path): float32 rows of 16 + 16 + 8 channels at AVX2 measured 3-8% slower with the overlap.
    const int64_t whole = channels / W * W;
    const bool overlap = whole != channels && channels > W && (P::kConverts || (channels - whole) % P::kVec != 0);
    // The overlapping pack starts at channels - W; its lanes below first_fresh were summed by the pack before.
    const int64_t first_fresh = W - (channels - whole);
    const V zero(C(0));
    const V lane_lo = V::arange(C(0), C(1)), lane_hi = V::arange(C(P::kVec), C(1));
    // all-ones lanes: the channels not yet summed
    const P keep{V(C(first_fresh)) <= lane_lo, V(C(first_fresh)) <= lane_hi};
    auto masked = [&](const P& v) { return P{V::blendv(zero, v.lo, keep.lo), V::blendv(zero, v.hi, keep.hi)}; };
    for (int64_t r0 = lo; r0 < hi; r0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, hi - r0);
      // Into double: the first tile's sums written, later ones added (no zero fill of 3 x channels doubles per
      // sample first), lanes [from, count) of the pack at c.
      const bool first_tile = r0 == lo;
      auto fold = [&](int64_t c, int64_t from, int64_t count) {
        for (int64_t j = from; j < count; ++j) {
          ds[c + j] = (first_tile ? 0.0 : ds[c + j]) + static_cast<double>(l1[j]);
          db[c + j] = (first_tile ? 0.0 : db[c + j]) + static_cast<double>(l2[j]);
          dm[c + j] = (first_tile ? 0.0 : dm[c + j]) + static_cast<double>(l3[j]);
        }
      };
      for (int64_t c = 0; c < channels; c += W) {
        const bool last_overlaps = overlap && c == whole;
        const int64_t at = last_overlaps ? channels - W : c;  // where this pack's lanes start
        const int64_t cnt = std::min(W, channels - at);
        const P vm{V::loadu(m + at), V::loadu(m + at + P::kVec)};
        const P va{V::loadu(a + at), V::loadu(a + at + P::kVec)};
        const P vb{V::loadu(bias + at), V::loadu(bias + at + P::kVec)};
        P sd = P::broadcast(C(0)), sb = sd, sm = sd;
        const int64_t base = r0 * stride + at;
        if (cnt == W) {
          for (int64_t r = 0; r < rows; ++r) {
            P d = P::load(x + base + r * stride) - vm;
            P g = grad_z<T, K>(P::load(dy + base + r * stride), d, va, vb, act);
            if constexpr (kAct && std::is_same_v<T, C>) {
              if (dz) g.store(dz + base + r * stride);
            }
            if (last_overlaps) {
              d = masked(d);
              g = masked(g);
            }
            sd = fmadd(g, d, sd);
            sb = sb + g;
            sm = sm + d;
          }
        } else {  // a row of fewer than W channels; lanes past cnt: x, dy, m, a and bias all 0, so d = g = 0 there
          for (int64_t r = 0; r < rows; ++r) {
            const P d = P::load(x + base + r * stride, cnt) - vm;
            const P g = grad_z<T, K>(P::load(dy + base + r * stride, cnt), d, va, vb, act);
            if constexpr (kAct && std::is_same_v<T, C>) {
              if (dz) g.store(dz + base + r * stride, cnt);
            }
            sd = fmadd(g, d, sd);
            sb = sb + g;
            sm = sm + d;
          }
        }
        sd.lanes(l1);
        sb.lanes(l2);
        sm.lanes(l3);
        if (last_overlaps) fold(at, first_fresh, W);
        else if (cnt == W) fold(at, 0, W);  // a fixed count, which vectorises
        else fold(at, 0, cnt);
      }
    }
  });
}

// Which walk: float32 and float64 data stream from memory faster than either walk computes, and the row order
// reads them as two sequential streams: 2-core AVX-512 machine, (2, 320, 64, 64) channels-last, the sums pass
// 1.11 -> 0.85 ms float64, 0.56 -> 0.49 ms float32 (PyTorch: 0.84, 0.47). Half data converts every element and
// moves half the bytes, so the register walk's fewer instructions win there: the row order took (2, 512, 16, 16)
// float16 forward + backward from 0.143 to 0.167 ms. Parts of at most kFewRows rows take the register walk too:
// there the row order's accumulators (zero fill, a load and a store of three per vector per row, the fold) cost
// more than the strided reads ((128,128,3,2) float32 backward, one thread: 97 -> 76 us with the register walk for
// these, PyTorch's 86; (8,256,5,5) float32 alike either way).
constexpr int64_t kFewRows = 32;
// Rows of up to kColumnRowBytes take the register walk however many there are: its strided reads then stay a few
// lines apart and cost less than the row order's accumulator traffic (three loads and stores per vector per row).
// One thread, kernels alone against PyTorch's, 2-core AMD EPYC (AVX2), float32, row order -> register walk:
// rows of 160 B (32,40,7,9) G1 1.53-1.59x -> 1.22x, (8,40,14,18) G1 1.29-1.43x -> 1.01-1.03x; 256 B (8,64,14,18)
// G1 1.09-1.11x -> 0.84-0.86x; 384 B (4,96,64,64) G8 6.3 -> 2.6-2.8 ms; float64 rows of 320 B (8,40,14,18)
// 128 -> 109 us. From 512 B the row order stays ahead: (2,128,64,64) G32 1.60-1.72 against 1.76-1.90 ms, 640 B
// (4,160,32,32) 0.94 against 1.10-1.21 ms, 1280 B (8,320,14,18) 0.79-0.82 against 1.12-1.15 ms.
constexpr int64_t kColumnRowBytes = 384;
// dz (float32 and float64 with an activation): where given, each element's dz = dy act'(z) is stored there too (rows
// `stride` apart, as x), for grad_input_rows to read back (dz_in_dx) instead of evaluating act' a second time.
template <typename T, bool kAct>
void channel_sums_rows(const T* x, const T* dy, int64_t channels, int64_t stride, int64_t lo, int64_t hi,
                       const compute_t<T>* m, const compute_t<T>* a, const compute_t<T>* bias,
                       const gn_act::Params& act, double* ds, double* db, double* dm, T* dz = nullptr) {
  if (sizeof(T) >= 4 && hi - lo > kFewRows && channels * static_cast<int64_t>(sizeof(T)) > kColumnRowBytes) {
    channel_sums_in_row_order<T, kAct>(x, dy, channels, stride, lo, hi, m, a, bias, act, ds, db, dm, dz);
  } else {
    channel_sums_columns<T, kAct>(x, dy, channels, stride, lo, hi, m, a, bias, act, ds, db, dm, dz);
  }
}

// grad_input_rows' loop for activation kind K; kOneGroup: m, cx and c1 taken from their first channel.
template <typename T, int K, bool kOneGroup>
void grad_input_rows_of(const T* x, const T* dy, T* dx, int64_t channels, int64_t stride, int64_t lo, int64_t hi,
                        const compute_t<T>* m, const compute_t<T>* a, const compute_t<T>* bias,
                        const compute_t<T>* cx, const compute_t<T>* c1, const gn_act::Params& act, bool stream,
                        bool in_place) {
  using P = Pack<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  auto vload = [](const compute_t<T>* v, int64_t c) { return P{V::loadu(v + c), V::loadu(v + c + P::kVec)}; };
  const P gm = P::broadcast(m[0]), gcx = P::broadcast(cx[0]), gc1 = P::broadcast(c1[0]);
  // dx of the row's cnt channels from c (cnt < W: counted loads, lanes past cnt unused)
  auto dx_pack = [&](int64_t row, int64_t c, int64_t cnt) {
    const P va = vload(a, c);
    const P d = P::load(x + row + c, cnt) - (kOneGroup ? gm : vload(m, c));
    const P g = grad_z<T, K>(P::load(dy + row + c, cnt), d, va, vload(bias, c), act);
    return fmadd(va, g, fmadd(kOneGroup ? gcx : vload(cx, c), d, kOneGroup ? gc1 : vload(c1, c)));
  };
  // A row longer than a pack but not a whole number of them ends with the whole pack that ends at its last
  // channel, stored normally over channels the pack before wrote (the same values: dx never aliases x or dy):
  // at::vec's counted load and store are out-of-line calls (bfloat16 (8,40,14,18) G1, rows of 16 + 16 + 8
  // channels at AVX2: 1.03-1.11x PyTorch's time with them, 0.93-0.96x without).
  const int64_t whole = channels / W * W;
  const bool overlap = whole != channels && channels > W && !in_place;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t row = r * stride;
    // full packs streamed on the row's whole lines before any normal store (the last pack's), where the row
    // starts on a line
    const int64_t streamed = stream ? streamed_prefix(dx + row, overlap ? channels - W : whole) : 0;
    int64_t c = 0;
    for (; c < whole; c += W) {
      const P out = dx_pack(row, c, W);
      if (c + W <= streamed) out.store_stream(dx + row + c);
      else out.store(dx + row + c);
    }
    if (overlap) dx_pack(row, channels - W, W).store(dx + row + channels - W);
    else if (c < channels) dx_pack(row, c, channels - c).store(dx + row + c, channels - c);
  }
  if (stream) stream_fence();
}

// Rows [lo, hi) of one channels-last sample (rows `stride` apart): dx = a * dz + cx * (x - m) + c1 with per-channel
// (padded) vectors. in_place: dy is dx (holding dz, from channel_sums_rows), each pack read before it is written;
// then no pack is computed twice (the overlapping last pack would read dx back). one_group: the channels are one
// group's, so m, cx and c1 are the same for all (held in registers: a pack then loads x, dy and a, not three
// more per-channel vectors; (8,40,14,18) G1 float32, kernels alone at one thread, see NOTES).
template <typename T, bool kAct>
void grad_input_rows(const T* x, const T* dy, T* dx, int64_t channels, int64_t stride, int64_t lo, int64_t hi,
                     const compute_t<T>* m, const compute_t<T>* a, const compute_t<T>* bias, const compute_t<T>* cx,
                     const compute_t<T>* c1, const gn_act::Params& act, bool stream, bool in_place = false,
                     bool one_group = false) {
  with_activation_kind<kAct>(act, [&](auto kind) {
    if (one_group) grad_input_rows_of<T, decltype(kind)::value, true>(x, dy, dx, channels, stride, lo, hi, m, a,
                                                                       bias, cx, c1, act, stream, in_place);
    else grad_input_rows_of<T, decltype(kind)::value, false>(x, dy, dx, channels, stride, lo, hi, m, a, bias, cx,
                                                             c1, act, stream, in_place);
  });
}

// One channels-last part's per-channel sums (ds, db, dm: G * cpg doubles each, as channel_sums_rows gives them)
// summed over each group: dm_out[g] = sum dm, s_out[g] = sum w ds, b_out[g] = sum w db (wd: w in double, 1 without
// weights), the linear sums of sample_coefficients, which parts of a sample add. Wide groups in double vectors.
inline void group_linear_sums(const double* ds, const double* db, const double* dm, int64_t G, int64_t cpg,
                              const double* wd, double* dm_out, double* s_out, double* b_out) {
  using VD = Vectorized<double>;
  constexpr int64_t LD = VD::size();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t c0 = g * cpg, c_end = c0 + cpg;
    VD vdm(0.0), vs(0.0), vb(0.0);
    int64_t c = c0;
    for (; c + LD <= c_end; c += LD) {
      const VD w = VD::loadu(wd + c);
      vdm = vdm + VD::loadu(dm + c);
      vs = at::vec::fmadd(w, VD::loadu(ds + c), vs);
      vb = at::vec::fmadd(w, VD::loadu(db + c), vb);
    }
    __at_align__ double l0[LD];
    __at_align__ double l1[LD];
    __at_align__ double l2[LD];
    vdm.store(l0);
    vs.store(l1);
    vb.store(l2);
    double tdm = 0, ts = 0, tb = 0;
    for (int64_t i = 0; i < LD; ++i) {
      tdm += l0[i];
      ts += l1[i];
      tb += l2[i];
    }
    for (; c < c_end; ++c) {
      tdm += dm[c];
      ts += wd[c] * ds[c];
      tb += wd[c] * db[c];
    }
    dm_out[g] = tdm;
    s_out[g] = ts;
    b_out[g] = tb;
  }
}

// One channels-last sample's coefficients from its per-channel sums (ds, db, dm: `channels` doubles each, as
// channel_sums_rows gives them): per group (mean m, rstd r, weights w) delta = sum dm / D, S = sum w (ds - delta db),
// B = sum w db; cx = -r^3 S / D and c1 = -r B / D - cx delta spread over the group's channels (cx, c1: the compute
// type, padded vectors); ds_out = (ds - delta db) r and db_out = db for the parameter gradients. wd: w in double (1
// without weights). The group's sums are double vectors (wide groups) and scalar chains; every store is a vector
// (masked for groups narrower than one): stored element by element, the coefficients, the parameter sums and the
// double sums of the channels were most of the backward of samples of 6 rows ((32,128,3,2) float32, 4 channels
// a group: 1.5x PyTorch's, perf).
template <typename C>
void sample_coefficients(const double* ds, const double* db, const double* dm, int64_t G, int64_t cpg, int64_t HW,
                         const double* wd, const C* rstd, double* ds_out, double* db_out, C* cx, C* c1) {
  using VD = Vectorized<double>;
  using VC = Vectorized<C>;
  constexpr int64_t LD = VD::size(), LC = VC::size();
  const double inv_d = 1.0 / static_cast<double>(cpg * HW);
  const int64_t channels = G * cpg;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t c0 = g * cpg, c1_end = c0 + cpg;
    double dm0 = 0, dm1 = 0, s0 = 0, s1 = 0, b0 = 0, b1 = 0;  // two chains each
    int64_t c = c0;
    if (cpg >= 2 * LD) {
      // Wide groups: whole double vectors (element by element, 32 channels a group were a quarter of the backward
      // of (64,1024,1,1) float32, one row a sample); the rest element by element below.
      VD vdm(0.0), vs(0.0), vbs(0.0);
      for (; c + LD <= c1_end; c += LD) {
        const VD w = VD::loadu(wd + c);
        vdm = vdm + VD::loadu(dm + c);
        vs = at::vec::fmadd(w, VD::loadu(ds + c), vs);
        vbs = at::vec::fmadd(w, VD::loadu(db + c), vbs);
      }
      auto lanes_sum = [](const VD& v) {
        __at_align__ double l[LD];
        v.store(l);
        double t = 0;
        for (int64_t i = 0; i < LD; ++i) t += l[i];
        return t;
      };
      dm1 = lanes_sum(vdm);
      s1 = lanes_sum(vs);
      b1 = lanes_sum(vbs);
    }
    for (; c + 2 <= c1_end; c += 2) {
      dm0 += dm[c];
      dm1 += dm[c + 1];
      s0 += wd[c] * ds[c];
      s1 += wd[c + 1] * ds[c + 1];
      b0 += wd[c] * db[c];
      b1 += wd[c + 1] * db[c + 1];
    }
    if (c < c1_end) {
      dm0 += dm[c];
      s0 += wd[c] * ds[c];
      b0 += wd[c] * db[c];
    }
    const double r = static_cast<double>(rstd[g]);
    const double delta = (dm0 + dm1) * inv_d, B = b0 + b1, S = (s0 + s1) - delta * B;
    const GroupCoefficients k = coefficients_of(S, B, delta, r, inv_d);
    const VD vdelta(delta), vr(r);
    for (c = c0; c < c1_end; c += LD) {
      const int64_t cnt = std::min(LD, c1_end - c);
      const VD vb = load_first<VD>(db + c, cnt, channels - c), vs = load_first<VD>(ds + c, cnt, channels - c);
      store_first((vs - vdelta * vb) * vr, ds_out + c, cnt, channels - c);
      store_first(vb, db_out + c, cnt, channels - c);
    }
    const VC vx(static_cast<C>(k.coef_x)), v1(static_cast<C>(k.coef_1));
    for (c = c0; c < c1_end; c += LC) {
      const int64_t cnt = std::min(LC, c1_end - c);
      store_first(vx, cx + c, cnt, channels - c);
      store_first(v1, c1 + c, cnt, channels - c);
    }
  }
}

// Sample n's tensors (dx null where grad_input is not asked for) and its rows of the per-(n, c) sums.
template <typename T>
struct SampleRows {
  const T* x;
  const T* dy;
  T* dx;
  double* ds;
  double* db;
};
template <typename T>
GN_CPU_INLINE SampleRows<T> sample_rows(const BackwardArgs<T>& p, int64_t n) {
  const int64_t at = n * p.HW * p.channels;
  return {p.x + at, p.dy + at, p.dx != nullptr ? p.dx + at : nullptr, p.ds + n * p.channels, p.db + n * p.channels};
}

// Groups [g0, g0 + gw) of channels-last sample n when its groups are at least a pack wide and its rows few
// (use_group_rows, the forward's rule): each pack of a group's channels summed down the rows in registers, its ds
// and db written straight into the sample's rows of p.ds / p.db (shifted by the group's delta and scaled by its
// rstd once the group's sum of (x - m) is known), the group's coefficients as scalars, then dx group by group with
// a = rstd w[c] formed per pack. The general path's per-channel vectors (sample_constants' m, a, bias,
// sample_coefficients' cx and c1, three double sums per channel folded lane by lane) cost more than the data at a
// few rows. Same per-channel sums as the general path (float down the rows, then double). The backward operator
// alone, 2 threads, 2-core AVX-512 machine, general path -> this (us; ATen's native_group_norm_backward in the
// same runs): (32,4096,1,3) G32 float32 145-150 -> 125 (97-100), (16,2048,3,3) 71-74 -> 55-62 (48-52),
// (64,4096,2,2) 318-323 -> 262-281 (269-298); (32,1280,2,2), 40 channels a group, stayed at ~2x ATen's until the
// group's sums of w ds and w db went into double vectors (one dependent addition per channel before): 1.4x.
// wd: the weights in double (1 without weights).
template <typename T, bool kAct>
void backward_group_rows(const BackwardArgs<T>& p, int64_t n, int64_t g0, int64_t gw, const double* wd) {
  using P = Pack<T>;
  using C = compute_t<T>;
  using PC = Pack<C>;
  constexpr int64_t W = P::kWidth;
  static_assert(PC::kWidth == W, "parameter packs and data packs hold the same elements");
  const int64_t channels = p.channels, HW = p.HW, G = p.G, cpg = channels / G;
  const SampleRows<T> s = sample_rows(p, n);
  const double inv_d = 1.0 / static_cast<double>(cpg * HW);
  // A pack of a C parameter vector (w, bias), as Pack<T>'s two compute-type vectors.
  auto param = [](const C* v, int64_t c, int64_t cnt) { const PC pc = PC::load(v + c, cnt); return P{pc.lo, pc.hi}; };
  with_activation_kind<kAct>(p.act, [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    for (int64_t g = g0; g < g0 + gw; ++g) {
      const C m = p.mean[n * G + g], r = p.rstd[n * G + g];
      const P vm = P::broadcast(m), vr = P::broadcast(r), zero = P::broadcast(C(0));
      const int64_t c0 = g * cpg, c_end = c0 + cpg;
      P dm_lanes = zero;
      for (int64_t c = c0; c < c_end; c += W) {
        const int64_t cnt = std::min(W, c_end - c);
        const P va = p.w != nullptr ? vr * param(p.w, c, cnt) : vr;
        const P vb = kAct && p.bias != nullptr ? param(p.bias, c, cnt) : zero;
        P sd = zero, sb = zero, sm = zero;
        for (int64_t r0 = 0; r0 < HW; ++r0) {
          const int64_t at = r0 * channels + c;
          const P d = (P::load(s.x + at, cnt) - vm).first(cnt);  // (lanes past cnt: 0, so g = 0 there too)
          const P gz = grad_z<T, K>(P::load(s.dy + at, cnt), d, va, vb, p.act);
          sd = fmadd(gz, d, sd);
          sb = sb + gz;
          sm = sm + d;
        }
        dm_lanes = dm_lanes + sm;
        __at_align__ C l1[W];
        __at_align__ C l2[W];
        sd.lanes(l1);
        sb.lanes(l2);
        auto store = [&](int64_t count) {  // (a fixed count for whole packs, which vectorises)
          for (int64_t j = 0; j < count; ++j) s.ds[c + j] = static_cast<double>(l1[j]);
          for (int64_t j = 0; j < count; ++j) s.db[c + j] = static_cast<double>(l2[j]);
        };
        if (cnt == W) store(W);
        else store(cnt);
      }
      // sum w ds and sum w db over the group (ds about the saved mean) in double vectors, the rest in two chains
      // each (one chain per sum, a dependent addition per channel, was most of this function at 40 channels a
      // group).
      using VD = Vectorized<double>;
      constexpr int64_t LD = VD::size();
      VD vs(0.0), vbs(0.0);
      int64_t c = c0;
      for (; c + LD <= c_end; c += LD) {
        const VD vw = VD::loadu(wd + c);
        vs = at::vec::fmadd(vw, VD::loadu(s.ds + c), vs);
        vbs = at::vec::fmadd(vw, VD::loadu(s.db + c), vbs);
      }
      __at_align__ double ls[LD];
      __at_align__ double lb[LD];
      vs.store(ls);
      vbs.store(lb);
      double S = 0, B = 0;
      for (int64_t i = 0; i < LD; ++i) {
        S += ls[i];
        B += lb[i];
      }
      for (; c < c_end; ++c) {
        S += wd[c] * s.ds[c];
        B += wd[c] * s.db[c];
      }
      const double rd = static_cast<double>(r), delta = sum_lanes(dm_lanes) * inv_d;
      for (int64_t c = c0; c < c_end; ++c) s.ds[c] = (s.ds[c] - delta * s.db[c]) * rd;
      if (s.dx == nullptr) continue;
      const GroupCoefficients k = coefficients_of(S - delta * B, B, delta, rd, inv_d);
      const P vcx = P::broadcast(static_cast<C>(k.coef_x)), vc1 = P::broadcast(static_cast<C>(k.coef_1));
      for (int64_t c = c0; c < c_end; c += W) {
        const int64_t cnt = std::min(W, c_end - c);
        const P va = p.w != nullptr ? vr * param(p.w, c, cnt) : vr;
        const P vb = kAct && p.bias != nullptr ? param(p.bias, c, cnt) : zero;
        for (int64_t r0 = 0; r0 < HW; ++r0) {
          const int64_t at = r0 * channels + c;
          const P d = P::load(s.x + at, cnt) - vm;
          const P gz = grad_z<T, K>(P::load(s.dy + at, cnt), d, va, vb, p.act);
          fmadd(va, gz, fmadd(vcx, d, vc1)).store(s.dx + at, cnt);
        }
      }
    }
  });
}

// Channels-last float32 backward without an activation, samples of few rows (backward_group_rows_f32): group by
// group, as ATen's kernel walks them, in AVX-512 registers. The general path (per-channel constant vectors, sums
// folded into double per channel, coefficients, dx by rows) and backward_group_rows (32-lane packs, half idle at
// 40 channels a group; its per-channel double sums written and read back) spent more on each group's bookkeeping
// than on its data at a few rows: operator against ATen's, one thread, 2-core AVX-512 machine, us: (32,1280,4,4)
// G32 168-180 -> 117-119 (ATen 118), (32,1280,2,2) 69-72 -> 58 (47), (32,256,4,4) 47-50 -> 35-36 (37),
// (32,256,3,3) 34 -> 25 (23), (64,512,2,2) 70 -> 58 (51), (8,4096,6,6) 440-470 -> 242-263 (1070-1170). Taken
// for rows <= kGroupRowsMaxRows and groups of >= 8 channels: at 144 and 256 rows the group's rows, strided a
// sample row apart, lost to the general path's row-order walk ((8,640,12,12) 121 -> 148 us, (4,320,16,16) 57 ->
// 70 at 2 threads), and groups of 4 channels, a quarter of each vector, came out even ((32,128,3,2)).
inline bool use_group_kernel_f32(int64_t cpg, int64_t HW) {
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
  return cpg >= 8 && HW <= kGroupRowsMaxRows;
#else
  (void)cpg;
  (void)HW;
  return false;
#endif
}

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
// A block of NV vectors (channels [c, c + 16 NV) of a group ending at c_end; NV <= kGroupVectors) down the
// sample's HW rows (`channels` apart): per lane sd = sum dy (x - m), sb = sum dy, and sm = sum (x - m) over all
// lanes, in float (at most kGroupRowsMaxRows terms a lane). Only the last vector can be partial: its lanes past
// c_end read as 0 and stay 0 (one mask register: ten masks, one a vector, would not fit the eight there are).
// Ten vectors (160 channels) keep a group of up to 160 channels in one pass down its rows, its sums in 20
// registers until delta is known; sm runs in three chains, so its adds do not hold up the row (a chain of ten
// dependent adds a row would take longer than the row's loads).
constexpr int kGroupVectors = 10;
constexpr int kSumChains = 3;
template <int NV>
GN_CPU_INLINE void group_block_sums(const float* x, const float* dy, int64_t channels, int64_t HW, int64_t c,
                                    int64_t c_end, __m512 vm, __m512* sd, __m512* sb, __m512& sm) {
  constexpr int kChains = NV < kSumChains ? NV : kSumChains;
  const __mmask16 last = first_lanes(c_end - (c + 16 * (NV - 1)));
  __m512 smv[kChains];
#pragma GCC unroll 10
  for (int j = 0; j < NV; ++j) sd[j] = sb[j] = _mm512_setzero_ps();
#pragma GCC unroll 3
  for (int j = 0; j < kChains; ++j) smv[j] = _mm512_setzero_ps();
  for (int64_t r = 0; r < HW; ++r) {
    const float* xr = x + r * channels + c;
    const float* gr = dy + r * channels + c;
#pragma GCC unroll 10
    for (int j = 0; j < NV; ++j) {
      const __m512 d = j + 1 < NV ? _mm512_sub_ps(_mm512_loadu_ps(xr + 16 * j), vm)
                                  : _mm512_maskz_sub_ps(last, _mm512_maskz_loadu_ps(last, xr + 16 * j), vm);
      const __m512 g = j + 1 < NV ? _mm512_loadu_ps(gr + 16 * j) : _mm512_maskz_loadu_ps(last, gr + 16 * j);
      sd[j] = _mm512_fmadd_ps(g, d, sd[j]);
      sb[j] = _mm512_add_ps(sb[j], g);
      smv[j % kChains] = _mm512_add_ps(smv[j % kChains], d);
    }
  }
  sm = smv[0];
#pragma GCC unroll 3
  for (int j = 1; j < kChains; ++j) sm = _mm512_add_ps(sm, smv[j]);
}

// dx = a dy + cx (x - m) + c1 for the same block, a = rstd w[c].
template <int NV>
GN_CPU_INLINE void group_block_dx(const float* x, const float* dy, float* dx, int64_t channels, int64_t HW,
                                  int64_t c, int64_t c_end, __m512 vm, __m512 vr, const float* w, __m512 vcx,
                                  __m512 vc1) {
  const __mmask16 last = first_lanes(c_end - (c + 16 * (NV - 1)));
  __m512 va[NV];
#pragma GCC unroll 10
  for (int j = 0; j < NV; ++j) {
    va[j] = w == nullptr ? vr
            : _mm512_mul_ps(vr, j + 1 < NV ? _mm512_loadu_ps(w + c + 16 * j)
                                           : _mm512_maskz_loadu_ps(last, w + c + 16 * j));
  }
  for (int64_t r = 0; r < HW; ++r) {
    const int64_t row = r * channels + c;
#pragma GCC unroll 10
    for (int j = 0; j < NV; ++j) {
      const float* xr = x + row + 16 * j;
      const float* gr = dy + row + 16 * j;
      if (j + 1 < NV) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(xr), vm);
        _mm512_storeu_ps(dx + row + 16 * j, _mm512_fmadd_ps(va[j], _mm512_loadu_ps(gr), _mm512_fmadd_ps(vcx, d, vc1)));
      } else {
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(last, xr), vm);
        _mm512_mask_storeu_ps(dx + row + 16 * j, last,
                              _mm512_fmadd_ps(va[j], _mm512_maskz_loadu_ps(last, gr), _mm512_fmadd_ps(vcx, d, vc1)));
      }
    }
  }
}

// The sums of 8 channels from c (the lanes in `lanes`; d = sum dy (x - m), b = sum dy, as doubles) into the double
// rows ds / db: raw when delta is not known yet (delta = 0, rd = 1), else final, (d - delta b) rd; and w d, w b
// added into their group's double accumulators. Both group kernels write their sums through it, 8 lanes at a time:
// the double conversions come in halves anyway, and a pair's shared vector has a group in each half.
GN_CPU_INLINE void half_sums_out(__mmask8 lanes, int64_t c, __m512d d, __m512d b, double delta, double rd,
                                 const double* wd, double* ds, double* db, __m512d& s_acc, __m512d& b_acc) {
  const __m512d final_d = _mm512_mul_pd(_mm512_fnmadd_pd(_mm512_set1_pd(delta), b, d), _mm512_set1_pd(rd));
  _mm512_mask_storeu_pd(ds + c, lanes, final_d);
  _mm512_mask_storeu_pd(db + c, lanes, b);
  const __m512d w = _mm512_maskz_loadu_pd(lanes, wd + c);
  s_acc = _mm512_fmadd_pd(w, d, s_acc);
  b_acc = _mm512_fmadd_pd(w, b, b_acc);
}

// A block's per-channel sums (channels [c, c_end), NV vectors) through half_sums_out into one group's accumulators.
template <int NV>
GN_CPU_INLINE void group_block_out(const __m512* sd, const __m512* sb, int64_t c, int64_t c_end, double delta,
                                   double rd, const double* wd, double* ds, double* db, __m512d& s_acc,
                                   __m512d& b_acc) {
#pragma GCC unroll 10
  for (int j = 0; j < NV; ++j) {
    const int64_t cj = c + 16 * j;
    const __mmask16 mask = first_lanes(c_end - cj);
    half_sums_out(static_cast<__mmask8>(mask & 0xFF), cj, low_pd(sd[j]), low_pd(sb[j]), delta, rd, wd, ds, db,
                  s_acc, b_acc);
    half_sums_out(static_cast<__mmask8>(mask >> 8), cj + 8, high_pd(sd[j]), high_pd(sb[j]), delta, rd, wd, ds, db,
                  s_acc, b_acc);
  }
}

// dx's two coefficients as broadcast floats, from the group's raw sums S0 = sum w ds (about the saved mean) and
// B = sum w db.
struct DxCoefficients {
  __m512 cx, c1;
};
GN_CPU_INLINE DxCoefficients group_dx_coefficients(double S0, double B, double delta, double rd, double inv_d) {
  const GroupCoefficients k = coefficients_of(S0 - delta * B, B, delta, rd, inv_d);
  return {_mm512_set1_ps(static_cast<float>(k.coef_x)), _mm512_set1_ps(static_cast<float>(k.coef_1))};
}

// One group of at most kGroupVectors vectors: its sums stay in registers until delta is known, and ds / db are
// written once, final (written raw and read back to be shifted, the masked stores stalled the loads after them:
// a tenth of the kernel at (32,1280,2,2)). With blocks of 4 vectors, groups of 65-160 channels went block by
// block (two or three passes down the rows, raw sums written and shifted): operator, one thread, A/B in one build
// (block width from the environment), 2-core AVX-512 machine, us, 4 -> 10 vectors: (16,4096,2,2) G32 97-102 ->
// 80-85 (ATen 73-78), (16,1280,3,3) G16 50 -> 43 (42), (16,3072,3,3) G32 118-126 -> 109-120, (16,2560,8,8) G32
// 1400-1540 -> 1160-1220 (2500-2700). On the 16-core Xeon host of an H200 machine the two widths measured level
// (within its 10-15% noise, 1 and 16 threads), and so did the general path at groups of 80 channels and more.
template <int NV>
GN_CPU_INLINE void group_one_block(const BackwardArgs<float>& p, const float* x, const float* dy, float* dx,
                                   int64_t c0, int64_t c_end, float m, float r, double inv_d, const double* wd,
                                   double* ds_row, double* db_row) {
  const __m512 vm = _mm512_set1_ps(m), vr = _mm512_set1_ps(r);
  __m512 sd[NV], sb[NV], sm;
  group_block_sums<NV>(x, dy, p.channels, p.HW, c0, c_end, vm, sd, sb, sm);
  const double rd = static_cast<double>(r), delta = static_cast<double>(_mm512_reduce_add_ps(sm)) * inv_d;
  __m512d s_acc = _mm512_setzero_pd(), b_acc = _mm512_setzero_pd();
  group_block_out<NV>(sd, sb, c0, c_end, delta, rd, wd, ds_row, db_row, s_acc, b_acc);
  if (dx == nullptr) return;
  const DxCoefficients k =
      group_dx_coefficients(_mm512_reduce_add_pd(s_acc), _mm512_reduce_add_pd(b_acc), delta, rd, inv_d);
  group_block_dx<NV>(x, dy, dx, p.channels, p.HW, c0, c_end, vm, vr, p.w, k.cx, k.c1);
}

// Two groups of 8 NV channels each (NV odd: groups of 8, 24, 40, ... channels) as NV whole vectors: vectors
// [0, H) are group A's, vector H = NV / 2 holds A's last 8 channels (lanes 0-7) and B's first 8 (lanes 8-15),
// vectors (H, NV) are B's. Every 8-lane half belongs to one group, so the double conversions (per half anyway)
// and the group sums split cleanly. One group at a time left the last vector half idle: (32,256,4,4) G32 (8
// channels) 53 us against ATen's 37, paired 35.5. Operator, one thread, 2-core AVX-512 machine, builds
// alternated, one group at a time -> pairs (us, ATen in brackets): (32,768,4,4) G32 (24 channels) 95-97 -> 70-71
// (80-88), (32,1280,4,4) G32 (40) 131-141 -> 110-115 (123-142), (16,1792,3,3) G32 (56) 63-64 -> 55-57 (57-58),
// (8,2304,4,4) G32 (72) 61-64 -> 55-57 (55-59).
template <int NV>
GN_CPU_INLINE void group_pair(const BackwardArgs<float>& p, const float* x, const float* dy, float* dx, int64_t c0,
                              const float* mean, const float* rstd, double inv_d, const double* wd, double* ds_row,
                              double* db_row) {
  static_assert(NV % 2 == 1, "a pair of groups of 8 NV channels each fills NV vectors only for odd NV");
  constexpr int H = NV / 2;
  constexpr __mmask16 kHigh = 0xFF00;
  const int64_t channels = p.channels, HW = p.HW;
  // Per vector j: group A's value, B's, or A's in lanes 0-7 and B's in 8-15 (j == H).
  auto per_vector = [](int j, __m512 a, __m512 b) { return j < H ? a : j > H ? b : _mm512_mask_blend_ps(kHigh, a, b); };
  const __m512 mA = _mm512_set1_ps(mean[0]), mB = _mm512_set1_ps(mean[1]);
  const __m512 rA = _mm512_set1_ps(rstd[0]), rB = _mm512_set1_ps(rstd[1]);
  __m512 sd[NV], sb[NV];
  __m512 smA = _mm512_setzero_ps(), smB = smA, smH = smA;  // sums of x - m: A's vectors, B's, the shared one
#pragma GCC unroll 9
  for (int j = 0; j < NV; ++j) sd[j] = sb[j] = _mm512_setzero_ps();
  for (int64_t r = 0; r < HW; ++r) {
    const int64_t row = r * channels + c0;
#pragma GCC unroll 9
    for (int j = 0; j < NV; ++j) {
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + row + 16 * j), per_vector(j, mA, mB));
      const __m512 g = _mm512_loadu_ps(dy + row + 16 * j);
      sd[j] = _mm512_fmadd_ps(g, d, sd[j]);
      sb[j] = _mm512_add_ps(sb[j], g);
      if (j < H) smA = _mm512_add_ps(smA, d);
      else if (j > H) smB = _mm512_add_ps(smB, d);
      else smH = _mm512_add_ps(smH, d);
    }
  }
  const double sum_a = static_cast<double>(_mm512_reduce_add_ps(smA)) + _mm512_reduce_add_pd(low_pd(smH));
  const double sum_b = static_cast<double>(_mm512_reduce_add_ps(smB)) + _mm512_reduce_add_pd(high_pd(smH));
  const double rd[2] = {static_cast<double>(rstd[0]), static_cast<double>(rstd[1])};
  const double delta[2] = {sum_a * inv_d, sum_b * inv_d};
  __m512d s_acc[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()}, b_acc[2] = {s_acc[0], s_acc[1]};
#pragma GCC unroll 9
  for (int j = 0; j < NV; ++j) {
    const __m512d d_pd[2] = {low_pd(sd[j]), high_pd(sd[j])}, b_pd[2] = {low_pd(sb[j]), high_pd(sb[j])};
    for (int h = 0; h < 2; ++h) {
      const int grp = j < H || (j == H && h == 0) ? 0 : 1;
      half_sums_out(0xFF, c0 + 16 * j + 8 * h, d_pd[h], b_pd[h], delta[grp], rd[grp], wd, ds_row, db_row,
                    s_acc[grp], b_acc[grp]);
    }
  }
  if (dx == nullptr) return;
  DxCoefficients k[2];
  for (int q = 0; q < 2; ++q) {
    k[q] = group_dx_coefficients(_mm512_reduce_add_pd(s_acc[q]), _mm512_reduce_add_pd(b_acc[q]), delta[q], rd[q],
                                 inv_d);
  }
  __m512 va[NV];
#pragma GCC unroll 9
  for (int j = 0; j < NV; ++j) {
    const __m512 r = per_vector(j, rA, rB);
    va[j] = p.w != nullptr ? _mm512_mul_ps(r, _mm512_loadu_ps(p.w + c0 + 16 * j)) : r;
  }
  const __m512 cxH = per_vector(H, k[0].cx, k[1].cx), c1H = per_vector(H, k[0].c1, k[1].c1);
  const __m512 mH = per_vector(H, mA, mB);
  for (int64_t r = 0; r < HW; ++r) {
    const int64_t row = r * channels + c0;
#pragma GCC unroll 9
    for (int j = 0; j < NV; ++j) {
      const __m512 m = j < H ? mA : j > H ? mB : mH;
      const __m512 cx = j < H ? k[0].cx : j > H ? k[1].cx : cxH;
      const __m512 c1 = j < H ? k[0].c1 : j > H ? k[1].c1 : c1H;
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + row + 16 * j), m);
      _mm512_storeu_ps(dx + row + 16 * j,
                       _mm512_fmadd_ps(va[j], _mm512_loadu_ps(dy + row + 16 * j), _mm512_fmadd_ps(cx, d, c1)));
    }
  }
}

// Calls f(std::integral_constant<int, NV>) for NV = cpg / 8 where groups of cpg channels pair up into whole
// vectors (cpg = 8, 24, 40, 56, 72: NV odd, at most kPairVectors); returns false (f not called) otherwise.
constexpr int kPairVectors = 9;
template <typename F>
GN_CPU_INLINE bool with_pair_vectors(int64_t cpg, F&& f) {
  switch (cpg) {
    case 8: f(std::integral_constant<int, 1>{}); return true;
    case 24: f(std::integral_constant<int, 3>{}); return true;
    case 40: f(std::integral_constant<int, 5>{}); return true;
    case 56: f(std::integral_constant<int, 7>{}); return true;
    case 72: f(std::integral_constant<int, 9>{}); return true;
    default: return false;
  }
}
static_assert(kPairVectors == 9, "with_pair_vectors covers groups of up to 8 kPairVectors channels");

// Calls f(std::integral_constant<int, NV>) for NV = the vectors of a block of `channels` (1 .. kGroupVectors).
template <typename F>
GN_CPU_INLINE void with_block_vectors(int64_t channels, F&& f) {
  switch ((std::min<int64_t>(channels, 16 * kGroupVectors) + 15) / 16) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 9: f(std::integral_constant<int, 9>{}); break;
    default: f(std::integral_constant<int, 10>{});
  }
}
static_assert(kGroupVectors == 10, "with_block_vectors covers 1 .. kGroupVectors vectors");

// Groups [g0, g0 + gw) of channels-last float32 sample n (use_group_kernel_f32), no activation. wd: the weights
// in double (1 without weights). Groups of more than kGroupVectors vectors go block by block: raw sums written,
// then shifted by the group's delta once it is known; the sums of x - m per block added in double.
inline void backward_group_rows_f32(const BackwardArgs<float>& p, int64_t n, int64_t g0, int64_t gw,
                                    const double* wd) {
  const int64_t channels = p.channels, HW = p.HW, G = p.G, cpg = channels / G;
  const SampleRows<float> s = sample_rows(p, n);
  const float* mean = p.mean + n * G;
  const float* rstd = p.rstd + n * G;
  const double inv_d = 1.0 / static_cast<double>(cpg * HW);
  constexpr int64_t kBlock = 16 * kGroupVectors;
  int64_t g = g0;
  with_pair_vectors(cpg, [&](auto nv) {
    for (; g + 2 <= g0 + gw; g += 2) {
      group_pair<decltype(nv)::value>(p, s.x, s.dy, s.dx, g * cpg, mean + g, rstd + g, inv_d, wd, s.ds, s.db);
    }
  });
  if (cpg <= kBlock) {
    with_block_vectors(cpg, [&](auto nv) {
      constexpr int NV = decltype(nv)::value;
      for (; g < g0 + gw; ++g) {
        group_one_block<NV>(p, s.x, s.dy, s.dx, g * cpg, (g + 1) * cpg, mean[g], rstd[g], inv_d, wd, s.ds, s.db);
      }
    });
    return;
  }
  for (; g < g0 + gw; ++g) {
    const __m512 vm = _mm512_set1_ps(mean[g]), vr = _mm512_set1_ps(rstd[g]);
    const int64_t c0 = g * cpg, c_end = c0 + cpg;
    double dm = 0;
    __m512d s_acc = _mm512_setzero_pd(), b_acc = _mm512_setzero_pd();
    for (int64_t c = c0; c < c_end; c += kBlock) {
      with_block_vectors(c_end - c, [&](auto nv) {
        constexpr int NV = decltype(nv)::value;
        __m512 sd[NV], sb[NV], sm;
        group_block_sums<NV>(s.x, s.dy, channels, HW, c, c_end, vm, sd, sb, sm);
        dm += static_cast<double>(_mm512_reduce_add_ps(sm));
        group_block_out<NV>(sd, sb, c, c_end, 0.0, 1.0, wd, s.ds, s.db, s_acc, b_acc);
      });
    }
    const double rd = static_cast<double>(rstd[g]), delta = dm * inv_d;
    const __m512d vdelta = _mm512_set1_pd(delta), vrd = _mm512_set1_pd(rd);
    for (int64_t c = c0; c < c_end; c += 8) {  // ds about the exact mean, times rstd
      const __mmask8 lanes = static_cast<__mmask8>(first_lanes(c_end - c));  // (at most 8 of them)
      const __m512d v = _mm512_maskz_loadu_pd(lanes, s.ds + c), b = _mm512_maskz_loadu_pd(lanes, s.db + c);
      _mm512_mask_storeu_pd(s.ds + c, lanes, _mm512_mul_pd(_mm512_fnmadd_pd(vdelta, b, v), vrd));
    }
    if (s.dx == nullptr) continue;
    const DxCoefficients k =
        group_dx_coefficients(_mm512_reduce_add_pd(s_acc), _mm512_reduce_add_pd(b_acc), delta, rd, inv_d);
    for (int64_t c = c0; c < c_end; c += kBlock) {
      with_block_vectors(c_end - c, [&](auto nv) {
        group_block_dx<decltype(nv)::value>(s.x, s.dy, s.dx, channels, HW, c, c_end, vm, vr, p.w, k.cx, k.c1);
      });
    }
  }
}
#endif

template <typename T, bool kAct>
void backward_channels_last(const BackwardArgs<T>& p) {
  using C = compute_t<T>;
  const int64_t N = p.N, G = p.G, channels = p.channels, HW = p.HW, cpg = channels / G;
  const int64_t cpad = round_up(channels, Pack<T>::kWidth), sample = HW * channels;
  const bool stream = p.dx && stream_output<T>(N * sample);
  // float32 without an activation, few rows: the group kernel (backward_group_rows_f32).
  const bool group_kernel = std::is_same_v<T, float> && !kAct && use_group_kernel_f32(cpg, HW);
  // Chunks of groups as in forward_channels_last (not with streamed stores, which want whole aligned rows; the
  // group kernel stores normally, and without chunks fewer samples than threads went the parted path below, its
  // merges serial: (8,4096,6,6) G32 at 16 threads ~0.7 ms, 1.8-2.4x PyTorch's, on the Xeon host of an H200).
  const int64_t line = line_elements<T>();
  const int64_t chunks =
      stream && !group_kernel ? 1 : group_chunks(N, sample, G, channels, Pack<T>::kWidth, line);
  const int64_t parts = chunks > 1 ? 1 : std::min(HW, split_parts(N, sample, kMinPartElements));
  const int64_t items = N * parts;
  const int64_t grain = grain_items(items, sample / parts + channels * kChannelOverheadElements);
  // Rows [bounds[j], bounds[j + 1]) of every sample are its part j (computed once, no division per item).
  std::vector<int64_t> bounds(static_cast<size_t>(parts + 1));
  for (int64_t j = 0; j <= parts; ++j) bounds[j] = part_begin(HW, parts, j, 1);
  // Per sample, five zero-padded per-channel vectors: m, a, bias (read by both passes), cx, c1 (second pass), at
  // k + which * stride: one set per task on the whole-sample path, as wide as its chunk (a zero-filled set per
  // sample of the call was a twentieth of the backward of (128,128,3,2)), one per sample on the parted one.
  enum { kM = 0, kA = 1, kBias = 2, kCx = 3, kC1 = 4, kVectors = 5 };
  // With an activation, float32 and float64: the sums pass stores dz into dx and the dx pass reads it back in
  // place, so act' runs once per element, not twice: where dx is not streamed (a thread's share of it below a
  // core's L2: dz read back from cache), and for the activations of an exp, tanh or erf (act' costs more than the
  // extra write and read of dx) below AVX-512 also where it is. 2-core AMD EPYC (AVX2), float32 backward,
  // PyTorch's time against ours evaluating act' twice -> once: (8,40,14,18) G1 SiLU 1.57x -> 1.14x, GELU 1.2x ->
  // 0.82x; (8,320,14,18) G32 SiLU, dx streamed, see NOTES. AVX-512 (16 floats a register, more threads on one
  // memory bus) keeps act' twice where dx streams: not measured there.
#if defined(CPU_CAPABILITY_AVX512)
  constexpr bool kActOverTraffic = false;
#else
  constexpr bool kActOverTraffic = true;
#endif
  const bool dz_in_dx = kAct && std::is_same_v<T, C> && p.dx &&
                        (!stream || (kActOverTraffic && gn_act::is_transcendental(p.act.kind)));
  // dx of rows [lo, hi) of the channels cw of one sample from off (their constants k, kpad apart)
  auto grad_input_part = [&](int64_t off, int64_t cw, int64_t lo, int64_t hi, const C* k, int64_t kpad,
                             bool one_group) {
    const C *m = k + kM * kpad, *a = k + kA * kpad, *bias = k + kBias * kpad, *cx = k + kCx * kpad,
            *c1 = k + kC1 * kpad;
    if (dz_in_dx) {
      grad_input_rows<T, false>(p.x + off, p.dx + off, p.dx + off, cw, channels, lo, hi, m, a, bias, cx, c1, p.act,
                                stream, true, one_group);
    } else {
      grad_input_rows<T, kAct>(p.x + off, p.dy + off, p.dx + off, cw, channels, lo, hi, m, a, bias, cx, c1, p.act,
                               stream, false, one_group);
    }
  };
  std::vector<double> wd(static_cast<size_t>(channels), 1.0);  // the weights in double
  if (p.w) std::copy(p.w, p.w + channels, wd.begin());
  // Sample n's m, a and bias for its groups [g0, g0 + gw) (sample_constants of the forward, unfolded: its m, a,
  // b are these), at k[0, gw * cpg) of each.
  auto fill_constants = [&](int64_t n, int64_t g0, int64_t gw, C* k, int64_t stride) {
    const int64_t c0 = g0 * cpg;
    sample_constants<false>(p.mean + n * G + g0, p.rstd + n * G + g0, gw, cpg, p.w ? p.w + c0 : nullptr,
                            p.bias ? p.bias + c0 : nullptr, k + kM * stride, stride);
  };
  // The same groups' cx, c1, and their part of sample n's rows of ds and db, from their channel sums (ds, db, dm:
  // gw * cpg each).
  auto fill_coefficients = [&](int64_t n, int64_t g0, int64_t gw, C* k, int64_t stride, const double* ds,
                               const double* db, const double* dm) {
    const int64_t c0 = g0 * cpg;
    sample_coefficients(ds, db, dm, gw, cpg, HW, wd.data() + c0, p.rstd + n * G + g0, p.ds + n * channels + c0,
                        p.db + n * channels + c0, k + kCx * stride, k + kC1 * stride);
  };
  if (parts == 1) {
    // Whole samples, or chunks of their groups (chunks > 1, equal widths: the buffers' padding stays zero): each
    // task takes a chunk's constants, sums, coefficients and dx in a row, one parallel region with no serial step
    // between two (as forward_channels_last does).
    const int64_t gw = G / chunks, cw = gw * cpg;
    const int64_t kpad = round_up(cw, Pack<T>::kWidth);  // (cpad without chunks)
    const bool group_rows = use_group_rows<T>(gw, cpg, HW);
    at::parallel_for(0, N * chunks, chunks > 1 ? 1 : grain, [&](int64_t first, int64_t last) {
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float> && !kAct) {
        if (group_kernel) {  // (normal stores only: no stream_fence)
          for (int64_t it = first; it < last; ++it) {
            backward_group_rows_f32(p, it / chunks, (it % chunks) * gw, gw, wd.data());
          }
          return;
        }
      }
#endif
      if (group_rows) {
        for (int64_t it = first; it < last; ++it) {
          backward_group_rows<T, kAct>(p, it / chunks, (it % chunks) * gw, gw, wd.data());
        }
        if (stream) stream_fence();
        return;
      }
      std::vector<double> sums(static_cast<size_t>(3 * cw));  // ds, db, dm
      double* const ds = sums.data();
      double* const db = ds + cw;
      double* const dm = db + cw;
      std::vector<C> vecs(static_cast<size_t>(kVectors * kpad), C(0));
      C* const k = vecs.data();
      for (int64_t it = first; it < last; ++it) {
        const int64_t n = it / chunks, g0 = (it % chunks) * gw, off = n * sample + g0 * cpg;
        fill_constants(n, g0, gw, k, kpad);
        channel_sums_rows<T, kAct>(p.x + off, p.dy + off, cw, channels, 0, HW, k + kM * kpad, k + kA * kpad,
                                   k + kBias * kpad, p.act, ds, db, dm, dz_in_dx ? p.dx + off : nullptr);
        fill_coefficients(n, g0, gw, k, kpad, ds, db, dm);
        if (p.dx) grad_input_part(off, cw, 0, HW, k, kpad, gw == 1);
      }
    });
    return;
  }
  // Samples cut into parts (fewer samples than threads). First region: each part's channel sums (ds, db, dm) and
  // their sums over each group (sum dm, sum w ds, sum w db: all the dx coefficients need). Serial: the parts' group
  // sums added (parts x G x 3), each sample's coefficients. Second region: each item adds the parts' ds and db of
  // a 1 / parts share of its sample's channels into the parameter sums (p.ds, p.db), and takes its part's dx. (The
  // serial step added every part's per-channel sums, parts x channels x 3, written by as many cores: (1,1280,17,23)
  // with 16 parts, 480 KB read by one thread.) Item it's channel sums at sums[3 * it * channels]: ds, db, dm.
  std::vector<C> vecs(static_cast<size_t>(N * kVectors * cpad), C(0));
  auto vec = [&](int64_t n, int which) { return &vecs[(n * kVectors + which) * cpad]; };
  for (int64_t n = 0; n < N; ++n) fill_constants(n, 0, G, vec(n, kM), cpad);
  std::vector<double> sums(static_cast<size_t>(3 * items * channels));
  std::vector<double> part_groups(static_cast<size_t>(3 * items * G));  // item it's dm, S0, B at [3 it G], G apart
  at::parallel_for(0, items, grain, [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const int64_t n = it / parts;
      double* const ds = &sums[3 * it * channels];
      channel_sums_rows<T, kAct>(p.x + n * sample, p.dy + n * sample, channels, channels, bounds[it % parts],
                                 bounds[it % parts + 1], vec(n, kM), vec(n, kA), vec(n, kBias), p.act, ds,
                                 ds + channels, ds + 2 * channels, dz_in_dx ? p.dx + n * sample : nullptr);
      double* const out = &part_groups[3 * it * G];
      group_linear_sums(ds, ds + channels, ds + 2 * channels, G, cpg, wd.data(), out, out + G, out + 2 * G);
    }
  });
  // Per sample and group: delta (the mean's shift) and rstd in double, for the parameter sums.
  std::vector<double> delta(static_cast<size_t>(N * G)), rd(delta.size());
  const double inv_d = 1.0 / static_cast<double>(cpg * HW);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      double dm = 0, S0 = 0, B = 0;
      for (int64_t j = 0; j < parts; ++j) {  // in part order
        const double* const part = &part_groups[3 * (n * parts + j) * G];
        dm += part[g];
        S0 += part[G + g];
        B += part[2 * G + g];
      }
      const double r = static_cast<double>(p.rstd[n * G + g]), dl = dm * inv_d;
      const GroupCoefficients k = coefficients_of(S0 - dl * B, B, dl, r, inv_d);
      delta[n * G + g] = dl;
      rd[n * G + g] = r;
      std::fill_n(vec(n, kCx) + g * cpg, cpg, static_cast<C>(k.coef_x));
      std::fill_n(vec(n, kC1) + g * cpg, cpg, static_cast<C>(k.coef_1));
    }
  }
  at::parallel_for(0, items, grain, [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const int64_t n = it / parts, j = it % parts;
      // Channels [c_lo, c_hi) of sample n: the parts' ds and db in part order, then ds about the exact mean.
      const int64_t c_lo = channels * j / parts, c_hi = channels * (j + 1) / parts;
      for (int64_t c = c_lo; c < c_hi; ++c) {
        double ds = 0, db = 0;
        for (int64_t k = 0; k < parts; ++k) {
          const double* const part = &sums[3 * (n * parts + k) * channels];
          ds += part[c];
          db += part[channels + c];
        }
        const int64_t g = c / cpg;
        p.ds[n * channels + c] = (ds - delta[n * G + g] * db) * rd[n * G + g];
        p.db[n * channels + c] = db;
      }
      if (p.dx) grad_input_part(n * sample, channels, bounds[j], bounds[j + 1], vec(n, kM), cpad, G == 1);
    }
  });
}

}  // namespace gn_cpu
#endif  // GN_INLINE_CPU_BACKWARD_KERNELS
"""
