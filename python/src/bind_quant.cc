// QuantizationArgs / QuantizationScheme / QuantizationConfig (compressed-tensors' pydantic models)
// and the JSON ↔ Python conversions they are made with.
#include <pybind11/operators.h>

#include <string>

#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"
#include "kvq/quant/recipe.h"
#include "kvq_py.h"

namespace kvq::py {
namespace {

pyb::object json_module() { return pyb::module_::import("json"); }

// The Python API of one pydantic model type T (T::from_json / T::to_json): built from keyword
// arguments or a dict (model_validate), dumped to a dict (model_dump) or JSON text; its fields
// read as attributes of the dump.
template <class T>
pyb::class_<T> bind_model_type(pyb::module_& m, const char* name, const char* doc) {
  pyb::class_<T> cls(m, name, doc);
  cls.def(pyb::init(
              [name](const pyb::kwargs& kwargs) { return T::from_json(to_json(kwargs), name); }),
          "Fields as keyword arguments (compressed-tensors' names), validated as the reference "
          "does.")
      .def_static(
          "model_validate",
          [name](pyb::handle value) {
            if (pyb::isinstance<T>(value)) return value.cast<T>();
            return T::from_json(to_json(value), name);
          },
          pyb::arg("obj"), "From a dict (or an instance).")
      .def_static(
          "model_validate_json",
          [name](const std::string& text) {
            return T::from_json(io::parse_ordered_json(text, name), name);
          },
          pyb::arg("json_data"), "From JSON text.")
      .def(
          "model_dump", [](const T& self) { return from_json(self.to_json()); },
          "The fields as a dict, in pydantic's model_dump() order.")
      .def(
          "model_dump_json",
          [](const T& self, pyb::object indent) {
            return indent.is_none() ? self.to_json().dump()
                                    : self.to_json().dump(indent.cast<int>());
          },
          pyb::arg("indent") = pyb::none(), "The fields as JSON text.")
      .def("__getattr__",
           [](const T& self, const std::string& field) -> pyb::object {
             pyb::dict d = from_json(self.to_json());
             if (!d.contains(field)) throw pyb::attribute_error(std::string("no field ") + field);
             return d[field.c_str()];
           })
      .def(pyb::self == pyb::self)
      .def("__repr__", [name](const T& self) {
        std::string s = std::string(name) + "(";
        bool first = true;
        const quant::Json fields = self.to_json();  // alive for the loop (items() refers to it)
        for (const auto& [key, value] : fields.items()) {
          s += (first ? "" : ", ") + key + "=" + value.dump();
          first = false;
        }
        return s + ")";
      });
  return cls;
}

}  // namespace

quant::Json to_json(pyb::handle value) {
  // Instances of the bound models dump themselves, so they may sit inside dicts.
  pyb::cpp_function dump([](pyb::handle o) -> pyb::object {
    if (pyb::hasattr(o, "model_dump")) return o.attr("model_dump")();
    if (pyb::hasattr(o, "__fspath__")) return pyb::str(o.attr("__fspath__")());
    throw pyb::type_error(std::string(pyb::str(pyb::type::of(o))) + " is not JSON serializable");
  });
  const std::string text =
      json_module().attr("dumps")(value, pyb::arg("default") = dump).cast<std::string>();
  return io::parse_ordered_json(text, "the Python value");
}

pyb::object from_json(const nlohmann::ordered_json& json) {
  return json_module().attr("loads")(json.dump());
}
pyb::object from_json(const nlohmann::json& json) {
  return json_module().attr("loads")(json.dump());
}

bool is_path_like(pyb::handle value) {
  return pyb::isinstance<pyb::str>(value) || pyb::hasattr(value, "__fspath__");
}

std::filesystem::path to_path(pyb::handle value) {
  return pyb::module_::import("os").attr("fspath")(value).cast<std::string>();
}

quant::QuantizationConfig to_config(pyb::handle value) {
  if (pyb::isinstance<quant::QuantizationConfig>(value))
    return value.cast<quant::QuantizationConfig>();
  if (pyb::isinstance<pyb::dict>(value)) {
    const quant::Json j = to_json(value);
    // A recipe ("*_stage" / "*_modifiers" keys) or a config.json / its quantization_config.
    for (const auto& [key, unused] : j.items()) {
      (void)unused;
      if (key.ends_with("_stage") || key.ends_with("_modifiers") || key == "QuantizationModifier")
        return quant::resolve_recipe(j, "recipe");
    }
    return quant::parse_quantization_config(j, "config");
  }
  if (is_path_like(value)) {
    const std::string text = pyb::str(value);
    std::error_code ec;
    if (pyb::hasattr(value, "__fspath__") || std::filesystem::is_regular_file(text, ec)) {
      const std::filesystem::path path = to_path(value);
      quant::QuantizationConfig config;
      with_path(path, [&] { config = quant::load_recipe(path); });
      return config;
    }
    return quant::parse_recipe(text, "recipe");  // YAML / JSON text
  }
  throw pyb::type_error(
      "expected a QuantizationConfig, a dict, or a recipe (file path or YAML / JSON text)");
}

void bind_quant(pyb::module_& m) {
  bind_model_type<quant::QuantizationArgs>(
      m, "QuantizationArgs",
      "compressed-tensors' QuantizationArgs: num_bits, type, symmetric, strategy, group_size, "
      "dynamic, observer, ... (one tensor's quantization).");
  bind_model_type<quant::QuantizationScheme>(
      m, "QuantizationScheme",
      "compressed-tensors' QuantizationScheme: targets and the weights / input_activations / "
      "output_activations args.");
  auto config = bind_model_type<quant::QuantizationConfig>(
      m, "QuantizationConfig",
      "compressed-tensors' QuantizationConfig: config_groups, kv_cache_scheme, ignore, ...");
  config
      .def_static(
          "from_recipe", [](pyb::handle recipe) { return to_config(recipe); }, pyb::arg("recipe"),
          "From an llm-compressor recipe: a file path, YAML / JSON text or a dict.")
      .def_static(
          "from_pretrained",
          [](pyb::handle model_dir) {
            const std::filesystem::path dir = to_path(model_dir);
            const std::filesystem::path file = dir / "config.json";
            quant::QuantizationConfig c;
            with_path(dir, [&] {
              c = quant::parse_quantization_config(
                  io::parse_ordered_json(io::read_file(file, "config"), file.string()),
                  file.string());
            });
            return c;
          },
          pyb::arg("model_dir"), "The quantization_config of a checkpoint's config.json.");
}

}  // namespace kvq::py
