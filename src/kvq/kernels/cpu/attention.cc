#include "kvq/kernels/cpu/attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/threading.h"
#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/cpu/int8_query.h"
#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/kernels/cpu/softmax.h"

namespace kvq::kernels {
namespace {

constexpr std::int64_t kKeyTile = 64;
constexpr std::int64_t kQueryTile = 32;
// Multiply-adds below which attention runs on the calling thread only.
constexpr std::int64_t kMinParallelWork = 1 << 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Scratch for one thread: a K tile transposed, a decoded V tile, the score tile.
struct Scratch {
  explicit Scratch(std::int64_t d)
      : kt(static_cast<std::size_t>(d * kKeyTile)),
        v(static_cast<std::size_t>(d * kKeyTile)),
        s(static_cast<std::size_t>(kQueryTile * kKeyTile)) {}
  std::vector<float> kt;  // [head_dim, kKeyTile]
  std::vector<float> v;   // [kKeyTile, head_dim]
  std::vector<float> s;   // [kQueryTile, kKeyTile]
};

// Loads rows [t0, t0 + n) of K transposed into kt [d, kKeyTile] (decoding through `rows` when
// the storage is not fp32).
void load_k_transposed(const KvRowsView& k, std::int64_t t0, std::int64_t n, float* rows,
                       float* kt) {
  const std::int64_t d = k.head_dim;
  const float* src = k.f32_rows(t0, n);
  if (src == nullptr) {
    load_kv_rows(k, t0, n, rows);
    src = rows;
  }
  for (std::int64_t j = 0; j < n; ++j) {
    const float* r = src + j * d;
    for (std::int64_t c = 0; c < d; ++c) kt[c * kKeyTile + j] = r[c];
  }
}

// s[i, j] = q_i · k_j for nq rows and nt keys. Vectorised over j (no reductions, so the compiler
// vectorises it without -ffast-math; target_clones picks AVX-512 / AVX2 at run time).
__attribute__((target_clones("avx512f", "avx2", "default"))) void tile_scores(
    const float* q, std::int64_t nq, const float* kt, std::int64_t nt, std::int64_t d, float* s) {
  for (std::int64_t i = 0; i < nq; ++i) {
    float* si = s + i * kKeyTile;
    for (std::int64_t j = 0; j < nt; ++j) si[j] = 0.0f;
    const float* qi = q + i * d;
    for (std::int64_t c = 0; c < d; ++c) {
      const float qc = qi[c];
      const float* kc = kt + c * kKeyTile;
      for (std::int64_t j = 0; j < nt; ++j) si[j] += qc * kc[j];
    }
  }
}

// acc[i, :] += Σ_j p[i, j] · v[j, :]; vectorised over head_dim.
__attribute__((target_clones("avx512f", "avx2", "default"))) void tile_accumulate(
    const float* p, std::int64_t nq, const float* v, std::int64_t nt, std::int64_t d, float* acc) {
  for (std::int64_t i = 0; i < nq; ++i) {
    float* ai = acc + i * d;
    const float* pi = p + i * kKeyTile;
    for (std::int64_t j = 0; j < nt; ++j) {
      const float pj = pi[j];
      const float* vj = v + j * d;
      for (std::int64_t c = 0; c < d; ++c) ai[c] += pj * vj[c];
    }
  }
}

// AVX-512 forms of the two tile kernels for head_dim a multiple of 16 up to 128, register-blocked
// (the portable loops above keep a score / accumulator row in memory and reload it for every
// multiply-add). Same arithmetic per element: one FMA per term, in the same order.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Rows [i0, i0 + R) of s: the 64-key tile in 4 registers per row, one broadcast of q per row
// and term.
template <int R>
__attribute__((target("avx512f,fma"))) inline void scores_rows_avx512(const float* q,
                                                                      const float* kt,
                                                                      std::int64_t d, float* s) {
  static_assert(kKeyTile == 64);
  __m512 a[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) a[r][v] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < d; ++c) {
    const float* kc = kt + c * kKeyTile;
    const __m512 k0 = _mm512_loadu_ps(kc), k1 = _mm512_loadu_ps(kc + 16);
    const __m512 k2 = _mm512_loadu_ps(kc + 32), k3 = _mm512_loadu_ps(kc + 48);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 qb = _mm512_set1_ps(q[r * d + c]);
      a[r][0] = _mm512_fmadd_ps(qb, k0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(qb, k1, a[r][1]);
      a[r][2] = _mm512_fmadd_ps(qb, k2, a[r][2]);
      a[r][3] = _mm512_fmadd_ps(qb, k3, a[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(s + r * kKeyTile + 16 * v, a[r][v]);
}

// All 64 columns are computed (kt past nt holds finite scratch; callers read the first nt).
__attribute__((target("avx512f,fma"))) void tile_scores_avx512(const float* q, std::int64_t nq,
                                                               const float* kt, std::int64_t d,
                                                               float* s) {
  std::int64_t i = 0;
  for (; i + 4 <= nq; i += 4) scores_rows_avx512<4>(q + i * d, kt, d, s + i * kKeyTile);
  for (; i < nq; ++i) scores_rows_avx512<1>(q + i * d, kt, d, s + i * kKeyTile);
}

// Rows [i0, i0 + R) of acc (DV registers each) += p · v, the rows held in registers over the
// whole tile.
template <int R, int DV>
__attribute__((target("avx512f,fma"))) inline void accumulate_rows_avx512(const float* p,
                                                                          const float* v,
                                                                          std::int64_t nt,
                                                                          float* acc) {
  constexpr std::int64_t d = 16 * DV;
  __m512 a[R][DV];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < DV; ++u) a[r][u] = _mm512_loadu_ps(acc + r * d + 16 * u);
  for (std::int64_t j = 0; j < nt; ++j) {
    __m512 vv[DV];
#pragma GCC unroll 8
    for (int u = 0; u < DV; ++u) vv[u] = _mm512_loadu_ps(v + j * d + 16 * u);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(p[r * kKeyTile + j]);
#pragma GCC unroll 8
      for (int u = 0; u < DV; ++u) a[r][u] = _mm512_fmadd_ps(pb, vv[u], a[r][u]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < DV; ++u) _mm512_storeu_ps(acc + r * d + 16 * u, a[r][u]);
}

template <int DV>
__attribute__((target("avx512f,fma"))) void tile_accumulate_avx512(const float* p, std::int64_t nq,
                                                                   const float* v, std::int64_t nt,
                                                                   float* acc) {
  constexpr int R = 16 / DV;  // 16 accumulator registers
  constexpr std::int64_t d = 16 * DV;
  std::int64_t i = 0;
  for (; i + R <= nq; i += R) accumulate_rows_avx512<R, DV>(p + i * kKeyTile, v, nt, acc + i * d);
  for (; i < nq; ++i) accumulate_rows_avx512<1, DV>(p + i * kKeyTile, v, nt, acc + i * d);
}
#pragma GCC diagnostic pop

// The tile kernels for this CPU and head_dim.
struct TileKernels {
  explicit TileKernels(std::int64_t d)
      : d(d), avx512(detected_isa() == Isa::kAvx512 && d % 16 == 0 && d >= 16 && d <= 128) {}
  void scores(const float* q, std::int64_t nq, const float* kt, std::int64_t nt, float* s) const {
    if (avx512) {
      tile_scores_avx512(q, nq, kt, d, s);
    } else {
      tile_scores(q, nq, kt, nt, d, s);
    }
  }
  void accumulate(const float* p, std::int64_t nq, const float* v, std::int64_t nt,
                  float* acc) const {
    if (!avx512) return tile_accumulate(p, nq, v, nt, d, acc);
    switch (d / 16) {
      case 1:
        return tile_accumulate_avx512<1>(p, nq, v, nt, acc);
      case 2:
        return tile_accumulate_avx512<2>(p, nq, v, nt, acc);
      case 4:
        return tile_accumulate_avx512<4>(p, nq, v, nt, acc);
      case 8:
        return tile_accumulate_avx512<8>(p, nq, v, nt, acc);
      default:
        return tile_accumulate(p, nq, v, nt, d, acc);
    }
  }
  std::int64_t d;
  bool avx512;
};

// Online-softmax attention of nq query rows over key rows [t_begin, t_end).
// Row i sits at position pos = pos0 + i and sees keys t <= pos (and t > pos - window when
// window > 0). m, l [nq] and acc [nq, d] carry the running state (initialise m = -inf, l = 0,
// acc = 0).
void attend_range(const float* q, std::int64_t nq, std::int64_t pos0, std::int64_t window,
                  const KvRowsView& k, const KvRowsView& v, std::int64_t t_begin,
                  std::int64_t t_end, float scale, Scratch& sc, float* m, float* l, float* acc) {
  const std::int64_t d = k.head_dim;
  const TileKernels tiles(d);
  const std::int64_t last_pos = pos0 + nq - 1;
  t_end = std::min(t_end, last_pos + 1);
  if (window > 0) t_begin = std::max(t_begin, pos0 - window + 1);  // row 0's first key
  for (std::int64_t t0 = t_begin; t0 < t_end; t0 += kKeyTile) {
    const std::int64_t nt = std::min(kKeyTile, t_end - t0);
    load_k_transposed(k, t0, nt, sc.v.data(), sc.kt.data());
    tiles.scores(q, nq, sc.kt.data(), nt, sc.s.data());
    for (std::int64_t i = 0; i < nq; ++i) {
      float* si = sc.s.data() + i * kKeyTile;
      // Visible columns [first, end) of this tile; either bound may fall outside it.
      const std::int64_t pos = pos0 + i;
      const std::int64_t end = std::min(nt, pos - t0 + 1);
      const std::int64_t first = window > 0 ? pos - window + 1 - t0 : 0;
      for (std::int64_t j = 0; j < nt; ++j) {
        si[j] = j >= first && j < end ? si[j] * scale : kNegInf;
      }
      const SoftmaxStep st = softmax_step(si, nt, m[i]);
      const float mx = st.max;
      if (mx == kNegInf) continue;  // nothing visible yet for this row (si is all zeros)
      const float corr = m[i] == kNegInf ? 0.0f : fast_exp(m[i] - mx);
      l[i] = l[i] * corr + st.sum;
      if (corr != 1.0f) {
        float* ai = acc + i * d;
        for (std::int64_t c = 0; c < d; ++c) ai[c] *= corr;
      }
      m[i] = mx;
    }
    const float* vt = v.f32_rows(t0, nt);
    if (vt == nullptr) {
      load_kv_rows(v, t0, nt, sc.v.data());
      vt = sc.v.data();
    }
    tiles.accumulate(sc.s.data(), nq, vt, nt, acc);
  }
}

// Decode: online-softmax attention of the nq query rows q [nq, d] of one KV group (all at the
// last position, so every row in [t_begin, t_end) is visible) straight over the packed rows:
// dot_rows / axpy_rows decode each K / V row once for the whole group. They see the same
// dequantized values as an fp32 cache and do the same arithmetic after that, so a packed cache
// gives bit-identical results to a fake-quantized fp32 one. s [nq, kKeyTile] is scratch;
// m, l [nq] and acc [nq, d] as attend_range.
void attend_packed(const float* q, std::int64_t nq, const KvRowsView& k, const KvRowsView& v,
                   std::int64_t t_begin, std::int64_t t_end, float scale, float* s, float* m,
                   float* l, float* acc) {
  const std::int64_t d = k.head_dim;
  quant::RowCodec k_codec = k.codec(), v_codec = v.codec();
  const quant::RowCodec sink_codec = k.sinks().codec();
  BlockScaleValues k_block_scales, v_block_scales;  // once per call, not per 16 values
  prepare_block_scales(k_codec, k_block_scales);
  prepare_block_scales(v_codec, v_block_scales);
  KVQ_CHECK(k.sink_rows == v.sink_rows, "K and V sink rows differ: {} / {}", k.sink_rows,
            v.sink_rows);
  // Opt-in approximate scores (kv_rows.h): the group's queries quantized to int8 once.
  thread_local Int8Query q8;
  if (k.int8_query_scores) quantize_query_int8(q, nq, d, &q8);
  for (std::int64_t t0 = t_begin; t0 < t_end; t0 += kKeyTile) {
    const std::int64_t nt = std::min(kKeyTile, t_end - t0);
    // Sink rows (bf16, see kv_rows.h) come first; the rest of the tile is packed. Scores are
    // per row and P·V adds rows in order, so the split changes no result.
    // A ring (kv_rows.h) splits the packed rows once more where it wraps.
    const std::int64_t ns = k.sink_count(t0, nt);
    if (ns > 0) dot_rows(sink_codec, q, nq, k.sinks().row(t0), ns, s, kKeyTile);
    for (std::int64_t j = ns, r = 0; j < nt; j += r) {
      r = k.run(t0 + j, nt - j);
      if (k.int8_query_scores)
        dot_rows_int8_query(k_codec, q8, k.row(t0 + j), r, s + j, kKeyTile);
      else
        dot_rows(k_codec, q, nq, k.row(t0 + j), r, s + j, kKeyTile);
    }
    for (std::int64_t i = 0; i < nq; ++i) {
      float* si = s + i * kKeyTile;
      for (std::int64_t j = 0; j < nt; ++j) si[j] *= scale;
      const SoftmaxStep st = softmax_step(si, nt, m[i]);
      const float mx = st.max;
      const float corr = m[i] == kNegInf ? 0.0f : fast_exp(m[i] - mx);
      l[i] = l[i] * corr + st.sum;
      if (corr != 1.0f) {
        float* ai = acc + i * d;
        for (std::int64_t c = 0; c < d; ++c) ai[c] *= corr;
      }
      m[i] = mx;
    }
    if (ns > 0) axpy_rows(sink_codec, s, nq, kKeyTile, v.sinks().row(t0), ns, acc);
    for (std::int64_t j = ns, r = 0; j < nt; j += r) {
      r = v.run(t0 + j, nt - j);
      axpy_rows(v_codec, s + j, nq, kKeyTile, v.row(t0 + j), r, acc);
    }
  }
}

int parallel_threads(std::int64_t items) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(num_threads(), items)));
}

void check_params(const AttentionParams& p) {
  KVQ_CHECK(p.heads > 0 && p.kv_heads > 0 && p.heads % p.kv_heads == 0, "heads {} kv_heads {}",
            p.heads, p.kv_heads);
  KVQ_CHECK(p.head_dim > 0 && p.q_len >= 0 && p.past >= 0 && p.window >= 0, "bad attention shape");
}

}  // namespace

void attention_prefill(const AttentionParams& p, const float* q, const KvRowsView* keys,
                       const KvRowsView* values, float* out) {
  check_params(p);
  const std::int64_t d = p.head_dim;
  const std::int64_t group = p.heads / p.kv_heads;
  const std::int64_t q_tiles = (p.q_len + kQueryTile - 1) / kQueryTile;
  const std::int64_t items = p.heads * q_tiles;
  const std::int64_t work = p.heads * p.q_len * (p.past + p.q_len) * d;
  const int threads = work < kMinParallelWork ? 1 : parallel_threads(items);
#pragma omp parallel num_threads(threads)
  {
    Scratch sc(d);
    std::vector<float> m(kQueryTile), l(kQueryTile);
    std::vector<float> acc(static_cast<std::size_t>(kQueryTile * d));
    // Later query tiles see more keys: hand out items from the most expensive end.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t h = item % p.heads;
      const std::int64_t qt = q_tiles - 1 - item / p.heads;
      const std::int64_t i0 = qt * kQueryTile;
      const std::int64_t nq = std::min(kQueryTile, p.q_len - i0);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float* qh = q + (h * p.q_len + i0) * d;  // [nq, d]
      attend_range(qh, nq, p.past + i0, p.window, keys[h / group], values[h / group], 0,
                   p.past + p.q_len, p.scale, sc, m.data(), l.data(), acc.data());
      for (std::int64_t i = 0; i < nq; ++i) {
        float* o = out + ((i0 + i) * p.heads + h) * d;
        const float inv = 1.0f / l[static_cast<std::size_t>(i)];
        for (std::int64_t c = 0; c < d; ++c) o[c] = acc[static_cast<std::size_t>(i * d + c)] * inv;
      }
    }
  }
}

void attention_decode(const AttentionParams& p, const float* q, const KvRowsView* keys,
                      const KvRowsView* values, float* out, std::int64_t splits) {
  check_params(p);
  KVQ_CHECK(p.q_len == 1 && splits >= 1, "decode: q_len {} splits {}", p.q_len, splits);
  const std::int64_t d = p.head_dim;
  const std::int64_t group = p.heads / p.kv_heads;
  const std::int64_t total = p.past + 1;
  // Keys [first, total) are visible: all of them, or the last `window`.
  const std::int64_t first = p.window > 0 ? std::max<std::int64_t>(0, total - p.window) : 0;
  const std::int64_t visible = total - first;
  splits = std::min(splits, visible);
  const std::int64_t chunk = (visible + splits - 1) / splits;
  const std::int64_t items = p.kv_heads * splits;
  const int threads = p.heads * visible * d < kMinParallelWork ? 1 : parallel_threads(items);
  // Partial states per (kv head, split): m, l [group], acc [group, d].
  std::vector<float> pm(static_cast<std::size_t>(items * group));
  std::vector<float> pl(static_cast<std::size_t>(items * group));
  std::vector<float> pacc(static_cast<std::size_t>(items * group * d));
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> s(static_cast<std::size_t>(group * kKeyTile));  // [group, kKeyTile]
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t kvh = item / splits;
      const std::int64_t sp = item % splits;
      float* m = pm.data() + item * group;
      float* l = pl.data() + item * group;
      float* acc = pacc.data() + item * group * d;
      std::fill(m, m + group, kNegInf);
      std::fill(l, l + group, 0.0f);
      std::fill(acc, acc + group * d, 0.0f);
      const std::int64_t t_begin = first + sp * chunk;
      const std::int64_t t_end = std::min(total, t_begin + chunk);
      // The group's query heads are adjacent rows of q: [group, d], all at position `past`.
      attend_packed(q + kvh * group * d, group, keys[kvh], values[kvh], t_begin, t_end, p.scale,
                    s.data(), m, l, acc);
    }
  }
  for (std::int64_t h = 0; h < p.heads; ++h) {
    const std::int64_t kvh = h / group, g = h % group;
    float mx = kNegInf;
    for (std::int64_t sp = 0; sp < splits; ++sp) {
      mx = std::max(mx, pm[static_cast<std::size_t>((kvh * splits + sp) * group + g)]);
    }
    float* o = out + h * d;
    std::fill(o, o + d, 0.0f);
    float sum = 0.0f;
    for (std::int64_t sp = 0; sp < splits; ++sp) {
      const std::int64_t item = kvh * splits + sp;
      const float ms = pm[static_cast<std::size_t>(item * group + g)];
      if (ms == kNegInf) continue;  // an empty split
      const float w = std::exp(ms - mx);
      sum += pl[static_cast<std::size_t>(item * group + g)] * w;
      const float* a = pacc.data() + (item * group + g) * d;
      for (std::int64_t c = 0; c < d; ++c) o[c] += a[c] * w;
    }
    const float inv = 1.0f / sum;
    for (std::int64_t c = 0; c < d; ++c) o[c] *= inv;
  }
}

void attention(const AttentionParams& p, const float* q, const KvRowsView* keys,
               const KvRowsView* values, float* out) {
  if (p.q_len == 0) return;
  if (p.q_len > 1) {
    attention_prefill(p, q, keys, values, out);
    return;
  }
  // The sequence splits into a number of chunks that depends on the shapes only, never on the
  // thread count, so that a result is the same on 1 thread and on 16 (the partial softmax states
  // merge in a fixed order; with the thread count in it, a quantized cache turned the merge's
  // last-bit differences into other greedy answers). kv_heads × splits work items: 48 keep 1, 2,
  // 3, 4, 6, 8, 12 or 16 threads evenly busy; each chunk holds at least 256 rows, so the merge
  // (a few hundred floats per chunk) stays far below the chunk's own work.
  constexpr std::int64_t kDecodeItems = 48, kMinSplitRows = 256;
  const std::int64_t total = p.window > 0 ? std::min(p.past + 1, p.window) : p.past + 1;
  const std::int64_t splits = std::max<std::int64_t>(
      1, std::min((kDecodeItems + p.kv_heads - 1) / p.kv_heads, total / kMinSplitRows));
  attention_decode(p, q, keys, values, out, splits);
}

}  // namespace kvq::kernels
