// Per-layer KV cache, preallocated to a maximum context, stored PACKED in a quant::KvFormat per
// layer's K and V (KvCacheConfig::k_format(layer) / v_format(layer): one format for every layer
// unless the config lists per-layer exceptions).
//
// Layout of every layer's K and V buffer: [batch, kv_heads, rows, row_bytes] where a row is
// the head_dim values of one token of one kv head in the format's row layout
// (kvq/quant/formats.h: f32 / bf16 / f16 / fp8 e4m3 / int8 / int4 nibbles / nvfp4 nibbles + E4M3
// block scales / int8_g32, int4_g32, int4_g32a codes + fp16 block scales (and minima), which need
// head_dim % 32 == 0);
// a (batch, head) stream is `rows` contiguous rows. rows = capacity, except in a sliding-window
// layer (attention sees the last `window` positions only: Mistral, Gemma 3's local layers) when
// its cache is a RING of window - 1 + window_chunk rows (KvCacheConfig::window_chunk) shorter
// than the capacity: position t lives in row t % rows, overwriting position t - rows, which no
// query from t on can see. A forward feeds such a layer at most window_chunk new tokens at a time
// (the model splits longer ones), so every row a chunk's queries see is still there when they
// attend; decode needs only `window` rows. Memory then stays fixed however long the context.
// A PAGED cache (batch 1; kvq serve) keeps no allocation of its own: its rows live in blocks of a
// KvBlockPool (model/kv_block_pool.h), a block table per layer, taken as the sequence grows
// (reserve()); rows, rings and formats are the same, so its logits are bit for bit a contiguous
// cache's.
// Keys are stored post-RoPE, both before GQA head repetition, exactly what the key/value hooks
// saw (after they ran).
//
// Every (layer, kv head) stream of K and of V has its own dequantization parameters, shared by
// the batch: scale, zero point and, for nvfp4, a global scale. Rows are encoded at append time
// with quant::quantize_row(format, x, scale, zero_point, global_scale) — the same math as
// compressed-tensors' fake_quantize with those qparams — and attention reads the packed rows
// directly through KvRowsView (kvq/kernels/kv_rows.h).
//
// NVFP4 KV is kvq's own format: compressed-tensors rejects group / tensor_group strategies for
// attention ("Group quantization cannot be applied to attention"), so there is no reference kv
// scheme to follow. Like vLLM's nvfp4 KV cache, the per-16 E4M3 block scales are computed from the
// data when a row is written (compressed-tensors' tensor_group math: block_scale =
// e4m3(global_scale · amax_block / 6)); the per-stream fp32 global scale comes from calibration
// (amax-based, generate_gparam: 448 · 6 / amax) or is DYNAMIC (below).
//
// Dynamic parameters (no calibration; vLLM's dynamic kv-scale calculation, which also fixes the
// scales from the first forward, with compressed-tensors' symmetric qparams math). A stream's
// parameter is dynamic when the config leaves it empty and allows it (KvScales::kDynamic;
// nvfp4 global scales are always dynamic when not given). It is NaN (unfixed) until the first
// write after construction / reset() that holds a finite non-zero value in its scope — the
// head's rows across the batch (KvScaleGranularity::kHead) or every head of the buffer (kTensor:
// one value shared by the layer's K heads, another by its V heads) — and is then fixed from the
// amax of that write's finite values in the scope, by the format's rule in the codec table
// (quant::kv_dynamic_param):
//   fp8 / int8 / int4 scale = compressed-tensors' symmetric calculate_qparams(-amax, amax) on
//                             the format's grid = amax / ((q_max - q_min) / 2): amax / 448,
//                             amax / 127.5, amax / 7.5
//   nvfp4 global scale      = quant::generate_gparam(±kNvfp4DynamicHeadroom · amax)
//                           = 448 · 6 / (kNvfp4DynamicHeadroom · amax)
// Later writes keep it (until reset() / truncate(0)): a later value beyond the first write's
// range saturates as the format does (fp8 at ±448 · scale, int8 at [-128, 127] · scale, int4 at
// [-8, 7] · scale). The nvfp4 headroom (4, a power of two) lets later tokens be up to 4× larger
// than the first ones before the block scales saturate at 448; it costs only the bottom two
// binades of the E4M3 block-scale range (blocks 2^11× smaller than the first write's amax lose
// block-scale precision). fp8 / int get no headroom: compressed-tensors' math, as asked of
// kvq (vLLM divides by 200 / 100 instead of 448 for fp8 k / v).
// Fallback: a write whose scope holds only zeros and non-finite values leaves the parameter
// unfixed, because its codes decode the same under any scale (0 stays 0, NaN stays NaN; ±inf,
// stored as the largest code, decodes at the scale fixed later). So a dynamic parameter is never
// 0, NaN or a made-up constant once data is stored; views of an unfixed stream use 1.
// Dynamic parameters are shared by the batch like calibrated ones: a batched first write fixes
// them from all its sequences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvq/kernels/kv_rows.h"
#include "kvq/model/kv_block_pool.h"
#include "kvq/quant/formats.h"

namespace kvq::model {

using quant::KvFormat;

// Dynamic nvfp4 global scales leave this factor of headroom above the first write's amax.
inline constexpr float kNvfp4DynamicHeadroom = quant::kNvfp4DynamicHeadroom;

// The quantization parameters of one layer's K and V streams. Every vector is empty (the
// default below), one value (per-tensor: the same for every kv head) or kv_heads values
// (per-head, compressed-tensors' attn_head strategy).
struct KvLayerScales {
  // Dequantization scales: required (finite, > 0) for fp8 / int8 / int4 unless the config allows
  // dynamic scales (then empty = dynamic); default 1 for f32 / bf16 / f16 (where a scale divides
  // before the cast); unused by nvfp4.
  std::vector<float> k_scale, v_scale;
  // Integer zero points (asymmetric int8 / int4, within the code range); default 0; must be 0
  // for formats without zero points.
  std::vector<float> k_zero_point, v_zero_point;
  // nvfp4 only: fp32 global scales (finite, > 0); empty = dynamic (see above).
  std::vector<float> k_global_scale, v_global_scale;
};

// One scale per kv head (compressed-tensors' attn_head strategy) or one per layer's K and one
// per its V (strategy tensor).
enum class KvScaleGranularity : std::uint8_t { kHead, kTensor };
std::string_view kv_granularity_name(KvScaleGranularity granularity);  // "head" / "tensor"

// Where a cache's quantization parameters come from.
enum class KvScales : std::uint8_t {
  kNone,        // f32 / bf16 / f16: stored unscaled; int8_g32 / int4_g32 / int4_g32a: in-row block
                // scales, computed from each row when it is written (no per-stream parameter)
  kCalibrated,  // given in KvCacheConfig::layers (a calibration's or a checkpoint's k/v qparams;
                // nvfp4 global scales left empty there are dynamic per head)
  kDynamic,     // fixed from the data by the first write (see above), per `granularity`
};
std::string_view kv_scales_name(KvScales scales);  // "none", "calibrated", "dynamic"

// Everything that decides a run's KV cache, in one value: every command, eval task, bench and
// compare builds its caches from one of these (runtime/kv_cache_choice.h makes it from a
// checkpoint's quantization_config or a `--kv-cache` string; CausalLM::make_cache consumes it).
struct KvCacheConfig {
  // K's format, and V's unless value_format says otherwise.
  KvFormat format = KvFormat::kF32;
  // V's format when it differs from K's (llama.cpp's -ctk / -ctv; `--kv-cache int8_g32/int4_g32`).
  // Dynamic or unscaled caches only (InvalidArgument otherwise: a checkpoint's kv_cache_scheme
  // quantizes k and v alike).
  std::optional<KvFormat> value_format;
  KvFormat k_format() const { return format; }
  KvFormat v_format() const { return value_format.value_or(format); }
  // Per-layer exceptions to those two (`--kv-cache int4_g32_mse+v1=int8_g32`: V of layer 1 in
  // int8_g32; a checkpoint whose kv_cache_scheme leaves layers unquantized: f32 there): layers
  // [first, last] keep their K and/or V in `format`; a later entry wins where two overlap. A
  // format with stream scales takes them as the cache's other layers do (dynamic, or calibrated
  // in `layers`). Rows differ in size per layer then; a paged cache gives each layer as many rows
  // per block as fit (KvCache::block_bytes).
  struct LayerFormat {
    std::int64_t first = 0, last = 0;
    bool keys = true, values = true;
    KvFormat format = KvFormat::kF32;
  };
  std::vector<LayerFormat> layer_formats;
  KvFormat k_format(std::int64_t layer) const;
  KvFormat v_format(std::int64_t layer) const;
  KvScales scales = KvScales::kNone;
  // Of the scales (calibrated: the checkpoint's strategy; dynamic: how they are fixed, kHead when
  // unset); nullopt for unscaled formats.
  std::optional<KvScaleGranularity> granularity;
  // kCalibrated: one entry per layer. kDynamic: empty, or per-layer values that are used where
  // given (the rest is dynamic). Given values must be finite and > 0 (InvalidArgument naming the
  // layer and tensor otherwise): a quantized cache never runs with forgotten scales.
  std::vector<KvLayerScales> layers;
  // int8 / int4 / nvfp4 (head_dim % 64 == 0) only (InvalidArgument otherwise): decode scores with
  // the query quantized to int8 per head and integer dot products (AVX-512 VNNI) instead of the
  // exact float path. Approximate: opt-in (`--kv-cache int8:head+q8`); prefill attention and the V
  // side stay exact.
  bool int8_query_scores = false;
  // This f32 cache stands for a checkpoint's k/v FAKE quantization (the reference's semantics:
  // its lifecycle's hooks quantize k/v, the cache stores them unscaled); `fake_quant_of` names
  // the checkpoint's own cache ("fp8:head"; empty when its k/v have no packed format). Only
  // names the run: an f32 cache is an f32 cache.
  bool fake_quant = false;
  std::string fake_quant_of;
  // Attention sinks (StreamingLLM's observation: the first tokens draw a large share of every
  // query's attention, so their K/V errors move every output): positions [0, sink_tokens) of
  // each sequence are stored in bf16 instead of `format` (`--kv-cache int4_g32_mse+sink1`), and
  // dynamic per-stream scales are fixed from the other rows. Dynamic quantized caches only
  // (InvalidArgument otherwise: a calibrated cache must equal its fake quantization). Costs
  // (16 - bits) · head_dim bits per stream and sink token, fixed per sequence.
  std::int64_t sink_tokens = 0;
  static constexpr std::int64_t kMaxSinkTokens = 64;
  // Sliding-window layers (a cache made with the model's layer windows) keep a ring of
  // window - 1 + window_chunk rows when that is shorter than the capacity, and a forward feeds
  // them at most window_chunk new tokens at a time (see the top of this file). A multiple of 32,
  // the prefill kernel's query tile, keeps the logits bit-identical to a full-length cache's;
  // other values are exact up to the summation order. 0: full-length caches everywhere.
  std::int64_t window_chunk = kDefaultWindowChunk;
  static constexpr std::int64_t kDefaultWindowChunk = 256;

  // An unscaled cache (f32 / bf16 / f16), or nvfp4 with dynamic per-head global scales.
  static KvCacheConfig of(KvFormat format);
  // Scales given per layer (a calibration's; see `layers`).
  static KvCacheConfig calibrated(KvFormat format, std::vector<KvLayerScales> layers,
                                  std::optional<KvScaleGranularity> granularity = std::nullopt);
  // A quantized format with dynamic scales of that granularity (unscaled formats: plain `of`);
  // V in `value_format` when given and different.
  static KvCacheConfig dynamic(KvFormat format,
                               KvScaleGranularity granularity = KvScaleGranularity::kHead,
                               bool int8_query_scores = false,
                               std::optional<KvFormat> value_format = std::nullopt);

  // "f32", "bf16", "fp8:head", "int8:head+q8", "nvfp4:head", "int4_g32+sink1", "bf16/int4:head"
  // (K / V), "int4_g32_mse+sink1+v1=int8_g32" (per-layer), "fake(fp8:head)": the cache's name in
  // tables, JSON and log lines.
  std::string label() const;
  // The label with where the scales come from, for text output: "fp8:head (calibrated scales
  // from the checkpoint)".
  std::string describe() const;
  // Whether the cache itself stores k/v quantized with calibrated parameters, i.e. it is the
  // packed form of the model's k/v quantization (then the lifecycle's k/v fake-quantization
  // hooks stand aside for it: k/v are quantized exactly once).
  bool stores_calibrated_quantization() const {
    return scales == KvScales::kCalibrated && quant::kv_format_traits(format).needs_scale;
  }
  // The label of one per-layer exception: "v1=int8_g32", "kv0-2=f32", "k5=int8:head".
  std::string layer_format_label(const LayerFormat& lf) const;
};

// The per-head parameters of one buffer, [kv_heads] each.
struct KvStreamParams {
  std::vector<float> scale, zero_point;  // scale (not nvfp4): NaN = dynamic, fixed on write
  std::vector<float> global_scale;       // nvfp4: NaN = dynamic, fixed on write
  KvScaleGranularity dynamic_granularity = KvScaleGranularity::kHead;
};

// One layer's K or V: [batch, kv_heads, rows, row_bytes] holding positions [0, capacity).
class KvBuffer {
 public:
  // Rows of positions [0, sink_rows) are kept in bf16 apart from the packed rows (attention
  // sinks, KvCacheConfig::sink_tokens). ring_rows in (0, capacity): a ring of that many rows
  // (see the top of this file); else `capacity` rows. block_rows > 0 (batch 1): paged, the rows
  // live in blocks given by add_block (none at first); else one allocation.
  KvBuffer(KvFormat format, std::int64_t batch, std::int64_t kv_heads, std::int64_t capacity,
           std::int64_t head_dim, std::int64_t sink_rows = 0, std::int64_t ring_rows = 0,
           std::int64_t block_rows = 0);

  // Encodes states [batch, kv_heads, n, head_dim] (fp32, contiguous), positions [pos, pos + n),
  // into their rows.
  void write(std::int64_t pos, std::int64_t n, const float* states) { write(pos, n, states, 0, n); }
  // Only positions pos + [first, first + count) of them (a ring takes a long forward a chunk at
  // a time); dynamic parameters are fixed from all n, as by write(pos, n, states).
  void write(std::int64_t pos, std::int64_t n, const float* states, std::int64_t first,
             std::int64_t count);
  kernels::KvRowsView rows(std::int64_t b, std::int64_t h) const;
  // Positions [first, first + n) of every stream decoded to fp32: [batch, kv_heads, n,
  // head_dim] (tests, debug, Python); a ring must still hold them.
  std::vector<float> read(std::int64_t first, std::int64_t n) const;
  std::vector<float> read(std::int64_t n) const { return read(0, n); }

  // Replaces the per-head parameters (already validated: see KvCache). Set before writing.
  void set_params(KvStreamParams params);
  // Forgets dynamically fixed parameters (the next write with data fixes them again).
  void reset_dynamic();
  // K of an int8 / int4 / nvfp4 cache: views ask for approximate int8-query decode scores
  // (KvCacheConfig).
  void set_int8_query_scores(bool on) { int8_query_scores_ = on; }
  // Whether head h's scale (nvfp4: global scale) is dynamic (fixed or not: see scale()).
  bool dynamic(std::int64_t h) const { return dynamic_.at(static_cast<std::size_t>(h)); }

  KvFormat format() const { return format_; }
  // NaN while a dynamic scale is not fixed yet; 1 for f32 / bf16 / f16 / nvfp4 by default.
  float scale(std::int64_t h) const { return params_.scale.at(static_cast<std::size_t>(h)); }
  float zero_point(std::int64_t h) const {
    return params_.zero_point.at(static_cast<std::size_t>(h));
  }
  // NaN while a dynamic nvfp4 global scale is not fixed yet; 1 for other formats.
  float global_scale(std::int64_t h) const {
    return params_.global_scale.at(static_cast<std::size_t>(h));
  }
  std::int64_t row_bytes() const { return row_bytes_; }
  // Bytes one token occupies in this buffer for one sequence (all kv heads).
  std::int64_t bytes_per_token() const { return row_bytes_ * kv_heads_; }
  // Rows per stream: the capacity, or the ring's length.
  std::int64_t rows() const { return rows_; }
  bool ring() const { return rows_ < capacity_; }

  // Paged buffers: rows per block (0: contiguous), and the rows the blocks given so far hold
  // (rows() when contiguous). Writing a row beyond them is a programming error (KvCache::reserve).
  std::int64_t block_rows() const { return block_rows_; }
  std::int64_t blocks() const { return static_cast<std::int64_t>(blocks_.size()); }
  std::int64_t usable_rows() const;
  // Appends a block: `base` is where this buffer's part of it starts, [kv_heads, block_rows,
  // row_bytes] (kv_block_pool.h).
  void add_block(std::byte* base) { blocks_.push_back(base); }

 private:
  // Fixes the unfixed dynamic parameters that rows [skip, n) of states [batch, kv_heads, n,
  // head_dim] allow.
  void fix_dynamic(std::int64_t n, std::int64_t skip, const float* states);
  // The parameter a dynamic stream uses: params_.global_scale (nvfp4) or params_.scale.
  std::vector<float>& dynamic_param() {
    return quant::kv_format_traits(format_).global_scale ? params_.global_scale : params_.scale;
  }

  KvFormat format_;
  std::int64_t batch_, kv_heads_, capacity_, head_dim_, row_bytes_;
  std::int64_t rows_;  // per stream: capacity_, or fewer in a ring
  std::int64_t sink_rows_, sink_row_bytes_;
  KvStreamParams params_;
  std::vector<bool> dynamic_;  // [kv_heads] the scale (nvfp4: global scale) is dynamic
  bool int8_query_scores_ = false;
  std::unique_ptr<std::byte[]> bytes_;  // contiguous: [batch, kv_heads, rows, row_bytes]
  std::int64_t block_rows_ = 0;         // paged: rows per block, blocks_ this buffer's parts
  std::vector<std::byte*> blocks_;
  std::unique_ptr<std::byte[]> sink_bytes_;  // [batch, kv_heads, sink_rows, sink_row_bytes]
};

class KvCache {
 public:
  // InvalidArgument naming the layer and tensor ("layer 3 k_scale[1] is nan: ...") when the
  // config's scales are missing, not calibrated (NaN), <= 0, of the wrong size, or a zero point
  // is not an integer code of the format. layer_windows: empty, or per layer the sliding window
  // its attention reads (0: every position), which sizes its ring (config.window_chunk; what
  // CausalLM::make_cache passes). With a pool: a paged cache (batch 1) whose rows come from the
  // pool's blocks as reserve() asks (none at first); InvalidArgument when the pool's blocks are
  // not this cache's block_bytes. The pool must outlive the cache.
  KvCache(std::int64_t layers, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
          std::int64_t capacity, const KvCacheConfig& config = {},
          std::span<const std::int64_t> layer_windows = {}, KvBlockPool* pool = nullptr);
  // KvCacheConfig::of(format): f32 / bf16 / f16, or nvfp4 with dynamic global scales.
  KvCache(std::int64_t layers, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
          std::int64_t capacity, KvFormat format)
      : KvCache(layers, batch, kv_heads, head_dim, capacity, KvCacheConfig::of(format)) {}

  std::int64_t layers() const { return static_cast<std::int64_t>(keys_.size()); }
  std::int64_t batch() const { return batch_; }
  std::int64_t kv_heads() const { return kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t length() const { return length_; }     // tokens cached so far
  KvFormat format() const { return config_.format; }  // K's (config().v_format(): V's)
  // What the cache was built from (its parameters as given; dynamic ones live in the buffers).
  const KvCacheConfig& config() const { return config_; }

  KvBuffer& keys(std::int64_t layer);
  const KvBuffer& keys(std::int64_t layer) const;
  KvBuffer& values(std::int64_t layer);
  const KvBuffer& values(std::int64_t layer) const;

  // Layer l's sliding window (0: none or not given), and the rows per stream its buffers hold
  // (the capacity, or a ring's length).
  std::int64_t window(std::int64_t layer) const;
  std::int64_t rows(std::int64_t layer) const { return keys(layer).rows(); }
  // The first position layer l still holds (0 unless its ring has wrapped).
  std::int64_t first_position(std::int64_t layer) const;
  // Rows per stream of a layer with this window: window - 1 + window_chunk when that is below
  // the capacity (a ring), else the capacity.
  static std::int64_t layer_rows(std::int64_t capacity, std::int64_t window,
                                 std::int64_t window_chunk);

  // Marks n more tokens as cached (the model calls this after every layer wrote them).
  void advance(std::int64_t n);
  // Forgets everything (keeps the allocation and the calibrated parameters; dynamic
  // parameters are fixed again by the next write).
  void reset();
  // Keeps the first n tokens (n <= length()); truncate(0) is reset(). InvalidArgument when a
  // ring has already overwritten a position the next token would see (a ring rolls back at
  // most window_chunk tokens): see can_truncate.
  void truncate(std::int64_t n);
  bool can_truncate(std::int64_t n) const;

  // K and V bytes of one token of one sequence across all layers: 2 · layers · kv_heads ·
  // kv_row_bytes(format, head_dim) (values plus in-row block scales; per-stream parameters are
  // not per token and not counted).
  std::int64_t bytes_per_token() const;
  // K and V bytes a decode step at this context reads (each layer's window of it).
  std::int64_t attended_bytes(std::int64_t context) const;
  // Bytes of K and V rows allocated (sink rows and parameters aside); paged: the blocks held.
  std::int64_t allocated_bytes() const;
  // What a cache of these arguments would allocate, without allocating it (admission control).
  static std::int64_t allocated_bytes(std::int64_t layers, std::int64_t batch,
                                      std::int64_t kv_heads, std::int64_t head_dim,
                                      std::int64_t capacity, const KvCacheConfig& config,
                                      std::span<const std::int64_t> layer_windows = {});
  // Whether some parameter is dynamic (fixed from the data, not calibrated).
  bool has_dynamic_scales() const;

  // Paged caches. A block holds K and V rows of one layer, every kv head: block_tokens positions
  // of the layer with the largest rows (per-layer formats), as many as fit of the others.
  static std::int64_t block_bytes(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                                  const KvCacheConfig& config, std::int64_t block_tokens);
  // Positions per block of layer l: block_bytes / (kv_heads · its K + V row bytes).
  static std::int64_t layer_block_rows(std::int64_t layer, std::int64_t kv_heads,
                                       std::int64_t head_dim, const KvCacheConfig& config,
                                       std::int64_t block_bytes);
  // Blocks a paged cache of this capacity holds once positions [0, tokens) have rows: per layer
  // ceil(min(tokens, its rows) / its rows per block) (a ring needs no more than its rows).
  static std::int64_t blocks_for(std::int64_t tokens, std::int64_t layers, std::int64_t kv_heads,
                                 std::int64_t head_dim, std::int64_t capacity,
                                 const KvCacheConfig& config, std::int64_t block_tokens,
                                 std::span<const std::int64_t> layer_windows = {});
  bool paged() const { return pool_ != nullptr; }
  // Makes positions [0, tokens) writable (tokens <= capacity): takes the blocks still missing
  // from the pool, all or none; false when the pool has too few free. Always true unpaged.
  bool reserve(std::int64_t tokens);
  // Blocks held (0 unpaged), and how many more reserve(tokens) would take.
  std::int64_t blocks() const { return static_cast<std::int64_t>(lease_.blocks.size()); }
  std::int64_t blocks_missing(std::int64_t tokens) const;

 private:
  // The pool's blocks a paged cache holds, given back when it goes (moves with the cache).
  struct BlockLease {
    KvBlockPool* pool = nullptr;
    std::vector<std::byte*> blocks;
    BlockLease() = default;
    BlockLease(BlockLease&& o) noexcept : pool(o.pool), blocks(std::move(o.blocks)) {
      o.blocks.clear();
    }
    BlockLease& operator=(BlockLease&& o) noexcept;
    ~BlockLease();
  };

  std::int64_t batch_, kv_heads_, head_dim_, capacity_;
  KvCacheConfig config_;
  std::int64_t length_ = 0;
  std::vector<std::int64_t> windows_;  // [layers] 0 = no sliding window
  std::vector<KvBuffer> keys_, values_;
  KvBlockPool* pool_ = nullptr;  // paged: where reserve() takes blocks
  BlockLease lease_;
};

}  // namespace kvq::model
