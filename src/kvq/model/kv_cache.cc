#include "kvq/model/kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kvq/core/error.h"

namespace kvq::model {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Expands an empty / per-tensor / per-head vector to [kv_heads] values.
std::vector<float> expand(const std::vector<float>& v, std::int64_t kv_heads, float fallback,
                          KvFormat format, std::int64_t layer, const char* name) {
  const auto n = static_cast<std::int64_t>(v.size());
  if (n == 0) return std::vector<float>(static_cast<std::size_t>(kv_heads), fallback);
  if (n == 1) return std::vector<float>(static_cast<std::size_t>(kv_heads), v[0]);
  if (n != kv_heads) {
    fail<InvalidArgument>(
        "KV cache ({}): layer {} {} has {} values; expected 1 (per tensor) or {} (per kv head)",
        quant::kv_format_name(format), layer, name, n, kv_heads);
  }
  return v;
}

// Validated per-head parameters of one buffer. `kv` is "k" or "v".
KvStreamParams stream_params(const KvCacheConfig& spec, std::int64_t layer, std::int64_t kv_heads,
                             const char* kv) {
  const std::string base(kv);
  const KvFormat f = base == "k" ? spec.k_format(layer) : spec.v_format(layer);
  const quant::KvFormatTraits& t = quant::kv_format_traits(f);
  static const KvLayerScales kDefaults;
  const KvLayerScales& ls =
      spec.layers.empty() ? kDefaults : spec.layers[static_cast<std::size_t>(layer)];
  const bool is_k = base == "k";
  const auto& scale = is_k ? ls.k_scale : ls.v_scale;
  const auto& zp = is_k ? ls.k_zero_point : ls.v_zero_point;
  const auto& gs = is_k ? ls.k_global_scale : ls.v_global_scale;
  const std::string sname = base + "_scale", zname = base + "_zero_point",
                    gname = base + "_global_scale";
  KvStreamParams p;

  const bool dynamic = spec.scales == KvScales::kDynamic && t.needs_scale;
  p.dynamic_granularity = spec.granularity.value_or(KvScaleGranularity::kHead);
  if (t.global_scale) {
    p.scale.assign(static_cast<std::size_t>(kv_heads), 1.0f);  // unused: block scales in-row
  } else if (t.has_row_scales()) {  // int8_g32 / int4_g32: only in-row scales
    if (!scale.empty()) {
      fail<InvalidArgument>(
          "KV cache ({}): layer {} has a {}, but {} has no stream scale: its block scales are "
          "computed from each row when it is written",
          t.name, layer, sname, t.name);
    }
    p.scale.assign(static_cast<std::size_t>(kv_heads), 1.0f);
  } else if (dynamic && scale.empty()) {
    p.scale.assign(static_cast<std::size_t>(kv_heads), kNaN);  // fixed by the first write
  } else {
    if (t.needs_scale && scale.empty()) {
      fail<InvalidArgument>(
          "KV cache ({}): layer {} has no {}: a quantized KV cache needs calibrated scales "
          "(or dynamic scales)",
          t.name, layer, sname);
    }
    p.scale = expand(scale, kv_heads, 1.0f, f, layer, sname.c_str());
    for (std::size_t h = 0; h < p.scale.size(); ++h) {
      const float s = p.scale[h];
      if (!std::isfinite(s) || s <= 0.0f) {
        fail<InvalidArgument>(
            "KV cache ({}): layer {} {}[{}] is {}{}", t.name, layer, sname, h, s,
            std::isnan(s) ? ": the scales are not calibrated" : ", expected a finite scale > 0");
      }
    }
  }

  p.zero_point = expand(zp, kv_heads, 0.0f, f, layer, zname.c_str());
  if (dynamic && scale.empty() && !t.global_scale) {
    for (std::size_t h = 0; h < p.zero_point.size(); ++h) {
      if (p.zero_point[h] != 0.0f) {
        fail<InvalidArgument>(
            "KV cache ({}): layer {} {}[{}] is {}, but {} is dynamic (symmetric: zero point 0)",
            t.name, layer, zname, h, p.zero_point[h], sname);
      }
    }
  }
  const float zmin = t.code_min, zmax = t.code_max;
  for (std::size_t h = 0; h < p.zero_point.size(); ++h) {
    const float z = p.zero_point[h];
    if (z == 0.0f) continue;
    if (!t.supports_zero_point) {
      fail<InvalidArgument>("KV cache ({}): layer {} {}[{}] is {}; {} has no zero point", t.name,
                            layer, zname, h, z, t.name);
    }
    if (!std::isfinite(z) || z != std::nearbyint(z) || z < zmin || z > zmax) {
      fail<InvalidArgument>("KV cache ({}): layer {} {}[{}] is {}, expected an integer in [{}, {}]",
                            t.name, layer, zname, h, z, zmin, zmax);
    }
  }

  if (t.global_scale) {
    p.global_scale = expand(gs, kv_heads, kNaN, f, layer, gname.c_str());
    if (!gs.empty()) {
      for (std::size_t h = 0; h < p.global_scale.size(); ++h) {
        const float g = p.global_scale[h];
        if (!std::isfinite(g) || g <= 0.0f) {
          fail<InvalidArgument>("KV cache ({}): layer {} {}[{}] is {}{}", t.name, layer, gname, h,
                                g,
                                std::isnan(g) ? ": the global scales are not calibrated"
                                              : ", expected a finite global scale > 0");
        }
      }
    }
  } else {
    p.global_scale.assign(static_cast<std::size_t>(kv_heads), 1.0f);
  }
  return p;
}

}  // namespace

KvBuffer::KvBuffer(KvFormat format, std::int64_t batch, std::int64_t kv_heads,
                   std::int64_t capacity, std::int64_t head_dim, std::int64_t sink_rows,
                   std::int64_t ring_rows, std::int64_t block_rows)
    : format_(format),
      batch_(batch),
      kv_heads_(kv_heads),
      capacity_(capacity),
      head_dim_(head_dim),
      row_bytes_(static_cast<std::int64_t>(quant::kv_row_bytes(format, head_dim))),
      rows_(ring_rows > 0 && ring_rows < capacity ? ring_rows : capacity),
      sink_rows_(std::min(sink_rows, capacity)),
      sink_row_bytes_(static_cast<std::int64_t>(quant::kv_row_bytes(KvFormat::kBF16, head_dim))) {
  KVQ_CHECK(sink_rows >= 0, "KV buffer: {} sink rows", sink_rows);
  KVQ_CHECK(block_rows >= 0 && (block_rows == 0 || batch == 1),
            "KV buffer: {} rows per block, batch {}", block_rows, batch);
  block_rows_ = block_rows;
  const auto heads = static_cast<std::size_t>(kv_heads);
  params_.scale.assign(heads, 1.0f);
  params_.zero_point.assign(heads, 0.0f);
  // A global scale (nvfp4) is dynamic unless the spec gives one (set_params).
  const bool global = quant::kv_format_traits(format).global_scale;
  params_.global_scale.assign(heads, global ? kNaN : 1.0f);
  dynamic_.assign(heads, global);
  if (block_rows_ == 0) {
    const std::int64_t total = batch * kv_heads * rows_ * row_bytes_;
    bytes_ = std::make_unique<std::byte[]>(static_cast<std::size_t>(total));
  }
  if (sink_rows_ > 0) {
    sink_bytes_ = std::make_unique<std::byte[]>(
        static_cast<std::size_t>(batch * kv_heads * sink_rows_ * sink_row_bytes_));
  }
}

void KvBuffer::set_params(KvStreamParams params) {
  const auto heads = static_cast<std::size_t>(kv_heads_);
  KVQ_CHECK(params.scale.size() == heads && params.zero_point.size() == heads &&
                params.global_scale.size() == heads,
            "KV buffer params for {} heads", kv_heads_);
  params_ = std::move(params);
  const std::vector<float>& p = dynamic_param();
  for (std::size_t h = 0; h < heads; ++h) dynamic_[h] = std::isnan(p[h]);
}

void KvBuffer::reset_dynamic() {
  std::vector<float>& p = dynamic_param();
  for (std::size_t h = 0; h < dynamic_.size(); ++h) {
    if (dynamic_[h]) p[h] = kNaN;
  }
}

void KvBuffer::fix_dynamic(std::int64_t n, std::int64_t skip, const float* states) {
  std::vector<float>& param = dynamic_param();
  // Every write asks; only the first ones after construction / reset() have work to do.
  if (std::none_of(param.begin(), param.end(), [](float v) { return std::isnan(v); })) return;
  const auto heads = static_cast<std::size_t>(kv_heads_);
  std::vector<float> amax(heads, 0.0f);  // [kv_heads] over the finite values of the write
  for (std::size_t h = 0; h < heads; ++h) {
    if (!std::isnan(param[h])) continue;
    for (std::int64_t b = 0; b < batch_; ++b) {
      const float* src =
          states + ((b * kv_heads_ + static_cast<std::int64_t>(h)) * n) * head_dim_;  // [n, d]
      float m = amax[h];
      for (std::int64_t i = skip * head_dim_; i < n * head_dim_; ++i) {
        if (std::isfinite(src[i])) m = std::max(m, std::fabs(src[i]));
      }
      amax[h] = m;
    }
  }
  if (params_.dynamic_granularity == KvScaleGranularity::kTensor) {
    // Every head of a per-tensor buffer is dynamic and unfixed together.
    const float m = *std::max_element(amax.begin(), amax.end());
    std::fill(amax.begin(), amax.end(), m);
  }
  for (std::size_t h = 0; h < heads; ++h) {
    // amax 0 (zeros / non-finite only): stays unfixed, see the header.
    if (std::isnan(param[h]) && amax[h] > 0.0f) {
      param[h] = quant::kv_dynamic_param(format_, amax[h]);
    }
  }
}

void KvBuffer::write(std::int64_t pos, std::int64_t n, const float* states, std::int64_t first,
                     std::int64_t count) {
  KVQ_CHECK(pos >= 0 && n >= 0 && pos + n <= capacity_, "KV write [{}, {}) past capacity {}", pos,
            pos + n, capacity_);
  KVQ_CHECK(first >= 0 && count >= 0 && first + count <= n, "KV write of rows [{}, {}) of {}",
            first, first + count, n);
  KVQ_CHECK(count <= rows_, "KV write of {} positions into a ring of {} rows", count, rows_);
  if (count == 0) return;
  // Rows fill from 0 (a ring wraps only once all are written): the last position decides.
  KVQ_CHECK(std::min(pos + first + count, rows_) <= usable_rows(),
            "KV write up to position {}: the paged buffer holds {} rows (KvCache::reserve)",
            pos + first + count, usable_rows());
  const std::int64_t d = head_dim_;
  // Positions below sink_rows_ are sink rows: bf16, apart, and not seen by fix_dynamic.
  fix_dynamic(n, std::clamp<std::int64_t>(sink_rows_ - pos, 0, n), states);
  std::vector<kernels::KvRowsView> views;  // [kv_heads, batch]
  for (std::int64_t h = 0; h < kv_heads_; ++h)
    for (std::int64_t b = 0; b < batch_; ++b) views.push_back(rows(b, h));
  // Every row is encoded on its own (its codes and block scales depend on nothing else), so a
  // prefill's thousands of rows split over threads — the searched-scale formats spend ~10 µs on
  // a row — and give the same bytes; a decode step's few rows stay on the calling thread.
  const std::int64_t total = kv_heads_ * batch_ * count;
#pragma omp parallel for schedule(static) if (total >= 256)
  for (std::int64_t j = 0; j < total; ++j) {
    const std::int64_t h = j / (batch_ * count), b = j / count % batch_, i = first + j % count;
    const auto hs = static_cast<std::size_t>(h);
    // Still unfixed: this write's codes decode the same under any parameter (see the header).
    const float scale = std::isnan(params_.scale[hs]) ? 1.0f : params_.scale[hs];
    const float zp = params_.zero_point[hs];
    const float gs = std::isnan(params_.global_scale[hs]) ? 1.0f : params_.global_scale[hs];
    const float* x = states + ((b * kv_heads_ + h) * n + i) * d;  // [head_dim]
    const std::int64_t t = pos + i;
    if (t < sink_rows_) {
      std::byte* dst = sink_bytes_.get() + ((b * kv_heads_ + h) * sink_rows_ + t) * sink_row_bytes_;
      quant::quantize_row(KvFormat::kBF16, x, d, 1.0f, 0.0f, 1.0f, dst);
      continue;
    }
    // This buffer's own bytes.
    auto* dst = const_cast<std::byte*>(views[static_cast<std::size_t>(h * batch_ + b)].row(t));
    if (format_ == KvFormat::kF32 && scale == 1.0f) {
      std::memcpy(dst, x, static_cast<std::size_t>(d) * sizeof(float));
    } else {
      quant::quantize_row(format_, x, d, scale, zp, gs, dst);
    }
  }
}

kernels::KvRowsView KvBuffer::rows(std::int64_t b, std::int64_t h) const {
  KVQ_CHECK(b >= 0 && b < batch_ && h >= 0 && h < kv_heads_, "KV stream ({}, {})", b, h);
  const auto hs = static_cast<std::size_t>(h);
  kernels::KvRowsView v;
  v.format = format_;
  if (block_rows_ > 0) {
    v.blocks = blocks_.data();
    v.block_rows = block_rows_;
    v.block_offset = h * block_rows_ * row_bytes_;
  } else {
    v.data = bytes_.get() + (b * kv_heads_ + h) * rows_ * row_bytes_;
  }
  v.ring_rows = ring() ? rows_ : 0;
  v.row_bytes = row_bytes_;
  v.head_dim = head_dim_;
  // A dynamic parameter not fixed yet: every stored code decodes the same under any value.
  v.scale = std::isnan(params_.scale[hs]) ? 1.0f : params_.scale[hs];
  v.zero_point = params_.zero_point[hs];
  v.global_scale = std::isnan(params_.global_scale[hs]) ? 1.0f : params_.global_scale[hs];
  v.int8_query_scores = int8_query_scores_;
  if (sink_rows_ > 0) {
    v.sink_data = sink_bytes_.get() + (b * kv_heads_ + h) * sink_rows_ * sink_row_bytes_;
    v.sink_rows = sink_rows_;
  }
  return v;
}

std::int64_t KvBuffer::usable_rows() const {
  return block_rows_ > 0 ? std::min(rows_, blocks() * block_rows_) : rows_;
}

std::vector<float> KvBuffer::read(std::int64_t first, std::int64_t n) const {
  KVQ_CHECK(first >= 0 && n >= 0 && first + n <= capacity_ && n <= rows_,
            "KV read [{}, {}): capacity {}, {} rows", first, first + n, capacity_, rows_);
  std::vector<float> out(static_cast<std::size_t>(batch_ * kv_heads_ * n * head_dim_));
  for (std::int64_t b = 0; b < batch_; ++b) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      kernels::load_kv_rows(rows(b, h), first, n, out.data() + (b * kv_heads_ + h) * n * head_dim_);
    }
  }
  return out;
}

namespace {

// The cache's bytes are allocated up front: a context beyond what the machine holds (--ctx 10^8)
// is refused with the sizes, not left to end in std::bad_alloc or the OOM killer.
void check_fits_in_memory(double bytes, std::int64_t capacity, std::int64_t batch,
                          KvFormat format) {
  const double memory =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory) {
    fail<InvalidArgument>(
        "KV cache ({}) for {} tokens x batch {} needs {:.1f} GB, more than this machine's {:.1f} "
        "GB of memory: use a shorter context",
        quant::kv_format_name(format), capacity, batch, bytes / 1e9, memory / 1e9);
  }
}

// K + V row bytes of one position of one kv head of layer l.
std::int64_t pair_row_bytes(const KvCacheConfig& config, std::int64_t layer,
                            std::int64_t head_dim) {
  return static_cast<std::int64_t>(quant::kv_row_bytes(config.k_format(layer), head_dim) +
                                   quant::kv_row_bytes(config.v_format(layer), head_dim));
}

void check_sink_tokens(const KvCacheConfig& spec, std::int64_t layers) {
  const quant::KvFormatTraits& t = quant::kv_format_traits(spec.format);
  if (spec.sink_tokens < 0 || spec.sink_tokens > KvCacheConfig::kMaxSinkTokens) {
    fail<InvalidArgument>("KV cache ({}): {} sink tokens; expected 0 to {}", t.name,
                          spec.sink_tokens, KvCacheConfig::kMaxSinkTokens);
  }
  const auto quantized = [](KvFormat f) {
    const quant::KvFormatTraits& ft = quant::kv_format_traits(f);
    return ft.needs_scale || ft.has_row_scales();
  };
  bool any_quantized = false;
  for (std::int64_t l = 0; l < layers; ++l)
    any_quantized = any_quantized || quantized(spec.k_format(l)) || quantized(spec.v_format(l));
  if (!any_quantized) {
    fail<InvalidArgument>(
        "KV cache ({}): sink tokens keep the first tokens in bf16 apart from a quantized cache; "
        "{} stores every token unquantized already",
        spec.label(), spec.label());
  }
  if (spec.scales == KvScales::kCalibrated || spec.fake_quant) {
    fail<InvalidArgument>(
        "KV cache ({}): sink tokens need a dynamic cache (`--kv-cache FORMAT+sinkN` on a model "
        "without k/v quantization): a checkpoint's calibrated cache must equal its fake "
        "quantization, which quantizes every token",
        t.name);
  }
}

}  // namespace

std::int64_t KvCache::layer_rows(std::int64_t capacity, std::int64_t window,
                                 std::int64_t window_chunk) {
  if (window <= 0 || window_chunk <= 0) return capacity;
  return std::min(capacity, window - 1 + window_chunk);
}

std::int64_t KvCache::allocated_bytes(std::int64_t layers, std::int64_t batch,
                                      std::int64_t kv_heads, std::int64_t head_dim,
                                      std::int64_t capacity, const KvCacheConfig& config,
                                      std::span<const std::int64_t> layer_windows) {
  double row_bytes = 0;  // summed over layers: rows x (K + V row bytes)
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::int64_t w = layer_windows.empty() ? 0 : layer_windows[static_cast<std::size_t>(l)];
    row_bytes += static_cast<double>(layer_rows(capacity, w, config.window_chunk)) *
                 static_cast<double>(pair_row_bytes(config, l, head_dim));
  }
  // In double: absurd sizes (--ctx 10^8 on a large model) saturate instead of overflowing.
  const double bytes = row_bytes * static_cast<double>(batch) * static_cast<double>(kv_heads);
  return bytes >= 9.0e18 ? std::numeric_limits<std::int64_t>::max()
                         : static_cast<std::int64_t>(bytes);
}

KvCache::KvCache(std::int64_t layers, std::int64_t batch, std::int64_t kv_heads,
                 std::int64_t head_dim, std::int64_t capacity, const KvCacheConfig& spec,
                 std::span<const std::int64_t> layer_windows, KvBlockPool* pool)
    : batch_(batch),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      capacity_(capacity),
      config_(spec),
      pool_(pool) {
  if (layers <= 0 || batch <= 0 || kv_heads <= 0 || head_dim <= 0 || capacity <= 0) {
    fail<InvalidArgument>(
        "KV cache: layers {}, batch {}, kv_heads {}, head_dim {}, capacity {} must all be > 0",
        layers, batch, kv_heads, head_dim, capacity);
  }
  if (!layer_windows.empty() && static_cast<std::int64_t>(layer_windows.size()) != layers) {
    fail<InvalidArgument>("KV cache: {} layer windows for {} layers", layer_windows.size(), layers);
  }
  for (std::size_t l = 0; l < layer_windows.size(); ++l) {
    if (layer_windows[l] < 0)
      fail<InvalidArgument>("KV cache: layer {} window {}", l, layer_windows[l]);
  }
  if (spec.window_chunk < 0) {
    fail<InvalidArgument>("KV cache: window_chunk {}; expected >= 0 (0: no rings)",
                          spec.window_chunk);
  }
  windows_.assign(layer_windows.begin(), layer_windows.end());
  windows_.resize(static_cast<std::size_t>(layers), 0);
  if (static_cast<std::size_t>(spec.format) >= quant::kv_format_table().size()) {
    fail<InvalidArgument>("KV cache: unknown format {}", static_cast<int>(spec.format));
  }
  if (spec.value_format &&
      static_cast<std::size_t>(*spec.value_format) >= quant::kv_format_table().size()) {
    fail<InvalidArgument>("KV cache: unknown V format {}", static_cast<int>(*spec.value_format));
  }
  for (const KvCacheConfig::LayerFormat& lf : spec.layer_formats) {
    if (static_cast<std::size_t>(lf.format) >= quant::kv_format_table().size()) {
      fail<InvalidArgument>("KV cache: unknown format {} for layers {}-{}",
                            static_cast<int>(lf.format), lf.first, lf.last);
    }
    if (lf.first < 0 || lf.last < lf.first || lf.last >= layers || !(lf.keys || lf.values)) {
      fail<InvalidArgument>("KV cache ({}): '{}' names layers {}-{}; the model has layers 0-{}",
                            spec.label(), spec.layer_format_label(lf), lf.first, lf.last,
                            layers - 1);
    }
  }
  for (std::int64_t l = 0; l < layers; ++l) {
    for (const KvFormat f : {spec.k_format(l), spec.v_format(l)}) {
      if (const quant::KvFormatTraits& t = quant::kv_format_traits(f);
          t.head_dim_multiple > 0 && head_dim % t.head_dim_multiple != 0) {
        fail<InvalidArgument>(
            "KV cache ({}): head_dim {} is not a multiple of {}: {} stores one scale per block "
            "of {} values of a row",
            t.name, head_dim, t.head_dim_multiple, t.name, t.block_values);
      }
    }
    if (spec.int8_query_scores && !quant::kv_int8_query_supported(spec.k_format(l), head_dim)) {
      fail<InvalidArgument>(
          "KV cache ({}, head_dim {}): int8-query decode scores (+q8) need an int8 or int4 K "
          "cache, or nvfp4 with head_dim a multiple of 64: they multiply int8 query codes by "
          "integer K codes (layer {} keeps K in {})",
          spec.label(), head_dim, l, quant::kv_format_name(spec.k_format(l)));
    }
  }
  if (spec.v_format() != spec.k_format() &&
      (spec.scales == KvScales::kCalibrated || spec.fake_quant)) {
    fail<InvalidArgument>(
        "KV cache ({}): K and V in different formats need a dynamic cache (a model without k/v "
        "quantization): a checkpoint's kv_cache_scheme quantizes k and v alike",
        spec.label());
  }
  if (!spec.layers.empty() && static_cast<std::int64_t>(spec.layers.size()) != layers) {
    fail<InvalidArgument>("KV cache ({}): the config has scales for {} layers, the model has {}",
                          quant::kv_format_name(spec.format), spec.layers.size(), layers);
  }
  if (spec.scales == KvScales::kCalibrated && spec.layers.empty()) {
    fail<InvalidArgument>("KV cache ({}): calibrated scales were announced but none are given",
                          quant::kv_format_name(spec.format));
  }
  if (spec.sink_tokens != 0) check_sink_tokens(spec, layers);
  if (pool != nullptr) {
    if (batch != 1)
      fail<InvalidArgument>("KV cache: a paged cache holds 1 sequence, not {}", batch);
    if (const std::int64_t want =
            block_bytes(layers, kv_heads, head_dim, spec, pool->block_tokens());
        pool->block_bytes() != want) {
      fail<InvalidArgument>(
          "KV cache ({}): the block pool's blocks have {} bytes, this cache's {} ({} tokens of "
          "{} kv heads)",
          spec.label(), pool->block_bytes(), want, pool->block_tokens(), kv_heads);
    }
    lease_.pool = pool;
  } else {
    check_fits_in_memory(static_cast<double>(allocated_bytes(layers, batch, kv_heads, head_dim,
                                                             capacity, spec, windows_)),
                         capacity, batch, spec.format);
  }
  keys_.reserve(static_cast<std::size_t>(layers));
  values_.reserve(static_cast<std::size_t>(layers));
  for (std::int64_t l = 0; l < layers; ++l) {
    // Validate before allocating, so a bad spec fails fast.
    KvStreamParams kp = stream_params(spec, l, kv_heads, "k");
    KvStreamParams vp = stream_params(spec, l, kv_heads, "v");
    const std::int64_t rows =
        layer_rows(capacity, windows_[static_cast<std::size_t>(l)], spec.window_chunk);
    const std::int64_t block_rows =
        pool == nullptr ? 0 : layer_block_rows(l, kv_heads, head_dim, spec, pool->block_bytes());
    keys_.emplace_back(spec.k_format(l), batch, kv_heads, capacity, head_dim, spec.sink_tokens,
                       rows, block_rows);
    values_.emplace_back(spec.v_format(l), batch, kv_heads, capacity, head_dim, spec.sink_tokens,
                         rows, block_rows);
    keys_.back().set_params(std::move(kp));
    keys_.back().set_int8_query_scores(spec.int8_query_scores);
    values_.back().set_params(std::move(vp));
  }
}

KvCache::BlockLease& KvCache::BlockLease::operator=(BlockLease&& o) noexcept {
  if (this != &o) {
    if (pool != nullptr && !blocks.empty()) pool->give_back(blocks);
    pool = o.pool;
    blocks = std::move(o.blocks);
    o.blocks.clear();
  }
  return *this;
}

KvCache::BlockLease::~BlockLease() {
  if (pool != nullptr && !blocks.empty()) pool->give_back(blocks);
}

namespace {

std::int64_t blocks_of_rows(std::int64_t rows, std::int64_t block_tokens) {
  return (rows + block_tokens - 1) / block_tokens;
}

}  // namespace

std::int64_t KvCache::block_bytes(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                                  const KvCacheConfig& config, std::int64_t block_tokens) {
  std::int64_t widest = 0;
  for (std::int64_t l = 0; l < layers; ++l)
    widest = std::max(widest, pair_row_bytes(config, l, head_dim));
  return block_tokens * kv_heads * widest;
}

std::int64_t KvCache::layer_block_rows(std::int64_t layer, std::int64_t kv_heads,
                                       std::int64_t head_dim, const KvCacheConfig& config,
                                       std::int64_t block_bytes) {
  return block_bytes / (kv_heads * pair_row_bytes(config, layer, head_dim));
}

std::int64_t KvCache::blocks_for(std::int64_t tokens, std::int64_t layers, std::int64_t kv_heads,
                                 std::int64_t head_dim, std::int64_t capacity,
                                 const KvCacheConfig& config, std::int64_t block_tokens,
                                 std::span<const std::int64_t> layer_windows) {
  const std::int64_t bytes = block_bytes(layers, kv_heads, head_dim, config, block_tokens);
  std::int64_t n = 0;
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::int64_t w = layer_windows.empty() ? 0 : layer_windows[static_cast<std::size_t>(l)];
    n += blocks_of_rows(std::min(tokens, layer_rows(capacity, w, config.window_chunk)),
                        layer_block_rows(l, kv_heads, head_dim, config, bytes));
  }
  return n;
}

std::int64_t KvCache::blocks_missing(std::int64_t tokens) const {
  if (!paged()) return 0;
  std::int64_t n = 0;
  for (const KvBuffer& k : keys_) {
    n += std::max<std::int64_t>(
        0, blocks_of_rows(std::min(tokens, k.rows()), k.block_rows()) - k.blocks());
  }
  return n;
}

bool KvCache::reserve(std::int64_t tokens) {
  if (tokens < 0 || tokens > capacity_) {
    fail<InvalidArgument>("KV cache reserve of {} tokens: capacity is {}", tokens, capacity_);
  }
  const std::int64_t missing = blocks_missing(tokens);
  if (missing == 0) return true;
  std::vector<std::byte*> taken;
  if (!pool_->take(missing, taken)) return false;
  lease_.blocks.insert(lease_.blocks.end(), taken.begin(), taken.end());
  // A block: [K: kv_heads, block_rows, k_row_bytes][V: kv_heads, block_rows, v_row_bytes].
  auto next = taken.begin();
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    KvBuffer &k = keys_[l], &v = values_[l];
    const std::int64_t want = blocks_of_rows(std::min(tokens, k.rows()), k.block_rows());
    while (k.blocks() < want) {
      std::byte* block = *next++;
      k.add_block(block);
      v.add_block(block + kv_heads_ * k.block_rows() * k.row_bytes());
    }
  }
  return true;
}

KvBuffer& KvCache::keys(std::int64_t layer) { return keys_.at(static_cast<std::size_t>(layer)); }
const KvBuffer& KvCache::keys(std::int64_t layer) const {
  return keys_.at(static_cast<std::size_t>(layer));
}
KvBuffer& KvCache::values(std::int64_t layer) {
  return values_.at(static_cast<std::size_t>(layer));
}
const KvBuffer& KvCache::values(std::int64_t layer) const {
  return values_.at(static_cast<std::size_t>(layer));
}

void KvCache::advance(std::int64_t n) {
  KVQ_CHECK(n >= 0 && length_ + n <= capacity_, "KV advance {} + {} > {}", length_, n, capacity_);
  length_ += n;
}

void KvCache::reset() {
  length_ = 0;
  for (KvBuffer& b : keys_) b.reset_dynamic();
  for (KvBuffer& b : values_) b.reset_dynamic();
}

std::int64_t KvCache::window(std::int64_t layer) const {
  return windows_.at(static_cast<std::size_t>(layer));
}

std::int64_t KvCache::first_position(std::int64_t layer) const {
  return std::max<std::int64_t>(0, length_ - rows(layer));
}

bool KvCache::can_truncate(std::int64_t n) const {
  if (n < 0 || n > length_) return false;
  if (n == 0) return true;
  // The next token (position n) sees positions from n - window + 1: still in every ring?
  for (std::int64_t l = 0; l < layers(); ++l) {
    if (keys(l).ring() && std::max<std::int64_t>(0, n - window(l) + 1) < first_position(l))
      return false;
  }
  return true;
}

void KvCache::truncate(std::int64_t n) {
  if (n < 0 || n > length_) {
    fail<InvalidArgument>("KV cache truncate to {}: length is {}", n, length_);
  }
  if (!can_truncate(n)) {
    std::int64_t ring = capacity_;
    for (const KvBuffer& b : keys_) ring = std::min(ring, b.rows());
    fail<InvalidArgument>(
        "KV cache truncate to {}: the sliding-window layers keep a ring of the last {} of the {} "
        "cached positions and have overwritten some that position {} attends to (a ring rolls "
        "back at most {} tokens)",
        n, ring, length_, n, config_.window_chunk);
  }
  if (n == 0) {
    reset();
    return;
  }
  length_ = n;
}

bool KvCache::has_dynamic_scales() const {
  for (const std::vector<KvBuffer>* bufs : {&keys_, &values_}) {
    for (const KvBuffer& b : *bufs) {
      for (std::int64_t h = 0; h < kv_heads_; ++h) {
        if (b.dynamic(h)) return true;
      }
    }
  }
  return false;
}

std::string_view kv_granularity_name(KvScaleGranularity granularity) {
  return granularity == KvScaleGranularity::kTensor ? "tensor" : "head";
}

std::string_view kv_scales_name(KvScales scales) {
  switch (scales) {
    case KvScales::kCalibrated:
      return "calibrated";
    case KvScales::kDynamic:
      return "dynamic";
    default:
      return "none";
  }
}

KvFormat KvCacheConfig::k_format(std::int64_t layer) const {
  KvFormat f = k_format();
  for (const LayerFormat& lf : layer_formats)
    if (lf.keys && layer >= lf.first && layer <= lf.last) f = lf.format;
  return f;
}

KvFormat KvCacheConfig::v_format(std::int64_t layer) const {
  KvFormat f = v_format();
  for (const LayerFormat& lf : layer_formats)
    if (lf.values && layer >= lf.first && layer <= lf.last) f = lf.format;
  return f;
}

KvCacheConfig KvCacheConfig::of(KvFormat format) {
  if (quant::kv_format_traits(format).global_scale) return dynamic(format);  // nvfp4
  KvCacheConfig c;
  c.format = format;
  return c;
}

KvCacheConfig KvCacheConfig::calibrated(KvFormat format, std::vector<KvLayerScales> layers,
                                        std::optional<KvScaleGranularity> granularity) {
  KvCacheConfig c;
  c.format = format;
  c.scales = KvScales::kCalibrated;
  c.granularity = granularity;
  c.layers = std::move(layers);
  return c;
}

KvCacheConfig KvCacheConfig::dynamic(KvFormat format, KvScaleGranularity granularity,
                                     bool int8_query_scores, std::optional<KvFormat> value_format) {
  KvCacheConfig c;
  c.format = format;
  if (value_format && *value_format != format) c.value_format = value_format;
  c.int8_query_scores = int8_query_scores;
  if (quant::kv_format_traits(format).needs_scale ||
      quant::kv_format_traits(c.v_format()).needs_scale) {
    c.scales = KvScales::kDynamic;
    c.granularity = granularity;
  }
  return c;
}

std::string KvCacheConfig::label() const {
  if (fake_quant) return fake_quant_of.empty() ? "fake" : "fake(" + fake_quant_of + ")";
  // One format with its granularity; `:g` only where a format has stream scales.
  const auto name = [&](KvFormat f, bool always) {
    std::string n(quant::kv_format_name(f));
    if (granularity && (always || quant::kv_format_traits(f).needs_scale)) {
      n.push_back(':');
      n.append(kv_granularity_name(*granularity));
    }
    return n;
  };
  std::string s = v_format() == k_format()
                      ? name(format, layer_formats.empty())
                      : name(k_format(), false) + "/" + name(v_format(), false);
  if (int8_query_scores) s.append("+q8");
  if (sink_tokens > 0) s.append(fmt::format("+sink{}", sink_tokens));
  for (const LayerFormat& lf : layer_formats) s.append(fmt::format("+{}", layer_format_label(lf)));
  return s;
}

std::string KvCacheConfig::layer_format_label(const LayerFormat& lf) const {
  const char* who = lf.keys && lf.values ? "kv" : lf.keys ? "k" : "v";
  const std::string layers =
      lf.last == lf.first ? fmt::format("{}", lf.first) : fmt::format("{}-{}", lf.first, lf.last);
  const bool scaled = granularity && quant::kv_format_traits(lf.format).needs_scale;
  return fmt::format("{}{}={}{}{}", who, layers, quant::kv_format_name(lf.format),
                     scaled ? ":" : "", scaled ? kv_granularity_name(*granularity) : "");
}

std::string KvCacheConfig::describe() const {
  if (fake_quant) {
    return label() + " (fake quantization with the checkpoint's scales, fp32 cache)";
  }
  switch (scales) {
    case KvScales::kCalibrated:
      return label() + " (calibrated scales from the checkpoint)";
    case KvScales::kDynamic:
      return label() + " (dynamic scales)";
    default:
      return label();
  }
}

std::int64_t KvCache::attended_bytes(std::int64_t context) const {
  std::int64_t total = 0;
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    const std::int64_t w = windows_[l];
    total += (keys_[l].bytes_per_token() + values_[l].bytes_per_token()) *
             (w > 0 ? std::min(w, context) : context);
  }
  return total;
}

std::int64_t KvCache::allocated_bytes() const {
  if (paged()) return blocks() * pool_->block_bytes();
  return allocated_bytes(layers(), batch_, kv_heads_, head_dim_, capacity_, config_, windows_);
}

std::int64_t KvCache::bytes_per_token() const {
  std::int64_t total = 0;
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    total += keys_[l].bytes_per_token() + values_[l].bytes_per_token();
  }
  return total;
}

}  // namespace kvq::model
