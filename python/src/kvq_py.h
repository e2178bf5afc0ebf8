// Shared pieces of the Python bindings (python/src/*.cc): the objects Python holds and the
// conversions between Python values and kvq's.
//
// Ownership: a Model (PyModel, always held by std::shared_ptr) owns the CausalLM, its
// quantization lifecycle and tokenizer; every Module, KvCache and hook handle Python sees keeps a
// shared_ptr to it (hooks keep only a weak_ptr: the model owns its hooks, and a hook owning the
// model would be a cycle nothing frees).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/model/kv_cache.h"
#include "kvq/quant/quant_config.h"
#include "kvq/runtime/model_source.h"
#include "native_call.h"

namespace kvq::py {

namespace pyb = pybind11;

struct PyModel {
  runtime::ModelSource src;  // dir, model, lifecycle (destroyed before the model), tokenizer
  std::string weights;       // "f32" | "bf16", as loaded
  model::CausalLM& lm() { return *src.model; }
  const model::CausalLM& lm() const { return *src.model; }
  const tok::Tokenizer& tokenizer() const;  // InvalidArgument when the directory has none
  // Replaces the model's quantization (the old lifecycle's hooks go first).
  void set_lifecycle(std::unique_ptr<lifecycle::QuantizationLifecycle> lc);
};
using ModelPtr = std::shared_ptr<PyModel>;

// A module of a model's tree, as Python sees it.
struct PyModule {
  ModelPtr owner;
  model::Module* module = nullptr;
};

// A KV cache made by Model.make_cache; forward(..., cache=) appends to it.
struct PyCache {
  ModelPtr owner;
  std::unique_ptr<model::KvCache> cache;  // held apart: KvCache is move-only
};

// Loads a model directory (a quantized checkpoint's quantization included); a missing path
// raises kvq.NotFoundError.
ModelPtr load_model(const std::filesystem::path& path, const std::string& weights);
// A Model, or a path to load one from (f32 weights).
ModelPtr as_model(pyb::handle model_or_path);

// Python value (dict, list, str, numbers, None; objects with model_dump()) ↔ JSON, through
// Python's json module (keys keep their order: the configs are insertion-ordered).
quant::Json to_json(pyb::handle value);
pyb::object from_json(const nlohmann::ordered_json& json);
pyb::object from_json(const nlohmann::json& json);

// QuantizationConfig from a QuantizationConfig, a dict (config.json's quantization_config or a
// recipe), or a recipe given as a file path or YAML / JSON text.
quant::QuantizationConfig to_config(pyb::handle value);

// A path argument: str or os.PathLike.
std::filesystem::path to_path(pyb::handle value);
bool is_path_like(pyb::handle value);

void bind_quant(pyb::module_& m);
void bind_model(pyb::module_& m);
void bind_run(pyb::module_& m);

}  // namespace kvq::py
