// Fused CPU kernels of the SRU elementwise recurrence (gau_keras.recurrence; docs/srupp.md).
//
// Same contract and layouts as gau_keras/recurrence.py's XLA forward/backward pair:
//   u [B, L, dirs, d, k] (k = 3 or 4), x [B, L, d_in], weight_c and bias [2, dirs, d],
//   c0 and mask_c [B, dirs*d], pad [B, L] (true = padding), scale_x a scalar.
// The forward keeps c_seq [B, L, dirs*d] (c_t in time order, the carried c on padding), the only
// tensor the backward needs besides the op's own inputs.
//
// Each (batch row, direction, block of hidden units) is an independent chain: one pass over time
// reads u once and writes h (forward) or du (backward) once.  Chains are spread over the CPU
// worker threads.  The gates' sigmoids go through Eigen's vectorised logistic, a block at a time.
// The backward writes per-batch-row partial sums for weight_c, bias and scale_x; the Python side
// adds them up (no write conflicts between threads).
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#ifdef __AVX__
#include <immintrin.h>
#endif

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace gau_keras {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
using int64 = std::int64_t;

constexpr int64 kBlock = 512;  // hidden units per chain (the work unit); wide rows keep the memory streams long

REGISTER_OP("GauKerasSruForward")
    .Input("u: T").Input("x: T").Input("weight_c: T").Input("bias: T").Input("c0: T")
    .Input("pad: bool").Input("scale_x: T").Input("mask_c: T")
    .Output("h: T").Output("c_last: T").Output("c_seq: T")
    .Attr("T: {float, double}").Attr("bidirectional: bool")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle u, c0;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &u));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 2, &c0));
      ShapeHandle h = c->MakeShape({c->Dim(u, 0), c->Dim(u, 1), c->Dim(c0, 1)});
      c->set_output(0, h);
      c->set_output(1, c0);
      c->set_output(2, h);
      return absl::OkStatus();
    });

REGISTER_OP("GauKerasSruBackward")
    .Input("u: T").Input("x: T").Input("weight_c: T").Input("bias: T").Input("c0: T")
    .Input("pad: bool").Input("scale_x: T").Input("mask_c: T")
    .Input("c_seq: T").Input("dh: T").Input("dc_last: T")
    .Output("du: T").Output("dx: T").Output("dweight_c_rows: T").Output("dbias_rows: T")
    .Output("dc0: T").Output("dscale_rows: T")
    .Attr("T: {float, double}").Attr("bidirectional: bool")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle u, c0, w;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &u));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 2, &c0));
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(1));
      c->set_output(2, c->MakeShape({c->Dim(u, 0), c->Dim(w, 0)}));
      c->set_output(3, c->MakeShape({c->Dim(u, 0), c->Dim(w, 0)}));
      c->set_output(4, c0);
      c->set_output(5, c->MakeShape({c->Dim(u, 0), c->Dim(c0, 1)}));
      return absl::OkStatus();
    });

// Sizes of one call, checked against every input.
struct Layout {
  int64 B, L, dirs, d, k, din;
  int64 blocks() const { return (d + kBlock - 1) / kBlock; }
  int64 units() const { return B * dirs * blocks(); }
};

// Asks for the rows the next time step will touch: consecutive steps are a whole [dirs*d*k] row
// apart, further than the hardware prefetcher follows, and each step is too short to hide the misses.
inline void Prefetch(const void* start, int64 bytes, bool write) {
  const char* p = static_cast<const char*>(start);
  for (int64 i = 0; i < bytes; i += 64) {
    if (write) __builtin_prefetch(p + i, 1, 1); else __builtin_prefetch(p + i, 0, 1);
  }
}

// Copies a finished row to its output with streaming stores where AVX has them: the outputs are
// read again only by other ops, so writing around the cache saves reading every line before
// overwriting it.  Chains end with Fence() so the stores are visible when the op returns.
template <typename T>
inline void StoreRow(T* dst, const T* src, int64 m) {
  std::copy(src, src + m, dst);
}

#ifdef __AVX__
template <>
inline void StoreRow<float>(float* dst, const float* src, int64 m) {
  int64 j = 0;
  for (; j < m && (reinterpret_cast<std::uintptr_t>(dst + j) & 31); ++j) dst[j] = src[j];
  for (; j + 8 <= m; j += 8) _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
  for (; j < m; ++j) dst[j] = src[j];
}

template <>
inline void StoreRow<double>(double* dst, const double* src, int64 m) {
  int64 j = 0;
  for (; j < m && (reinterpret_cast<std::uintptr_t>(dst + j) & 31); ++j) dst[j] = src[j];
  for (; j + 4 <= m; j += 4) _mm256_stream_pd(dst + j, _mm256_loadu_pd(src + j));
  for (; j < m; ++j) dst[j] = src[j];
}

inline void Fence() { _mm_sfence(); }
#else
inline void Fence() {}
#endif

template <typename T>
void Sigmoid(T* values, int64 n) {
  Eigen::TensorMap<Eigen::Tensor<T, 1>> t(values, n);
  t = t.sigmoid();
}

// One step's gates of a chain from its row of u [m, K] and c_{t-1}: de-interleaves u0 and the skip
// term x' (u's 4th value, or x·scale_x) into unit-stride buffers and computes f and r.
template <typename T, int K>
inline void Gates(const T* __restrict u, const T* __restrict xs, const T* __restrict c_prev, T scale,
                  const T* vf, const T* bf, const T* vr, const T* br, int64 m, T* __restrict u0,
                  T* __restrict f, T* __restrict r, T* __restrict xp) {
#pragma GCC ivdep
  for (int64 j = 0; j < m; ++j) {
    u0[j] = u[j * K];
    f[j] = u[j * K + 1] + vf[j] * c_prev[j] + bf[j];
    r[j] = u[j * K + 2] + vr[j] * c_prev[j] + br[j];
    xp[j] = K == 4 ? u[j * K + 3] : xs[j] * scale;
  }
  Sigmoid(f, m);
  Sigmoid(r, m);
}

void CheckLayout(OpKernelContext* ctx, bool bidirectional, Layout* s) {
  const Tensor& u = ctx->input(0);
  const Tensor& x = ctx->input(1);
  const Tensor& w = ctx->input(2);
  s->dirs = bidirectional ? 2 : 1;
  OP_REQUIRES(ctx, u.dims() == 3 && x.dims() == 3 && w.dims() == 1 && w.dim_size(0) % (2 * s->dirs) == 0,
              absl::InvalidArgumentError("sru kernel: u [B, L, dirs*d*k], x [B, L, d_in], weight_c [2*dirs*d]"));
  s->B = u.dim_size(0), s->L = u.dim_size(1), s->d = w.dim_size(0) / (2 * s->dirs), s->din = x.dim_size(2);
  OP_REQUIRES(ctx, s->d > 0 && u.dim_size(2) % (s->dirs * s->d) == 0,
              absl::InvalidArgumentError("sru kernel: u's last dimension is not dirs*d*k"));
  s->k = u.dim_size(2) / (s->dirs * s->d);
  const int64 n = s->dirs * s->d;
  OP_REQUIRES(ctx, (s->k == 3 || s->k == 4) && (s->k == 4 || s->din == n) && x.dim_size(0) == s->B &&
                       x.dim_size(1) == s->L && ctx->input(3).NumElements() == 2 * n &&
                       ctx->input(4).shape() == TensorShape({s->B, n}) &&
                       ctx->input(5).shape() == TensorShape({s->B, s->L}) && ctx->input(6).NumElements() == 1 &&
                       ctx->input(7).shape() == TensorShape({s->B, n}),
              absl::InvalidArgumentError("sru kernel: inconsistent shapes of u, x, bias, c0, pad, scale_x, mask_c"));
}

void ForEachUnit(OpKernelContext* ctx, const Layout& s, const std::function<void(int64, int64, int64, int64)>& fn) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  const int64 cost = s.L * std::min(s.d, kBlock) * 60;
  ::tensorflow::Shard(workers->num_threads, workers->workers, s.units(), cost, [&](int64 begin, int64 end) {
    for (int64 unit = begin; unit < end; ++unit) {
      const int64 block = unit % s.blocks(), dir = (unit / s.blocks()) % s.dirs, b = unit / (s.blocks() * s.dirs);
      const int64 j0 = block * kBlock;
      fn(b, dir, j0, std::min(kBlock, s.d - j0));
    }
  });
}

// The eight inputs both ops take first (u, x, weight_c, bias, c0, pad, scale_x, mask_c).
template <typename T>
struct Inputs {
  const T *U, *X, *W, *Bias, *C0;
  const bool* Pad;
  T scale;
  const T* M;
  explicit Inputs(OpKernelContext* ctx)
      : U(ctx->input(0).flat<T>().data()), X(ctx->input(1).flat<T>().data()), W(ctx->input(2).flat<T>().data()),
        Bias(ctx->input(3).flat<T>().data()), C0(ctx->input(4).flat<T>().data()),
        Pad(ctx->input(5).flat<bool>().data()), scale(ctx->input(6).flat<T>()(0)),
        M(ctx->input(7).flat<T>().data()) {}
};

template <typename T>
struct ForwardArgs : Inputs<T> {
  const Layout& s;
  T *H, *CLast, *CSeq;
  ForwardArgs(OpKernelContext* ctx, const Layout& layout, T* h, T* c_last, T* c_seq)
      : Inputs<T>(ctx), s(layout), H(h), CLast(c_last), CSeq(c_seq) {}
};

// One chain of the forward: batch row b, direction dir, hidden units [j0, j0 + m).
// u's K values of a unit are de-interleaved into unit-stride buffers first, so the arithmetic vectorises.
template <typename T, int K>
void ForwardChain(const ForwardArgs<T>& a, int64 b, int64 dir, int64 j0, int64 m) {
  const Layout& s = a.s;
  const int64 n = s.dirs * s.d, col = dir * s.d + j0;  // this chain's column in [.., dirs*d]
  std::vector<T> buffer(6 * m);
  T* __restrict c = buffer.data();
  T* __restrict f = c + m;
  T* __restrict r = f + m;
  T* __restrict u0 = r + m;
  T* __restrict xp = u0 + m;
  T* __restrict h_row = xp + m;
  const T *vf = a.W + col, *vr = a.W + n + col, *bf = a.Bias + col, *br = a.Bias + n + col;
  const T* mask = a.M + b * n + col;
  std::copy(a.C0 + b * n + col, a.C0 + b * n + col + m, c);
  for (int64 step = 0; step < s.L; ++step) {
    const int64 t = dir == 0 ? step : s.L - 1 - step, row = b * s.L + t;
    T* __restrict h = a.H + row * n + col;
    T* __restrict cs = a.CSeq + row * n + col;
    if (a.Pad[row]) {
      std::fill(h, h + m, T(0));
      std::copy(c, c + m, cs);
      continue;
    }
    const T* __restrict u = a.U + (row * n + col) * K;
    const T* __restrict xs = a.X + row * s.din + col;
    if (step + 1 < s.L) {
      const int64 next = b * s.L + (dir == 0 ? t + 1 : t - 1);
      Prefetch(a.U + (next * n + col) * K, m * K * sizeof(T), false);
      if (K == 3) Prefetch(a.X + next * s.din + col, m * sizeof(T), false);
    }
    Gates<T, K>(u, xs, c, a.scale, vf, bf, vr, br, m, u0, f, r, xp);
#pragma GCC ivdep
    for (int64 j = 0; j < m; ++j) {
      const T cn = u0[j] + (c[j] - u0[j]) * f[j];
      h_row[j] = xp[j] + (cn - xp[j]) * mask[j] * r[j];
      c[j] = cn;
    }
    StoreRow(h, h_row, m);
    StoreRow(cs, c, m);
  }
  std::copy(c, c + m, a.CLast + b * n + col);
  Fence();
}

template <typename T>
struct BackwardArgs : Inputs<T> {
  const Layout& s;
  const T *CSeq, *DH, *DCLast;
  T *DU, *DX, *DW, *DB, *DC0, *DScale;
  BackwardArgs(OpKernelContext* ctx, const Layout& layout, T* du, T* dx, T* dw, T* db, T* dc0, T* dscale)
      : Inputs<T>(ctx), s(layout), CSeq(ctx->input(8).flat<T>().data()), DH(ctx->input(9).flat<T>().data()),
        DCLast(ctx->input(10).flat<T>().data()), DU(du), DX(dx), DW(dw), DB(db), DC0(dc0), DScale(dscale) {}
};

// One chain of the backward, in reverse time: recomputes f and r from the saved c and writes du
// (and dx for K = 3) for every step, carrying dc and this chain's weight_c/bias/scale_x sums.
template <typename T, int K>
void BackwardChain(const BackwardArgs<T>& a, int64 b, int64 dir, int64 j0, int64 m) {
  const Layout& s = a.s;
  const int64 n = s.dirs * s.d, col = dir * s.d + j0;
  std::vector<T> buffer((13 + K) * m, T(0));
  T* __restrict dc = buffer.data();
  T* __restrict f = dc + m;
  T* __restrict r = f + m;
  T* __restrict dvf = r + m;
  T* __restrict dvr = dvf + m;
  T* __restrict dbf = dvr + m;
  T* __restrict dbr = dbf + m;
  T* __restrict dsc = dbr + m;
  T* __restrict u0 = dsc + m;
  T* __restrict xp = u0 + m;
  T* __restrict du0 = xp + m;
  T* __restrict du1 = du0 + m;
  T* __restrict du2 = du1 + m;
  T* __restrict du_row = du2 + m;  // [m, K]: the interleaved row before it is stored
  const T *vf = a.W + col, *vr = a.W + n + col, *bf = a.Bias + col, *br = a.Bias + n + col;
  const T* mask = a.M + b * n + col;
  std::copy(a.DCLast + b * n + col, a.DCLast + b * n + col + m, dc);
  for (int64 step = s.L - 1; step >= 0; --step) {
    const int64 t = dir == 0 ? step : s.L - 1 - step, row = b * s.L + t;
    T* __restrict du = a.DU + (row * n + col) * K;
    T* __restrict dx = a.DX + row * s.din + col;
    if (a.Pad[row]) {  // h = 0 and c carried: dc passes through, nothing else gets a gradient
      std::fill(du, du + m * K, T(0));
      if (K == 3) std::fill(dx, dx + m, T(0));
      continue;
    }
    const T* __restrict u = a.U + (row * n + col) * K;
    const T* __restrict c = a.CSeq + row * n + col;
    const T* __restrict cp =
        step > 0 ? a.CSeq + (b * s.L + (dir == 0 ? t - 1 : t + 1)) * n + col : a.C0 + b * n + col;
    const T* __restrict dh = a.DH + row * n + col;
    const T* __restrict xs = a.X + row * s.din + col;
    if (step > 1) {  // the step after this one reads row `next` and (as c_{t-1}) the row after it
      const int64 next = b * s.L + (dir == 0 ? t - 1 : t + 1), after = b * s.L + (dir == 0 ? t - 2 : t + 2);
      Prefetch(a.U + (next * n + col) * K, m * K * sizeof(T), false);
      Prefetch(a.DH + next * n + col, m * sizeof(T), false);
      Prefetch(a.CSeq + after * n + col, m * sizeof(T), false);
      if (K == 3) Prefetch(a.X + next * s.din + col, m * sizeof(T), false);
    }
    Gates<T, K>(u, xs, cp, a.scale, vf, bf, vr, br, m, u0, f, r, xp);
#pragma GCC ivdep
    for (int64 j = 0; j < m; ++j) {
      const T mr = mask[j] * r[j];
      const T total = dc[j] + dh[j] * mr;
      const T dgr = dh[j] * (c[j] - xp[j]) * mr * (T(1) - r[j]);
      const T dgf = total * (cp[j] - u0[j]) * f[j] * (T(1) - f[j]);
      const T dxp = dh[j] * (T(1) - mr);
      du0[j] = total * (T(1) - f[j]);
      du1[j] = dgf;
      du2[j] = dgr;
      xp[j] = dxp;  // reused: xp is not needed below
      dc[j] = total * f[j] + dgf * vf[j] + dgr * vr[j];
      dvf[j] += dgf * cp[j];
      dvr[j] += dgr * cp[j];
      dbf[j] += dgf;
      dbr[j] += dgr;
    }
#pragma GCC ivdep
    for (int64 j = 0; j < m; ++j) {
      du_row[j * K] = du0[j];
      du_row[j * K + 1] = du1[j];
      du_row[j * K + 2] = du2[j];
      if (K == 4) du_row[j * K + 3] = xp[j];
    }
    StoreRow(du, du_row, m * K);
    if (K == 3) {
#pragma GCC ivdep
      for (int64 j = 0; j < m; ++j) {
        dsc[j] += xp[j] * xs[j];
        xp[j] *= a.scale;
      }
      StoreRow(dx, xp, m);
    }
  }
  std::copy(dc, dc + m, a.DC0 + b * n + col);
  std::copy(dvf, dvf + m, a.DW + b * 2 * n + col);
  std::copy(dvr, dvr + m, a.DW + b * 2 * n + n + col);
  std::copy(dbf, dbf + m, a.DB + b * 2 * n + col);
  std::copy(dbr, dbr + m, a.DB + b * 2 * n + n + col);
  std::copy(dsc, dsc + m, a.DScale + b * n + col);
  Fence();
}

// What both ops share: the bidirectional attribute, the layout check before Run, and running
// one chain function (its K = 3 or K = 4 instance) over every chain.
class SruOpBase : public OpKernel {
 public:
  explicit SruOpBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bidirectional", &bidirectional_));
  }

  void Compute(OpKernelContext* ctx) override {
    Layout s;
    CheckLayout(ctx, bidirectional_, &s);
    if (ctx->status().ok()) Run(ctx, s);
  }

 protected:
  // The op's work on inputs whose layout has been checked.
  virtual void Run(OpKernelContext* ctx, const Layout& s) = 0;

  template <typename Args>
  using Chain = void (*)(const Args&, int64, int64, int64, int64);

  template <typename Args>
  static void RunChains(OpKernelContext* ctx, const Layout& s, const Args& a, Chain<Args> k3, Chain<Args> k4) {
    const Chain<Args> chain = s.k == 3 ? k3 : k4;
    ForEachUnit(ctx, s, [&](int64 b, int64 dir, int64 j0, int64 m) { chain(a, b, dir, j0, m); });
  }

 private:
  bool bidirectional_;
};

template <typename T>
class SruForwardOp : public SruOpBase {
 public:
  using SruOpBase::SruOpBase;

 protected:
  void Run(OpKernelContext* ctx, const Layout& s) override {
    const int64 n = s.dirs * s.d;
    Tensor *h_t, *c_last_t, *c_seq_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({s.B, s.L, n}), &h_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({s.B, n}), &c_last_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({s.B, s.L, n}), &c_seq_t));
    const ForwardArgs<T> a(ctx, s, h_t->flat<T>().data(), c_last_t->flat<T>().data(), c_seq_t->flat<T>().data());
    RunChains<ForwardArgs<T>>(ctx, s, a, ForwardChain<T, 3>, ForwardChain<T, 4>);
  }
};

template <typename T>
class SruBackwardOp : public SruOpBase {
 public:
  using SruOpBase::SruOpBase;

 protected:
  void Run(OpKernelContext* ctx, const Layout& s) override {
    const int64 n = s.dirs * s.d;
    OP_REQUIRES(ctx, ctx->input(8).shape() == TensorShape({s.B, s.L, n}) &&
                         ctx->input(9).shape() == TensorShape({s.B, s.L, n}) &&
                         ctx->input(10).shape() == TensorShape({s.B, n}),
                absl::InvalidArgumentError("sru kernel: c_seq, dh or dc_last has the wrong shape"));
    Tensor *du_t, *dx_t, *dw_t, *db_t, *dc0_t, *dscale_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &du_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ctx->input(1).shape(), &dx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({s.B, 2 * n}), &dw_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({s.B, 2 * n}), &db_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({s.B, n}), &dc0_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, TensorShape({s.B, n}), &dscale_t));
    if (s.k == 4) dx_t->flat<T>().setZero();  // x only feeds the k = 3 skip term
    const BackwardArgs<T> a(ctx, s, du_t->flat<T>().data(), dx_t->flat<T>().data(), dw_t->flat<T>().data(),
                            db_t->flat<T>().data(), dc0_t->flat<T>().data(), dscale_t->flat<T>().data());
    RunChains<BackwardArgs<T>>(ctx, s, a, BackwardChain<T, 3>, BackwardChain<T, 4>);
  }
};

#define REGISTER(T)                                                                                 \
  REGISTER_KERNEL_BUILDER(Name("GauKerasSruForward").Device(DEVICE_CPU).TypeConstraint<T>("T"),  \
                          SruForwardOp<T>);                                                       \
  REGISTER_KERNEL_BUILDER(Name("GauKerasSruBackward").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
                          SruBackwardOp<T>);
REGISTER(float)
REGISTER(double)
#undef REGISTER

}  // namespace gau_keras
