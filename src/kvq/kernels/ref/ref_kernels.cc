#include "kvq/kernels/ref/ref_kernels.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "kvq/core/dtype.h"

namespace kvq::kernels::ref {

void matmul(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
            std::int64_t k) {
  for (std::int64_t i = 0; i < m; ++i) gemv(w, x + i * k, y + i * n, n, k);
}

void gemv(const float* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  for (std::int64_t r = 0; r < n; ++r) {
    const float* row = w + r * k;  // [k]
    float acc = 0.0f;
    for (std::int64_t c = 0; c < k; ++c) acc += row[c] * x[c];
    y[r] = acc;
  }
}

void matmul_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k) {
  for (std::int64_t i = 0; i < m; ++i) gemv_bf16(w, x + i * k, y + i * n, n, k);
}

void gemv_bf16(const std::uint16_t* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  for (std::int64_t r = 0; r < n; ++r) {
    const std::uint16_t* row = w + r * k;  // [k]
    float acc = 0.0f;
    for (std::int64_t c = 0; c < k; ++c) acc += bf16_to_f32(row[c]) * x[c];
    y[r] = acc;
  }
}

void rmsnorm(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t dim,
             float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float sum = 0.0f;
    for (std::int64_t i = 0; i < dim; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
  }
}

void rope_row(float* x, const float* cos, const float* sin, std::int64_t head_dim) {
  const std::int64_t h = head_dim / 2;
  for (std::int64_t i = 0; i < h; ++i) {
    const float a = x[i], b = x[i + h];
    x[i] = a * cos[i] - b * sin[i];
    x[i + h] = b * cos[i] + a * sin[i];
  }
}

void softmax(float* x, std::int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  for (std::int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void swiglu(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh(const float* x, float* y, std::int64_t n) {
  const double beta = std::sqrt(2.0 / std::numbers::pi);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(beta * (v + 0.044715 * v * v * v))));
  }
}

void attention(const float* q, const KvRowsView& keys, const KvRowsView& values, float* out,
               std::int64_t q_len, std::int64_t past, float scale, std::int64_t window) {
  const std::int64_t d = keys.head_dim;
  const std::int64_t total = past + q_len;
  // Positions [lo, total): what the first query sees and later ones (a sliding window's ring
  // holds nothing before lo).
  const std::int64_t lo = window > 0 ? std::max<std::int64_t>(0, past + 1 - window) : 0;
  std::vector<float> k(static_cast<std::size_t>((total - lo) * d));  // [total - lo, head_dim]
  std::vector<float> v(static_cast<std::size_t>((total - lo) * d));
  load_kv_rows_ref(keys, lo, total - lo, k.data());
  load_kv_rows_ref(values, lo, total - lo, v.data());
  std::vector<float> p(static_cast<std::size_t>(total));
  for (std::int64_t i = 0; i < q_len; ++i) {
    const float* qi = q + i * d;
    const std::int64_t end = past + i + 1;  // keys [first, end) are visible
    const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, end - window) : 0;
    const std::int64_t visible = end - first;
    for (std::int64_t t = 0; t < visible; ++t) {
      const float* kt = k.data() + (first - lo + t) * d;
      float s = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) s += qi[c] * kt[c];
      p[static_cast<std::size_t>(t)] = s * scale;
    }
    softmax(p.data(), visible);
    float* oi = out + i * d;
    for (std::int64_t c = 0; c < d; ++c) oi[c] = 0.0f;
    for (std::int64_t t = 0; t < visible; ++t) {
      const float pt = p[static_cast<std::size_t>(t)];
      const float* vt = v.data() + (first - lo + t) * d;
      for (std::int64_t c = 0; c < d; ++c) oi[c] += pt * vt[c];
    }
  }
}

}  // namespace kvq::kernels::ref
