#include "kvq/quant/quant_args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/strings.h"
#include "kvq/quant/json_util.h"

namespace kvq::quant {
namespace {

template <class E, std::size_t N>
E parse_enum(std::string_view text, const std::array<std::pair<std::string_view, E>, N>& table,
             std::string_view enum_name) {
  for (const auto& [name, value] : table)
    if (name == text) return value;
  fail<ConfigError>("'{}' is not a valid {}", text, enum_name);
}

constexpr std::array<std::pair<std::string_view, QuantizationType>, 2> kTypes{{
    {"int", QuantizationType::kInt},
    {"float", QuantizationType::kFloat},
}};
constexpr std::array<std::pair<std::string_view, QuantizationStrategy>, 7> kStrategies{{
    {"tensor", QuantizationStrategy::kTensor},
    {"channel", QuantizationStrategy::kChannel},
    {"group", QuantizationStrategy::kGroup},
    {"block", QuantizationStrategy::kBlock},
    {"token", QuantizationStrategy::kToken},
    {"tensor_group", QuantizationStrategy::kTensorGroup},
    {"attn_head", QuantizationStrategy::kAttnHead},
}};
constexpr std::array<std::pair<std::string_view, QuantizationStatus>, 5> kStatuses{{
    {"initialized", QuantizationStatus::kInitialized},
    {"calibration", QuantizationStatus::kCalibration},
    {"frozen", QuantizationStatus::kFrozen},
    {"compressed", QuantizationStatus::kCompressed},
    {"decompressed", QuantizationStatus::kDecompressed},
}};
constexpr std::array<std::pair<std::string_view, CompressionFormat>, 12> kFormats{{
    {"dense", CompressionFormat::kDense},
    {"sparse-bitmask", CompressionFormat::kSparseBitmask},
    {"sparse-24-bitmask", CompressionFormat::kSparse24Bitmask},
    {"int-quantized", CompressionFormat::kIntQuantized},
    {"float-quantized", CompressionFormat::kFloatQuantized},
    {"naive-quantized", CompressionFormat::kNaiveQuantized},
    {"pack-quantized", CompressionFormat::kPackQuantized},
    {"marlin-24", CompressionFormat::kMarlin24},
    {"mixed-precision", CompressionFormat::kMixedPrecision},
    {"nvfp4-pack-quantized", CompressionFormat::kNvfp4PackQuantized},
    {"mxfp4-pack-quantized", CompressionFormat::kMxfp4PackQuantized},
    {"mxfp8-quantized", CompressionFormat::kMxfp8Quantized},
}};

template <class E, std::size_t N>
std::string_view enum_name(E value, const std::array<std::pair<std::string_view, E>, N>& table) {
  for (const auto& [name, v] : table)
    if (v == value) return name;
  KVQ_CHECK(false, "unknown enum value");
  return {};
}

// pydantic's "Input should be 'a', 'b' or 'c' [type=enum, input_value='x', input_type=str]" for
// strict enum fields: the choices and the value given.
template <class E, std::size_t N>
std::string pydantic_enum_message(const std::array<std::pair<std::string_view, E>, N>& table,
                                  std::string_view given) {
  std::string out = "Input should be ";
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += (i + 1 == N) ? " or " : ", ";
    out += fmt::format("'{}'", table[i].first);
  }
  return out + fmt::format(" [type=enum, input_value='{}', input_type=str]", given);
}

const std::vector<std::string_view> kArgsFields = {
    "num_bits", "type",     "symmetric",   "group_size", "strategy", "block_structure",
    "dynamic",  "actorder", "scale_dtype", "zp_dtype",   "observer", "observer_kwargs"};

// The `{model}` part of "Block strategy requires block structure\n{model}": pydantic's
// __str__ (`field=repr(value)` joined by spaces) at the time the model validator runs, when
// `type` still holds the enum default if it was not given.
std::string model_repr(const QuantizationArgs& a, bool type_given) {
  auto opt_int = [](const std::optional<int>& v) {
    return v ? std::to_string(*v) : std::string("None");
  };
  std::string type_repr = type_given ? fmt::format("'{}'", to_string(a.type))
                                     : std::string(a.type == QuantizationType::kInt
                                                       ? "<QuantizationType.INT: 'int'>"
                                                       : "<QuantizationType.FLOAT: 'float'>");
  std::string strategy = a.strategy ? fmt::format("'{}'", to_string(*a.strategy)) : "None";
  std::string block =
      a.block_structure ? fmt::format("[{}, {}]", (*a.block_structure)[0], (*a.block_structure)[1])
                        : "None";
  std::string dynamic = a.dynamic == DynamicType::kLocal  ? "'local'"
                        : a.dynamic == DynamicType::kTrue ? "True"
                                                          : "False";
  std::string actorder = a.actorder ? fmt::format("'{}'", to_string(*a.actorder)) : "None";
  std::string scale = a.scale_dtype ? torch_dtype_str(*a.scale_dtype) : "None";
  std::string zp = a.zp_dtype ? torch_dtype_str(*a.zp_dtype) : "None";
  std::string observer = a.observer ? fmt::format("'{}'", *a.observer) : "None";
  return fmt::format(
      "num_bits={} type={} symmetric={} group_size={} strategy={} block_structure={} dynamic={} "
      "actorder={} scale_dtype={} zp_dtype={} observer={} observer_kwargs={}",
      a.num_bits, type_repr, a.symmetric ? "True" : "False", opt_int(a.group_size), strategy, block,
      dynamic, actorder, scale, zp, observer, python_repr(a.observer_kwargs));
}

}  // namespace

std::string_view to_string(QuantizationType value) { return enum_name(value, kTypes); }
std::string_view to_string(QuantizationStrategy value) { return enum_name(value, kStrategies); }
std::string_view to_string(QuantizationStatus value) { return enum_name(value, kStatuses); }
std::string_view to_string(CompressionFormat value) { return enum_name(value, kFormats); }
std::string_view to_string(ActivationOrdering value) {
  return value == ActivationOrdering::kWeight ? "weight" : "static";
}

QuantizationType parse_quantization_type(std::string_view text) {
  return parse_enum(ascii_lower(text), kTypes, "QuantizationType");
}
QuantizationStrategy parse_quantization_strategy(std::string_view text) {
  return parse_enum(ascii_lower(text), kStrategies, "QuantizationStrategy");
}
QuantizationStatus parse_quantization_status(std::string_view text) {
  for (const auto& [name, value] : kStatuses)
    if (name == text) return value;
  throw ConfigError(pydantic_enum_message(kStatuses, text));
}
CompressionFormat parse_compression_format(std::string_view text) {
  for (const auto& [name, value] : kFormats)
    if (name == text) return value;
  throw ConfigError(pydantic_enum_message(kFormats, text));
}

DType parse_torch_dtype(std::string_view text) {
  std::string_view name = text;
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (auto dtype = dtype_from_torch_name(name)) return *dtype;
  fail<ConfigError>("No such torch dtype `torch.{}`", name);
}

std::string torch_dtype_str(DType dtype) {
  return fmt::format("torch.{}", dtype_torch_name(dtype));
}

DType QuantizationArgs::pytorch_dtype() const {
  if (type == QuantizationType::kFloat) {
    if (num_bits == 8) return DType::kF8E4M3;
    throw NotSupported("Only num_bits in (8) are supported");
  }
  if (num_bits <= 8) return DType::kI8;
  if (num_bits <= 16) return DType::kI16;
  return DType::kI32;
}

void QuantizationArgs::validate(bool type_given) {
  using S = QuantizationStrategy;
  std::optional<S> s = strategy;
  if (!s) {
    if (!group_size) {
      s = S::kTensor;
    } else if (*group_size > 0) {
      s = S::kGroup;
    } else if (*group_size == -1) {
      s = S::kChannel;
    } else {
      fail<ConfigError>(
          "Invalid group size {}. Use group_size > 0 for strategy='group' and group_size = -1 "
          "for 'channel'",
          *group_size);
    }
  }
  if (*s == S::kToken && dynamic == DynamicType::kFalse)
    throw ConfigError("Cannot perform static token quantization, please use `dynamic=True`");
  if ((*s == S::kGroup || *s == S::kTensorGroup) && (!group_size || *group_size <= 0))
    fail<ConfigError>("strategy {} requires group_size to be set to a positive value",
                      to_string(*s));
  if (group_size && *group_size > 0 && *s != S::kGroup && *s != S::kTensorGroup)
    throw ConfigError("group_size requires strategy to be set to 'group'");
  if (*s == S::kBlock && !block_structure)
    fail<ConfigError>("Block strategy requires block structure\n{}", model_repr(*this, type_given));
  if (block_structure && *s != S::kBlock)
    fail<ConfigError>("Block structure requires block strategy\n{}", model_repr(*this, type_given));
  if (dynamic != DynamicType::kFalse) {
    if (*s != S::kToken && *s != S::kTensor && *s != S::kTensorGroup && *s != S::kGroup)
      throw ConfigError(
          "One of (<QuantizationStrategy.TOKEN: 'token'>, <QuantizationStrategy.TENSOR: "
          "'tensor'>, <QuantizationStrategy.TENSOR_GROUP: 'tensor_group'>, "
          "<QuantizationStrategy.GROUP: 'group'>) must be used for dynamic quant.");
    if (dynamic == DynamicType::kLocal && *s != S::kTensorGroup)
      throw ConfigError("local is only supported for strategy tensor_group");
  }
  if (!zp_dtype) zp_dtype = is_fp4() ? DType::kF8E4M3 : pytorch_dtype();
  strategy = s;
}

QuantizationArgs QuantizationArgs::from_json(const Json& json, std::string_view where) {
  if (!json.is_object())
    fail<ConfigError>("{}: Input should be a valid dictionary or instance of QuantizationArgs",
                      where);
  for (const auto& [key, value] : json.items()) {
    if (std::find(kArgsFields.begin(), kArgsFields.end(), key) == kArgsFields.end())
      fail<ConfigError>("{}: {}: Extra inputs are not permitted", where, key);
  }
  QuantizationArgs a;
  auto field = [&](const char* key) -> const Json* {
    auto it = json.find(key);
    return it == json.end() ? nullptr : &*it;
  };
  auto ctx = [&](const char* key) { return fmt::format("{}: {}", where, key); };
  // Field validators run in declaration order (pydantic); the first failing field is reported.
  if (const Json* v = field("num_bits")) a.num_bits = json_int(*v, ctx("num_bits"));
  if (const Json* v = field("type")) {
    if (!v->is_string()) fail<ConfigError>("{}: Input should be 'int' or 'float'", ctx("type"));
    a.type =
        with_context(ctx("type"), [&] { return parse_quantization_type(v->get<std::string>()); });
  }
  if (const Json* v = field("symmetric")) a.symmetric = json_bool(*v, ctx("symmetric"));
  if (const Json* v = field("group_size"); v && !v->is_null()) {
    const int g = json_int(*v, ctx("group_size"));
    if (g < -1)
      fail<ConfigError>(
          "{}: Invalid group size {}. Use group_size > 0 for strategy='group' and group_size = "
          "-1 for 'channel'",
          where, g);
    a.group_size = g;
  }
  if (const Json* v = field("strategy"); v && !v->is_null()) {
    if (!v->is_string())
      fail<ConfigError>("{}: Input should be a valid QuantizationStrategy", ctx("strategy"));
    a.strategy = with_context(ctx("strategy"),
                              [&] { return parse_quantization_strategy(v->get<std::string>()); });
  }
  if (const Json* v = field("block_structure"); v && !v->is_null()) {
    const std::string shown = v->is_string() ? v->get<std::string>() : python_repr(*v);
    auto bad = [&]() -> ConfigError {
      return ConfigError(fmt::format(
          "{}: Invalid block_structure '{}'. Must be a list of positive ints [rows, cols].",
          ctx("block_structure"), shown));
    };
    std::vector<long long> dims;
    if (v->is_string()) {
      const std::string text = v->get<std::string>();
      std::size_t start = 0;
      while (true) {
        const std::size_t x = text.find('x', start);
        const std::string part = text.substr(start, x == std::string::npos ? x : x - start);
        // Python int(): optional surrounding whitespace and sign, digits only.
        std::size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(part, &used);
        } catch (const std::exception&) {
          throw bad();
        }
        while (used < part.size() && std::isspace(static_cast<unsigned char>(part[used]))) ++used;
        if (used != part.size()) throw bad();
        dims.push_back(n);
        if (x == std::string::npos) break;
        start = x + 1;
      }
    } else if (v->is_array()) {
      for (const Json& d : *v) {
        if (!d.is_number_integer()) throw bad();
        dims.push_back(d.get<long long>());
      }
    } else {
      throw bad();
    }
    if (dims.size() != 2 || dims[0] <= 0 || dims[1] <= 0) throw bad();
    a.block_structure = std::array<int, 2>{static_cast<int>(dims[0]), static_cast<int>(dims[1])};
  }
  if (const Json* v = field("dynamic")) {
    if (v->is_string()) {
      const std::string d = ascii_lower(v->get<std::string>());
      if (d != "local") fail<ConfigError>("{}: '{}' is not a valid DynamicType", ctx("dynamic"), d);
      a.dynamic = DynamicType::kLocal;
    } else {
      a.dynamic = json_bool(*v, ctx("dynamic")) ? DynamicType::kTrue : DynamicType::kFalse;
    }
  }
  if (const Json* v = field("actorder"); v && !v->is_null()) {
    if (v->is_boolean()) {
      if (v->get<bool>())
        fail<ConfigError>(
            "{}: actorder=True previously mapped to ActivationOrdering.GROUP, which has been "
            "removed. Consider using actorder='weight' instead.",
            ctx("actorder"));
    } else if (v->is_string()) {
      const std::string text = v->get<std::string>();
      const std::string l = ascii_lower(text);
      if (l == "group" || l == "dynamic")
        fail<ConfigError>(
            "{}: actorder='{}' has been removed. Consider using actorder='weight' or "
            "actorder=None instead.",
            ctx("actorder"), text);
      // The enum itself is case-sensitive (no lower-casing validator for values kept).
      if (text == "weight")
        a.actorder = ActivationOrdering::kWeight;
      else if (text == "static")
        a.actorder = ActivationOrdering::kStatic;
      else
        fail<ConfigError>("{}: Input should be 'weight', 'static', 'group' or 'dynamic'",
                          ctx("actorder"));
    } else {
      fail<ConfigError>("{}: Input should be a valid boolean", ctx("actorder"));
    }
  }
  for (const char* key : {"scale_dtype", "zp_dtype"}) {
    if (const Json* v = field(key); v && !v->is_null()) {
      if (!v->is_string()) fail<ConfigError>("{}: Input should be a valid string", ctx(key));
      const DType d =
          with_context(ctx(key), [&] { return parse_torch_dtype(v->get<std::string>()); });
      (std::string_view(key) == "scale_dtype" ? a.scale_dtype : a.zp_dtype) = d;
    }
  }
  if (const Json* v = field("observer"); v && !v->is_null()) {
    if (!v->is_string()) fail<ConfigError>("{}: Input should be a valid string", ctx("observer"));
    a.observer = v->get<std::string>();
  }
  if (const Json* v = field("observer_kwargs"); v && !v->is_null()) {
    if (!v->is_object())
      fail<ConfigError>("{}: Input should be a valid dictionary", ctx("observer_kwargs"));
    a.observer_kwargs = *v;
  }
  const bool type_given = field("type") != nullptr;
  with_context(std::string(where), [&] {
    a.validate(type_given);
    return 0;
  });
  return a;
}

Json QuantizationArgs::to_json() const {
  Json j = Json::object();
  j["num_bits"] = num_bits;
  j["type"] = to_string(type);
  j["symmetric"] = symmetric;
  j["group_size"] = group_size ? Json(*group_size) : Json(nullptr);
  j["strategy"] = strategy ? Json(to_string(*strategy)) : Json(nullptr);
  j["block_structure"] =
      block_structure ? Json::array({(*block_structure)[0], (*block_structure)[1]}) : Json(nullptr);
  if (dynamic == DynamicType::kLocal)
    j["dynamic"] = "local";
  else
    j["dynamic"] = dynamic == DynamicType::kTrue;
  j["actorder"] = actorder ? Json(to_string(*actorder)) : Json(nullptr);
  j["scale_dtype"] = scale_dtype ? Json(torch_dtype_str(*scale_dtype)) : Json(nullptr);
  // The reference's field_serializer writes null for symmetric args.
  j["zp_dtype"] = (zp_dtype && !symmetric) ? Json(torch_dtype_str(*zp_dtype)) : Json(nullptr);
  j["observer"] = observer ? Json(*observer) : Json(nullptr);
  j["observer_kwargs"] = observer_kwargs;
  return j;
}

bool QuantizationArgs::operator==(const QuantizationArgs& o) const {
  return num_bits == o.num_bits && type == o.type && symmetric == o.symmetric &&
         group_size == o.group_size && strategy == o.strategy &&
         block_structure == o.block_structure && dynamic == o.dynamic && actorder == o.actorder &&
         scale_dtype == o.scale_dtype && zp_dtype == o.zp_dtype && observer == o.observer &&
         observer_kwargs == o.observer_kwargs;
}

}  // namespace kvq::quant
