// Fast attention (tiled prefill over decoded tiles, split decode straight over packed rows with
// dot_rows / axpy_rows) against the scalar reference (rows decoded with the scalar codec, then
// plain attention), over every packed KV format (f32, bf16, f16, fp8, int8 and int4 with zero
// points, nvfp4), GQA groupings, tile-boundary lengths and per-head scales.
//
// Tolerance: the output is a convex combination of V rows, so errors are measured relative to
// max|V|. Both sides compute the same scores with a different summation order (error ~√D·2⁻²⁴
// of Σ|q·k|) and the fast side rescales partial softmax sums online (a few ulps per tile); 2e-5 ·
// max|V| leaves ~10× headroom over what we measure, while a wrong mask, group mapping or merge
// moves outputs by O(max|V|). The same bound holds for every packed format: both sides read the
// same codes and decode them to the same fp32 values (the fast decode inside its dot products).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/threading.h"
#include "kvq/kernels/cpu/attention.h"
#include "kvq/kernels/cpu/int8_query.h"
#include "kvq/kernels/ref/kv_rows_ref.h"
#include "kvq/kernels/ref/ref_kernels.h"
#include "kvq/quant/formats.h"

namespace kvq::kernels {
namespace {

struct Case {
  std::int64_t heads, kv_heads, head_dim, q_len, past;
};

// Every format of the codec table.
std::vector<KvFormat> all_formats() {
  std::vector<KvFormat> formats;
  for (const auto& t : quant::kv_format_table()) formats.push_back(t.format);
  return formats;
}

// A cache of kv_heads streams [n rows] packed in `format` with quant::quantize_row. Quantized
// formats get a per-head scale from the head's amax (head h uses a slightly different one, so a
// kernel that mixes heads up is caught), an integer zero point where the format has one (so the
// asymmetric path is exercised; a few values clamp, which is fine: both sides read the same
// codes) and, for nvfp4, the amax-based global scale 448·6/amax.
struct FakeCache {
  FakeCache(KvFormat format, std::int64_t kv_heads, std::int64_t n, std::int64_t d,
            std::uint64_t seed, float value_scale = 1.0f)
      : format_(format),
        d_(d),
        n_(n),
        row_bytes_(static_cast<std::int64_t>(quant::kv_row_bytes(format, d))),
        bytes_(static_cast<std::size_t>(kv_heads * n * row_bytes_)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, value_scale);
    const quant::KvFormatTraits& t = quant::kv_format_traits(format);
    std::vector<float> x(static_cast<std::size_t>(n * d));
    for (std::int64_t h = 0; h < kv_heads; ++h) {
      float amax = 0.0f;
      for (float& v : x) {
        v = dist(rng);
        amax = std::max(amax, std::fabs(v));
      }
      KvRowsView view{format, bytes_.data() + h * n * row_bytes_, row_bytes_, d};
      const float spread = 1.0f + 0.1f * static_cast<float>(h);
      // amax onto the largest code (fp8 448, int8 127, int4 7).
      if (t.needs_scale && !t.global_scale) view.scale = spread * amax / t.code_max;
      // Zero points 1, -2 and 0 (symmetric streams take a kernel form of their own).
      if (t.supports_zero_point) view.zero_point = std::array{1.0f, -2.0f, 0.0f}[h % 3];
      if (t.global_scale) view.global_scale = 448.0f * 6.0f / (spread * amax);
      for (std::int64_t r = 0; r < n; ++r) {
        quant::quantize_row(format, x.data() + r * d, d, view.scale, view.zero_point,
                            view.global_scale, bytes_.data() + (h * n + r) * row_bytes_);
      }
      views.push_back(view);
    }
  }
  float max_abs() const {
    float m = 0.0f;
    std::vector<float> rows(static_cast<std::size_t>(n_ * d_));
    for (const KvRowsView& v : views) {
      load_kv_rows_ref(v, 0, n_, rows.data());
      for (float x : rows) m = std::max(m, std::fabs(x));
    }
    return m;
  }
  KvFormat format_;
  std::int64_t d_, n_, row_bytes_;
  std::vector<std::byte> bytes_;
  std::vector<KvRowsView> views;
};

std::vector<float> random_q(const Case& c, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> q(static_cast<std::size_t>(c.heads * c.q_len * c.head_dim));
  for (float& x : q) x = dist(rng);
  return q;
}

// Reference output in the kernel's layout [q_len, heads, head_dim].
std::vector<float> reference(const Case& c, const std::vector<float>& q, const FakeCache& k,
                             const FakeCache& v, float scale, std::int64_t window = 0) {
  std::vector<float> out(static_cast<std::size_t>(c.q_len * c.heads * c.head_dim));
  std::vector<float> oh(static_cast<std::size_t>(c.q_len * c.head_dim));
  const std::int64_t group = c.heads / c.kv_heads;
  for (std::int64_t h = 0; h < c.heads; ++h) {
    ref::attention(q.data() + h * c.q_len * c.head_dim, k.views[h / group], v.views[h / group],
                   oh.data(), c.q_len, c.past, scale, window);
    for (std::int64_t i = 0; i < c.q_len; ++i) {
      std::copy_n(oh.data() + i * c.head_dim, c.head_dim,
                  out.data() + (i * c.heads + h) * c.head_dim);
    }
  }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  float worst = 0.0f;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " at " << i;
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(worst, tol) << what;
}

const Case kCases[] = {
    {1, 1, 8, 1, 0},    {4, 2, 16, 7, 0},    {9, 3, 64, 33, 0}, {9, 3, 64, 100, 0},
    {4, 4, 32, 31, 5},  {6, 2, 16, 65, 64},  {2, 1, 64, 64, 0}, {8, 2, 128, 40, 200},
    {3, 3, 16, 1, 130}, {9, 3, 64, 1, 1023}, {4, 1, 48, 2, 17},
};

TEST(Attention, PrefillMatchesReference) {
  for (KvFormat storage : all_formats()) {
    for (const Case& c : kCases) {
      const std::int64_t total = c.past + c.q_len;
      FakeCache k(storage, c.kv_heads, total, c.head_dim, 100 + total);
      FakeCache v(storage, c.kv_heads, total, c.head_dim, 200 + total);
      const auto q = random_q(c, 300 + c.heads, 1.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const auto want = reference(c, q, k, v, scale);
      std::vector<float> got(want.size(), NAN);
      AttentionParams p{c.heads, c.kv_heads, c.head_dim, c.q_len, c.past, scale};
      attention_prefill(p, q.data(), k.views.data(), v.views.data(), got.data());
      expect_close(
          got, want, 2e-5f * v.max_abs(),
          fmt::format("prefill {} H={} Hkv={} D={} S={} past={}", quant::kv_format_name(storage),
                      c.heads, c.kv_heads, c.head_dim, c.q_len, c.past));
    }
  }
}

TEST(Attention, DecodeMatchesReferenceForEverySplit) {
  const Case decode_cases[] = {{1, 1, 8, 1, 0},   {4, 2, 16, 1, 1},    {9, 3, 64, 1, 63},
                               {9, 3, 64, 1, 64}, {9, 3, 64, 1, 1000}, {8, 8, 32, 1, 300}};
  for (KvFormat storage : all_formats()) {
    for (const Case& c : decode_cases) {
      const std::int64_t total = c.past + 1;
      FakeCache k(storage, c.kv_heads, total, c.head_dim, 7 + total);
      FakeCache v(storage, c.kv_heads, total, c.head_dim, 8 + total);
      const auto q = random_q(c, 9, 1.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const auto want = reference(c, q, k, v, scale);
      AttentionParams p{c.heads, c.kv_heads, c.head_dim, 1, c.past, scale};
      for (std::int64_t splits : {1, 2, 3, 7, 64}) {
        std::vector<float> got(want.size(), NAN);
        attention_decode(p, q.data(), k.views.data(), v.views.data(), got.data(), splits);
        expect_close(got, want, 2e-5f * v.max_abs(),
                     fmt::format("decode {} past={} splits={}", quant::kv_format_name(storage),
                                 c.past, splits));
      }
      std::vector<float> got(want.size(), NAN);
      attention(p, q.data(), k.views.data(), v.views.data(), got.data());  // dispatcher
      expect_close(got, want, 2e-5f * v.max_abs(), "dispatch");
    }
  }
}

// How the sequence splits must not depend on the thread count: the same inputs give the same bits
// on 1, 2 and 3 threads (decode at a length where the dispatcher splits; prefill too). With the
// thread count in the split a quantized cache turned last-bit merge differences into different
// greedy answers between `kvq eval` (1 thread) and `kvq serve` (2).
TEST(Attention, ThreadCountDoesNotChangeResults) {
  const int saved = num_threads();
  for (KvFormat storage : {KvFormat::kF32, KvFormat::kINT8, KvFormat::kFP8E4M3}) {
    for (const Case& c :
         {Case{9, 3, 64, 1, 4000}, Case{8, 1, 64, 1, 1500}, Case{9, 3, 64, 40, 900}}) {
      const std::int64_t total = c.past + c.q_len;
      FakeCache k(storage, c.kv_heads, total, c.head_dim, 11 + total);
      FakeCache v(storage, c.kv_heads, total, c.head_dim, 12 + total);
      const auto q = random_q(c, 13, 1.0f);
      const AttentionParams p{c.heads, c.kv_heads, c.head_dim, c.q_len, c.past, 0.125f};
      std::vector<std::vector<float>> outs;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        outs.emplace_back(static_cast<std::size_t>(c.q_len * c.heads * c.head_dim), NAN);
        attention(p, q.data(), k.views.data(), v.views.data(), outs.back().data());
      }
      set_num_threads(saved);
      EXPECT_EQ(outs[0], outs[1]) << quant::kv_format_name(storage) << " past " << c.past;
      EXPECT_EQ(outs[0], outs[2]) << quant::kv_format_name(storage) << " past " << c.past;
    }
  }
}

// Opt-in int8-query scores (KvRowsView::int8_query_scores on int8 / int4 / nvfp4 K): decode must
// use exactly quant's int8-query scores — checked against a double-precision softmax over
// ref::dot_rows_int8_query's scores and the decoded V rows — for every split, and must differ
// from the exact path (the option is really on).
TEST(Attention, Int8QueryScoresDecodeUsesTheInt8QueryScores) {
  const Case decode_cases[] = {{4, 2, 16, 1, 1},
                               {9, 3, 64, 1, 63},
                               {9, 3, 64, 1, 1000},
                               {8, 2, 128, 1, 300},
                               {4, 1, 48, 1, 40}};
  for (KvFormat format : all_formats()) {
    if (!quant::kv_format_traits(format).supports_int8_query()) continue;
    for (const Case& c : decode_cases) {
      const std::int64_t total = c.past + 1, d = c.head_dim, group = c.heads / c.kv_heads;
      if (!quant::kv_int8_query_supported(format, d)) continue;  // nvfp4: head_dim % 64 == 0
      FakeCache k(format, c.kv_heads, total, d, 17 + total);
      FakeCache v(format, c.kv_heads, total, d, 18 + total);
      for (KvRowsView& view : k.views) view.int8_query_scores = true;
      const auto q = random_q(c, 19, 1.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      std::vector<float> want(static_cast<std::size_t>(c.heads * d));
      std::vector<float> vrows(static_cast<std::size_t>(total * d));
      std::vector<float> s(static_cast<std::size_t>(total));
      for (std::int64_t h = 0; h < c.heads; ++h) {
        const KvRowsView& kh = k.views[static_cast<std::size_t>(h / group)];
        Int8Query q8;
        quantize_query_int8(q.data() + h * d, 1, d, &q8);
        ref::dot_rows_int8_query(kh.codec(), q8, kh.data, total, s.data(), total);
        double mx = -INFINITY, sum = 0.0;
        for (float x : s) mx = std::max(mx, static_cast<double>(x) * scale);
        load_kv_rows_ref(v.views[static_cast<std::size_t>(h / group)], 0, total, vrows.data());
        std::vector<double> o(static_cast<std::size_t>(d), 0.0);
        for (std::int64_t j = 0; j < total; ++j) {
          const double w =
              std::exp(static_cast<double>(s[static_cast<std::size_t>(j)]) * scale - mx);
          sum += w;
          for (std::int64_t e = 0; e < d; ++e)
            o[static_cast<std::size_t>(e)] += w * vrows[j * d + e];
        }
        for (std::int64_t e = 0; e < d; ++e)
          want[static_cast<std::size_t>(h * d + e)] = static_cast<float>(o[e] / sum);
      }
      const auto exact = reference(c, q, k, v, scale);  // the reference ignores the option
      AttentionParams p{c.heads, c.kv_heads, d, 1, c.past, scale};
      for (std::int64_t splits : {1, 2, 7}) {
        std::vector<float> got(want.size(), NAN);
        attention_decode(p, q.data(), k.views.data(), v.views.data(), got.data(), splits);
        const std::string what = fmt::format("{}+q8 d={} past={} splits={}",
                                             quant::kv_format_name(format), d, c.past, splits);
        expect_close(got, want, 2e-5f * v.max_abs(), what);
        float moved = 0.0f;
        for (std::size_t i = 0; i < got.size(); ++i)
          moved = std::max(moved, std::fabs(got[i] - exact[i]));
        EXPECT_GT(moved, 1e-4f * v.max_abs()) << what << ": no different from the exact path";
      }
    }
  }
}

// Sliding windows (Mistral, Qwen2's sliding layers): prefill over tiles whose lower bound falls
// anywhere in a tile, decode with every split, a window of 1 (each query sees itself only) and
// one longer than the sequence (no effect). The same tolerance as above; and where the window
// hides keys the output must move (so a kernel ignoring it fails).
// A case with a sliding window of `window` keys.
struct WindowCase {
  Case c;
  std::int64_t window;
};

TEST(Attention, SlidingWindowMatchesReference) {
  const WindowCase cases[] = {
      {{4, 2, 16, 7, 0}, 3},       {{9, 3, 64, 100, 0}, 40},   {{6, 2, 16, 65, 64}, 64},
      {{8, 2, 128, 40, 200}, 100}, {{2, 1, 64, 130, 0}, 1},    {{4, 4, 32, 31, 5}, 1000},
      {{4, 2, 16, 1, 1}, 1},       {{9, 3, 64, 1, 1000}, 300}, {{8, 8, 32, 1, 300}, 64},
      {{3, 3, 16, 1, 130}, 131},
  };
  for (KvFormat storage : {KvFormat::kF32, KvFormat::kFP8E4M3, KvFormat::kINT4}) {
    for (const auto& [c, window] : cases) {
      const std::int64_t total = c.past + c.q_len;
      FakeCache k(storage, c.kv_heads, total, c.head_dim, 400 + total);
      FakeCache v(storage, c.kv_heads, total, c.head_dim, 500 + total);
      const auto q = random_q(c, 600 + c.heads, 1.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const auto want = reference(c, q, k, v, scale, window);
      const auto unwindowed = reference(c, q, k, v, scale);
      const std::string what =
          fmt::format("{} H={} Hkv={} D={} S={} past={} window={}", quant::kv_format_name(storage),
                      c.heads, c.kv_heads, c.head_dim, c.q_len, c.past, window);
      AttentionParams p{c.heads, c.kv_heads, c.head_dim, c.q_len, c.past, scale, window};
      std::vector<float> got(want.size(), NAN);
      attention(p, q.data(), k.views.data(), v.views.data(), got.data());  // dispatcher
      expect_close(got, want, 2e-5f * v.max_abs(), what);
      if (c.q_len > 1) {
        attention_prefill(p, q.data(), k.views.data(), v.views.data(), got.data());
        expect_close(got, want, 2e-5f * v.max_abs(), "prefill " + what);
      } else {
        for (std::int64_t splits : {1, 2, 3, 7, 64}) {
          attention_decode(p, q.data(), k.views.data(), v.views.data(), got.data(), splits);
          expect_close(got, want, 2e-5f * v.max_abs(), fmt::format("{} splits={}", what, splits));
        }
      }
      float moved = 0.0f;
      for (std::size_t i = 0; i < want.size(); ++i)
        moved = std::max(moved, std::fabs(want[i] - unwindowed[i]));
      if (window < total) {
        EXPECT_GT(moved, 1e-2f * v.max_abs()) << what << ": the window hides nothing";
      } else {
        EXPECT_EQ(moved, 0.0f) << what;
      }
    }
  }
}

// A sliding-window layer's ring (kv_rows.h: position t in row t % ring_rows) holds only the
// positions the queries can see; the kernels read them in runs split where the ring wraps. The
// result must be bit for bit the one over the same rows stored in position order, for every
// format, on the prefill and decode paths, wherever the wrap falls in a key tile (ring lengths
// from the minimum, window - 1 + q_len, up). (Sinks in a ring: SlidingWindowRing.* in the engine.)
TEST(Attention, SlidingWindowRingEqualsRowsInPositionOrder) {
  const WindowCase cases[] = {
      {{4, 2, 16, 7, 30}, 5},     {{9, 3, 64, 100, 150}, 40}, {{6, 2, 16, 65, 64}, 64},
      {{4, 2, 16, 1, 300}, 24},   {{9, 3, 64, 1, 1000}, 300}, {{8, 8, 32, 1, 129}, 64},
      {{2, 1, 32, 32, 500}, 100},
  };
  for (KvFormat storage : all_formats()) {
    for (const auto& [c, window] : cases) {
      const std::int64_t total = c.past + c.q_len;
      FakeCache k(storage, c.kv_heads, total, c.head_dim, 700 + total);
      FakeCache v(storage, c.kv_heads, total, c.head_dim, 800 + total);
      const auto q = random_q(c, 900 + c.heads, 1.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const AttentionParams p{c.heads, c.kv_heads, c.head_dim, c.q_len, c.past, scale, window};
      const auto run = [&](const KvRowsView* kv, const KvRowsView* vv) {
        std::vector<std::vector<float>> outs;
        std::vector<float> out(static_cast<std::size_t>(c.q_len * c.heads * c.head_dim), NAN);
        if (c.q_len > 1) {
          attention_prefill(p, q.data(), kv, vv, out.data());
          outs.push_back(out);
        } else {
          for (std::int64_t splits : {1, 2, 5}) {
            attention_decode(p, q.data(), kv, vv, out.data(), splits);
            outs.push_back(out);
          }
        }
        attention(p, q.data(), kv, vv, out.data());
        outs.push_back(out);
        return outs;
      };
      const auto want = run(k.views.data(), v.views.data());
      const auto ref_linear = reference(c, q, k, v, scale, window);
      // The first position any query sees; a ring of `rows` holds [lo, total).
      const std::int64_t lo = std::max<std::int64_t>(0, c.past + 1 - window);
      for (const std::int64_t extra : {0, 5, 37}) {
        const std::int64_t rows = window - 1 + c.q_len + extra;
        if (rows >= total) continue;  // no wrap: nothing to test
        std::vector<std::byte> kring, vring;
        const auto ring_of = [&](const FakeCache& f, std::vector<std::byte>& bytes) {
          bytes.assign(static_cast<std::size_t>(c.kv_heads * rows * f.row_bytes_), std::byte{0});
          std::vector<KvRowsView> out;
          for (std::int64_t h = 0; h < c.kv_heads; ++h) {
            KvRowsView view = f.views[static_cast<std::size_t>(h)];
            view.data = bytes.data() + h * rows * f.row_bytes_;
            view.ring_rows = rows;
            for (std::int64_t t = lo; t < total; ++t) {
              std::memcpy(const_cast<std::byte*>(view.row(t)), f.views[h].row(t),
                          static_cast<std::size_t>(f.row_bytes_));
            }
            out.push_back(view);
          }
          return out;
        };
        const std::vector<KvRowsView> kr = ring_of(k, kring), vr = ring_of(v, vring);
        const auto got = run(kr.data(), vr.data());
        const std::string what = fmt::format("{} H={} Hkv={} D={} S={} past={} window={} ring={}",
                                             quant::kv_format_name(storage), c.heads, c.kv_heads,
                                             c.head_dim, c.q_len, c.past, window, rows);
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
              << what << " run " << i;
        }
        // The scalar reference reads the ring too.
        std::vector<float> oh(static_cast<std::size_t>(c.q_len * c.head_dim));
        for (std::int64_t h = 0; h < c.heads; ++h) {
          const std::int64_t g = h / (c.heads / c.kv_heads);
          ref::attention(q.data() + h * c.q_len * c.head_dim, kr[g], vr[g], oh.data(), c.q_len,
                         c.past, scale, window);
          for (std::int64_t i = 0; i < c.q_len; ++i) {
            EXPECT_EQ(std::memcmp(oh.data() + i * c.head_dim,
                                  ref_linear.data() + (i * c.heads + h) * c.head_dim,
                                  static_cast<std::size_t>(c.head_dim) * sizeof(float)),
                      0)
                << "ref " << what;
          }
        }
      }
    }
  }
}

TEST(Attention, PerHeadScalesAreApplied) {
  const Case c{4, 2, 16, 9, 3};
  FakeCache k(KvFormat::kF32, 2, 12, 16, 1), v(KvFormat::kF32, 2, 12, 16, 2);
  k.views[1].scale = 0.5f;
  v.views[0].scale = 3.0f;
  const auto q = random_q(c, 3, 1.0f);
  const auto want = reference(c, q, k, v, 0.25f);  // the reference decodes with the scales
  std::vector<float> got(want.size());
  AttentionParams p{4, 2, 16, 9, 3, 0.25f};
  attention(p, q.data(), k.views.data(), v.views.data(), got.data());
  expect_close(got, want, 2e-5f * 3.0f * v.max_abs(), "scaled");
}

TEST(Attention, PeakedAndFlatSoftmaxStayFinite) {
  const Case c{2, 1, 32, 70, 10};
  FakeCache k(KvFormat::kF32, 1, 80, 32, 4, 10.0f), v(KvFormat::kF32, 1, 80, 32, 5);
  // Huge scores (|s| ~ 1e3): exp would overflow without max subtraction.
  const auto q = random_q(c, 6, 10.0f);
  const auto want = reference(c, q, k, v, 1.0f);
  std::vector<float> got(want.size());
  AttentionParams p{2, 1, 32, 70, 10, 1.0f};
  attention(p, q.data(), k.views.data(), v.views.data(), got.data());
  // Scores of magnitude ~1e3 carry absolute rounding ~1e-4, which moves near-tied softmax weights
  // by that much: tolerance scales with it.
  expect_close(got, want, 2e-3f * v.max_abs(), "peaked");
  // All-zero queries: uniform weights, every output is the mean of the visible V rows.
  std::vector<float> zq(q.size(), 0.0f);
  const auto want0 = reference(c, zq, k, v, 1.0f);
  attention(p, zq.data(), k.views.data(), v.views.data(), got.data());
  expect_close(got, want0, 2e-5f * v.max_abs(), "flat");
}

}  // namespace
}  // namespace kvq::kernels
