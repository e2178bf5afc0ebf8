#include "kvq/model/compressed_linear.h"

#include <array>
#include <cstring>
#include <set>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/quant/fake_quantize.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/recipe.h"
#include "kvq/tokenizer/regex.h"

namespace kvq::model {
namespace {

using quant::CompressionFormat;
using quant::QuantizationArgs;
using quant::QuantizationScheme;
using quant::QuantizationStrategy;

constexpr std::array<std::string_view, 11> kSuffixes = {
    ".weight_packed",      ".weight_scale", ".weight_zero_point", ".weight_global_scale",
    ".weight_shape",       ".weight_g_idx", ".input_scale",       ".input_zero_point",
    ".input_global_scale", ".output_scale", ".output_zero_point"};

std::string module_of(std::string_view tensor) {
  return std::string(tensor.substr(0, tensor.rfind('.')));
}

// compressed-tensors' is_match for a leaf module: its name (exact, or `re:` matching from the
// start as Python's re.match) or its class (a Linear, or the embedding table).
bool target_matches(const std::string& target, const std::string& module) {
  if (target.starts_with("re:")) {
    const tok::Regex re(target.substr(3), "target '" + target + "'");
    return re.match_prefix(module);
  }
  const bool embedding = module.ends_with("embed_tokens");
  return target == module || target == "Module" || target == (embedding ? "Embedding" : "Linear");
}

// The scheme compressed-tensors gives `module`: among the groups' targets that match it, an
// exact name first, then a regex, then a class (match_targets' priority); a later group's target
// overrides an earlier one's (the target → scheme dict). nullptr when none or ignored.
const QuantizationScheme* scheme_for(const quant::QuantizationConfig& qc,
                                     const std::string& module) {
  for (const std::string& i : qc.ignore.value_or(std::vector<std::string>{}))
    if (target_matches(i, module)) return nullptr;
  const QuantizationScheme* best = nullptr;
  int best_rank = 3;
  for (const auto& [group, scheme] : qc.config_groups)
    for (const std::string& t : scheme.targets) {
      if (!target_matches(t, module)) continue;
      const int rank = t == module ? 0 : (t.starts_with("re:") ? 1 : 2);
      if (rank <= best_rank) best = &scheme, best_rank = rank;
    }
  return best;
}

const Tensor& need(const std::map<std::string, Tensor>& t, const std::string& name,
                   std::string_view source, std::string_view why) {
  auto it = t.find(name);
  if (it == t.end()) fail<FormatError>("{}: tensor '{}' is missing ({})", source, name, why);
  return it->second;
}

// `t` (any float dtype) in `dtype` (f32 or bf16, round to nearest even).
Tensor cast_float(const Tensor& t, DType dtype) {
  const Tensor f = t.to_f32();
  if (dtype == DType::kF32) return f;
  Tensor out(DType::kBF16, f.shape());
  auto* dst = static_cast<std::uint16_t*>(out.mutable_data());
  for (std::int64_t i = 0; i < f.numel(); ++i) dst[i] = f32_to_bf16(f.f32()[i]);
  return out;
}

// compressed-tensors' unpack_from_int32: element i of each packed row sits at bit i · bits of
// the row's words (spilling into the next word), stored as code + 2^(bits-1). packed_dim 0
// (zero points) packs down the columns instead: rows and columns swap. Returns I8 [rows, cols].
Tensor unpack_int32(const Tensor& packed, int bits, std::int64_t rows, std::int64_t cols,
                    bool packed_dim0, const std::string& name, std::string_view source) {
  // The packed direction's length and the other one, as unpack sees them.
  const std::int64_t lines = packed_dim0 ? cols : rows, elems = packed_dim0 ? rows : cols;
  const std::int64_t words = (elems * bits + 31) / 32;
  const Shape want = packed_dim0 ? Shape{words, cols} : Shape{rows, words};
  if (packed.dtype() != DType::kI32 || packed.shape() != want)
    fail<FormatError>(
        "{}: tensor '{}' is {} {}, expected I32 {} ({}-bit codes of a [{}, {}] "
        "weight)",
        source, name, dtype_name(packed.dtype()), shape_str(packed.shape()), shape_str(want), bits,
        rows, cols);
  const auto* p = static_cast<const std::uint32_t*>(packed.data());
  const auto word = [&](std::int64_t line, std::int64_t w) {
    return packed_dim0 ? p[w * cols + line] : p[line * words + w];
  };
  Tensor out(DType::kI8, {rows, cols});
  auto* o = static_cast<std::int8_t*>(out.mutable_data());
  const std::uint32_t mask = (1u << bits) - 1u;
  const int offset = 1 << (bits - 1);
  for (std::int64_t line = 0; line < lines; ++line)
    for (std::int64_t i = 0; i < elems; ++i) {
      const std::int64_t bit = i * bits, w = bit / 32;
      const int off = static_cast<int>(bit % 32);
      std::uint32_t v = word(line, w) >> off;
      if (off + bits > 32) v |= word(line, w + 1) << (32 - off);
      const int code = static_cast<int>(v & mask) - offset;
      o[packed_dim0 ? i * cols + line : line * cols + i] = static_cast<std::int8_t>(code);
    }
  return out;
}

// The shape weight_scale must have for a [rows, cols] weight.
Shape scale_shape(const QuantizationArgs& a, std::int64_t rows, std::int64_t cols) {
  switch (a.strategy_or_tensor()) {
    case QuantizationStrategy::kChannel:
      return {rows, 1};
    case QuantizationStrategy::kGroup:
      return {rows, cols / a.group_size.value_or(1)};
    case QuantizationStrategy::kBlock: {
      const auto [bh, bw] = a.block_structure.value_or(std::array<int, 2>{1, 1});
      return {(rows + bh - 1) / bh, (cols + bw - 1) / bw};
    }
    default:
      return {1};
  }
}

void check_weight_args(const QuantizationArgs& a, const std::string& tensor,
                       std::string_view source) {
  const QuantizationStrategy s = a.strategy_or_tensor();
  if (s != QuantizationStrategy::kTensor && s != QuantizationStrategy::kChannel &&
      s != QuantizationStrategy::kGroup && s != QuantizationStrategy::kBlock)
    fail<NotSupported>(
        "{}: '{}' is quantized with strategy {}; kvq dequantizes tensor, channel, group and "
        "block weights",
        source, tensor, quant::to_string(s));
  if (a.num_bits > 8 || (a.type == quant::QuantizationType::kFloat && a.num_bits != 8))
    fail<NotSupported>(
        "{}: '{}' is quantized to {} {} bits; kvq dequantizes int up to 8 bits and float 8", source,
        tensor, quant::to_string(a.type), a.num_bits);
}

// The dense weight of `module` [rows, cols] in `storage`.
Tensor dequantize_weight(const std::map<std::string, Tensor>& t, const std::string& module,
                         const QuantizationScheme& scheme, CompressionFormat format, DType storage,
                         std::string_view source) {
  const QuantizationArgs& a = *scheme.weights;
  const std::string base = module + ".weight";
  if (t.contains(base + "_g_idx"))
    fail<NotSupported>(
        "{}: tensor '{}_g_idx': activation-ordered (actorder) weights are not "
        "read by kvq",
        source, base);
  Tensor codes;
  switch (format) {
    case CompressionFormat::kFloatQuantized:
    case CompressionFormat::kIntQuantized:
    case CompressionFormat::kNaiveQuantized: {
      codes = need(t, base, source, "the quantized weight");
      const DType want = a.type == quant::QuantizationType::kFloat ? DType::kF8E4M3 : DType::kI8;
      if (codes.dtype() != want || codes.ndim() != 2)
        fail<FormatError>("{}: tensor '{}' is {} {}; format {} stores {} bits of {} as 2-D {}",
                          source, base, dtype_name(codes.dtype()), shape_str(codes.shape()),
                          quant::to_string(format), a.num_bits, quant::to_string(a.type),
                          dtype_name(want));
      break;
    }
    case CompressionFormat::kPackQuantized: {
      if (a.type != quant::QuantizationType::kInt)
        fail<NotSupported>("{}: '{}_packed' packs {} codes; pack-quantized holds int codes", source,
                           base, quant::to_string(a.type));
      const Tensor& shape = need(t, base + "_shape", source, "pack-quantized weight shape");
      if (shape.numel() != 2 || (shape.dtype() != DType::kI64 && shape.dtype() != DType::kI32))
        fail<FormatError>("{}: tensor '{}_shape' is {} {}, expected 2 integers", source, base,
                          dtype_name(shape.dtype()), shape_str(shape.shape()));
      std::int64_t dims[2];
      for (int i = 0; i < 2; ++i)
        dims[i] = shape.dtype() == DType::kI64 ? static_cast<const std::int64_t*>(shape.data())[i]
                                               : static_cast<const std::int32_t*>(shape.data())[i];
      if (dims[0] <= 0 || dims[1] <= 0 || dims[0] > (1 << 24) || dims[1] > (1 << 24))
        fail<FormatError>("{}: tensor '{}_shape' holds [{}, {}]", source, base, dims[0], dims[1]);
      codes = unpack_int32(need(t, base + "_packed", source, "pack-quantized codes"), a.num_bits,
                           dims[0], dims[1], false, base + "_packed", source);
      break;
    }
    default:
      fail<NotSupported>(
          "{}: '{}' is stored in compressed-tensors format {}; kvq reads float-quantized, "
          "int-quantized, naive-quantized and pack-quantized weights",
          source, module, quant::to_string(format));
  }
  const std::int64_t rows = codes.dim(0), cols = codes.dim(1);
  if (a.strategy_or_tensor() == QuantizationStrategy::kGroup &&
      (a.group_size.value_or(0) <= 0 || cols % *a.group_size != 0))
    fail<FormatError>("{}: '{}' has {} columns, not a multiple of group_size {}", source, base,
                      cols, a.group_size.value_or(0));
  const Tensor& scale = need(t, base + "_scale", source, "the weight scale");
  const Shape want = scale_shape(a, rows, cols);
  const bool scalar_ok = want == Shape{1} && scale.numel() == 1;
  if (!dtype_is_float(scale.dtype()) || (scale.shape() != want && !scalar_ok))
    fail<FormatError>("{}: tensor '{}_scale' is {} {}, expected a float {} ({} strategy)", source,
                      base, dtype_name(scale.dtype()), shape_str(scale.shape()), shape_str(want),
                      quant::to_string(a.strategy_or_tensor()));
  std::optional<Tensor> zp;
  if (!a.symmetric) {
    const Tensor& z = need(t, base + "_zero_point", source, "asymmetric weights");
    const auto s = a.strategy_or_tensor();
    if (format == CompressionFormat::kPackQuantized &&
        (s == QuantizationStrategy::kGroup || s == QuantizationStrategy::kChannel)) {
      zp = unpack_int32(z, a.num_bits, want[0], want[1], true, base + "_zero_point", source);
    } else {
      if (z.numel() != scale.numel())
        fail<FormatError>("{}: tensor '{}_zero_point' has shape {}, expected {}", source, base,
                          shape_str(z.shape()), shape_str(want));
      zp = z.reshape(scale.shape());
    }
  }
  const Tensor s = cast_float(scale.numel() == 1 ? scale.reshape({1}) : scale, storage);
  return quant::dequantize(codes, s, zp ? &*zp : nullptr, a, storage);
}

std::shared_ptr<const InputQuantization> input_quantization(const std::map<std::string, Tensor>& t,
                                                            const std::string& module,
                                                            const QuantizationArgs& a,
                                                            std::string_view source) {
  const QuantizationStrategy s = a.strategy_or_tensor();
  const bool supported =
      a.is_dynamic() ? (s == QuantizationStrategy::kToken || s == QuantizationStrategy::kTensor)
                     : s == QuantizationStrategy::kTensor;
  if (!supported || a.dynamic == quant::DynamicType::kLocal)
    fail<NotSupported>(
        "{}: the inputs of '{}' are quantized {} with strategy {}; kvq runs static "
        "per-tensor and dynamic per-token or per-tensor input quantization",
        source, module, a.is_dynamic() ? "dynamically" : "statically", quant::to_string(s));
  if (a.is_dynamic()) return std::make_shared<InputQuantization>(a, std::nullopt, std::nullopt);
  const std::string name = module + ".input_scale";
  const Tensor& scale = need(t, name, source, "static input quantization");
  if (scale.numel() != 1 || !dtype_is_float(scale.dtype()))
    fail<FormatError>("{}: tensor '{}' is {} {}, expected one float", source, name,
                      dtype_name(scale.dtype()), shape_str(scale.shape()));
  std::optional<Tensor> zp;
  if (!a.symmetric) zp = need(t, module + ".input_zero_point", source, "asymmetric inputs");
  return std::make_shared<InputQuantization>(a, scale.reshape({1}).to_f32(),
                                             zp ? std::optional(zp->reshape({1})) : std::nullopt);
}

}  // namespace

InputQuantization::InputQuantization(quant::QuantizationArgs args, std::optional<Tensor> scale,
                                     std::optional<Tensor> zero_point)
    : args_(std::move(args)), scale_(std::move(scale)), zero_point_(std::move(zero_point)) {}

void InputQuantization::apply(float* x, std::int64_t batch, std::int64_t seq,
                              std::int64_t cols) const {
  const Tensor value =
      Tensor::from_f32({batch, seq, cols}, {x, static_cast<std::size_t>(batch * seq * cols)});
  Tensor out;
  if (args_.is_dynamic()) {
    // Token: one scale per [batch, seq] position; tensor: one for the whole call.
    const quant::QParams q = quant::compute_dynamic_scales_and_zp(value, args_);
    out = quant::fake_quantize(value, q.scale, args_.symmetric ? nullptr : &q.zero_point, args_);
  } else {
    out = quant::fake_quantize(value, *scale_, zero_point_ ? &*zero_point_ : nullptr, args_);
  }
  const Tensor f = out.to_f32();
  std::memcpy(x, f.f32(), f.nbytes());
}

bool is_compressed_linear_tensor(std::string_view name) {
  for (std::string_view s : kSuffixes)
    if (name.ends_with(s)) return true;
  return false;
}

DecompressedCheckpoint decompress_linear_weights(const ModelConfig& config,
                                                 const std::map<std::string, Tensor>& checkpoint,
                                                 DType storage, std::string_view source) {
  DecompressedCheckpoint out{checkpoint, {}};
  std::map<std::string, std::string> modules;  // module → one of its compressed tensors
  for (const auto& [name, t] : checkpoint)
    if (is_compressed_linear_tensor(name)) modules.emplace(module_of(name), name);
  if (modules.empty()) return out;
  const auto first = modules.begin()->second;
  const auto qc_it = config.raw.find("quantization_config");
  if (qc_it == config.raw.end())
    fail<NotSupported>(
        "{}: tensor '{}' is a quantized Linear's parameter but config.json has no "
        "quantization_config describing it",
        source, first);
  const quant::QuantizationConfig qc =
      quant::parse_quantization_config(quant::Json(config.raw), std::string(source));
  if (const auto sp = qc_it->find("sparsity_config");
      sp != qc_it->end() && sp->is_object() && !sp->empty())
    fail<NotSupported>(
        "{}: the checkpoint is sparse (sparsity_config format {}; e.g. tensor "
        "'{}'); kvq reads dense and quantized weights only",
        source, sp->value("format", std::string("?")), first);
  const CompressionFormat top = quant::parse_compression_format(qc.format);
  for (const auto& [module, tensor] : modules) {
    const QuantizationScheme* scheme = scheme_for(qc, module);
    if (scheme == nullptr)
      fail<ConfigError>(
          "{}: tensor '{}' is a quantized Linear's parameter but no config group "
          "of the quantization_config targets '{}'",
          source, tensor, module);
    CompressedLinear cl{module, *scheme, nullptr};
    const CompressionFormat format = scheme->format.value_or(top);
    cl.scheme.format = format;
    if (scheme->output_activations)
      fail<NotSupported>(
          "{}: '{}' quantizes its outputs (tensor '{}'); kvq does not run output "
          "activation quantization",
          source, module, tensor);
    if (scheme->weights) {
      check_weight_args(*scheme->weights, module + ".weight", source);
      out.tensors[module + ".weight"] =
          dequantize_weight(checkpoint, module, *scheme, format, storage, source);
    }
    if (scheme->input_activations)
      cl.input = input_quantization(checkpoint, module, *scheme->input_activations, source);
    for (std::string_view s : kSuffixes) out.tensors.erase(module + std::string(s));
    out.linears.push_back(std::move(cl));
  }
  return out;
}

}  // namespace kvq::model
