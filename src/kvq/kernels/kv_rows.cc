#include "kvq/kernels/kv_rows.h"

#include <cstring>

#include "kvq/kernels/cpu/kv_row_kernels.h"

namespace kvq::kernels {

void load_kv_rows(const KvRowsView& view, std::int64_t t0, std::int64_t n, float* out) {
  const std::int64_t d = view.head_dim;
  if (const std::int64_t ns = view.sink_count(t0, n); ns > 0) {
    load_kv_rows(view.sinks(), t0, ns, out);
    t0 += ns;
    n -= ns;
    out += ns * d;
  }
  if (const float* src = view.f32_rows(t0, n)) {
    std::memcpy(out, src, static_cast<std::size_t>(n * d) * sizeof(float));
    return;
  }
  for (std::int64_t t = 0; t < n; ++t) {
    kernels::dequantize_row(view.format, view.row(t0 + t), d, view.scale, view.zero_point,
                            view.global_scale, out + t * d);
  }
}

void load_kv_rows_ref(const KvRowsView& view, std::int64_t t0, std::int64_t n, float* out) {
  const std::int64_t d = view.head_dim;
  if (const std::int64_t ns = view.sink_count(t0, n); ns > 0) {
    load_kv_rows_ref(view.sinks(), t0, ns, out);
    t0 += ns;
    n -= ns;
    out += ns * d;
  }
  for (std::int64_t t = 0; t < n; ++t) {
    quant::dequantize_row(view.format, view.row(t0 + t), d, view.scale, view.zero_point,
                          view.global_scale, out + t * d);
  }
}

}  // namespace kvq::kernels
