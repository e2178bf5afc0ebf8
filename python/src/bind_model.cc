// Model, Module, KvCache and the attention hooks.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvq/io/json_file.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/match.h"
#include "kvq/model/attention.h"
#include "kvq/model/causal_lm.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq_py.h"

namespace kvq::py {
namespace {

using model::AttentionModule;
using model::StatesView;

// Token ids from a list or a NumPy array: 1-D (one sequence) or 2-D [batch, S].
struct TokenInput {
  std::vector<std::int32_t> ids;  // [batch * S]
  std::int64_t batch = 1;
  bool batched = false;
};

TokenInput to_tokens(pyb::handle input_ids) {
  auto a =
      pyb::array_t<std::int64_t, pyb::array::c_style | pyb::array::forcecast>::ensure(input_ids);
  if (!a) throw pyb::type_error("input_ids: expected a list or array of token ids");
  if (a.ndim() != 1 && a.ndim() != 2)
    fail<InvalidArgument>("input_ids: expected 1 or 2 dimensions, got {}", a.ndim());
  TokenInput t;
  t.batched = a.ndim() == 2;
  t.batch = t.batched ? a.shape(0) : 1;
  const std::int64_t* p = a.data();
  for (pyb::ssize_t i = 0; i < a.size(); ++i) {
    if (p[i] < 0 || p[i] > INT32_MAX)
      fail<InvalidArgument>("input_ids: token id {} out of range", p[i]);
    t.ids.push_back(static_cast<std::int32_t>(p[i]));
  }
  return t;
}

// A copy of a Tensor of fp32 as a NumPy array of its shape.
pyb::array_t<float> to_numpy(const Tensor& t) {
  std::vector<pyb::ssize_t> shape(t.shape().begin(), t.shape().end());
  pyb::array_t<float> out(shape);
  std::memcpy(out.mutable_data(), t.f32(), static_cast<std::size_t>(t.numel()) * sizeof(float));
  return out;
}

AttentionModule* attention_of(const PyModule& m, const char* what) {
  auto* attn = dynamic_cast<AttentionModule*>(m.module);
  if (attn == nullptr)
    fail<InvalidArgument>("{}: {} ({}) is not an attention module", what,
                          m.module->name().empty() ? "the root" : m.module->name(),
                          m.module->class_name());
  return attn;
}

// The Python callable of a hook. Deleted with the GIL held: the hook list is copied and freed
// by forwards that run without it.
std::shared_ptr<pyb::object> hold(pyb::function fn) {
  return std::shared_ptr<pyb::object>(new pyb::object(std::move(fn)), [](pyb::object* o) {
    pyb::gil_scoped_acquire gil;
    delete o;
  });
}

struct PyHookHandle {
  model::HookHandle handle;
};

PyHookHandle register_hook(const PyModule& m, model::StatesKind kind, pyb::function fn,
                           const char* what) {
  AttentionModule* attn = attention_of(m, what);
  std::shared_ptr<pyb::object> callable = hold(std::move(fn));
  std::weak_ptr<PyModel> owner = m.owner;
  model::AttentionHook hook = [callable, owner](AttentionModule& module, StatesView s) {
    pyb::gil_scoped_acquire gil;
    const pyb::ssize_t f = sizeof(float);
    const std::vector<pyb::ssize_t> shape{s.batch, s.heads, s.tokens, s.head_dim};
    const std::vector<pyb::ssize_t> strides{s.heads * s.tokens * s.head_dim * f,
                                            s.tokens * s.head_dim * f, s.head_dim * f, f};
    // A view of kvq's buffer (base None: NumPy neither copies nor frees it). Valid during the
    // hook only; a hook that keeps the states must copy them.
    pyb::array_t<float> view(shape, strides, s.data, pyb::none());
    pyb::object result = (*callable)(PyModule{owner.lock(), &module}, view);
    if (result.is_none()) return;
    auto a = pyb::array_t<float, pyb::array::c_style | pyb::array::forcecast>::ensure(result);
    if (!a) throw pyb::type_error("a hook must return None or an array of the states' shape");
    bool same = a.ndim() == 4;
    for (int d = 0; same && d < 4; ++d) same = a.shape(d) == shape[static_cast<std::size_t>(d)];
    if (!same)
      fail<InvalidArgument>(
          "{}: a hook returned an array of another shape than the states' [{}, {}, {}, {}]",
          module.name(), s.batch, s.heads, s.tokens, s.head_dim);
    if (a.data() != s.data)
      std::memcpy(s.data, a.data(), static_cast<std::size_t>(s.numel()) * sizeof(float));
  };
  using K = model::StatesKind;
  // On a quantized module the hook goes before the fake quantization (the lifecycle inserts it
  // there), as compressed-tensors' pre-hooks run before QuantizedKVCache / QuantizedAttentionImpl
  // quantize: the hook sees, and may edit, the unquantized states.
  auto* lc = m.owner->src.lifecycle.get();
  if (auto* state = lc != nullptr ? lc->state(attn->name()) : nullptr) {
    if (kind == K::kQuery) return {lc->register_query_hook(*state, std::move(hook))};
    if (kind == K::kKey) return {lc->register_key_hook(*state, std::move(hook))};
    return {lc->register_value_hook(*state, std::move(hook))};
  }
  if (kind == K::kQuery) return {attn->register_query_hook(std::move(hook))};
  if (kind == K::kKey) return {attn->register_key_hook(std::move(hook))};
  return {attn->register_value_hook(std::move(hook))};
}

// module.<q|k|v>_scale / _zero_point and the quantization attributes compressed-tensors puts on
// a hooked attention module; AttributeError when the module has none (as torch's getattr).
pyb::object quantization_attribute(const PyModule& m, const std::string& name) {
  auto missing = [&]() -> pyb::object {
    throw pyb::attribute_error("'" + m.module->class_name() + "' module " + m.module->name() +
                               " has no attribute '" + name + "'");
  };
  auto* lc = m.owner->src.lifecycle.get();
  auto* state = lc != nullptr ? lc->state(m.module->name()) : nullptr;
  if (state == nullptr) return missing();
  if (name == "quantization_scheme") return from_json(state->scheme.to_json());
  if (name == "quantization_status") return pyb::str(std::string(quant::to_string(state->status)));
  if (name == "quantization_enabled") return pyb::bool_(state->quantization_enabled);
  for (char base : {'q', 'k', 'v'}) {
    const auto& p = state->param(base);
    if (!p) continue;
    const std::vector<pyb::ssize_t> shape(p->shape.begin(), p->shape.end());
    if (name == std::string(1, base) + "_scale") {
      pyb::array_t<float> a(shape);
      std::copy(p->scale.begin(), p->scale.end(), a.mutable_data());
      return a;
    }
    if (name == std::string(1, base) + "_zero_point" && p->zero_point) {
      pyb::array_t<float> a(shape);
      std::copy(p->zero_point->begin(), p->zero_point->end(), a.mutable_data());
      return a;
    }
  }
  return missing();
}

pyb::list named_modules(const ModelPtr& model) {
  pyb::list out;
  for (model::Module* mod : model->lm().named_modules())
    out.append(pyb::make_tuple(mod->name(), PyModule{model, mod}));
  return out;
}

// A packed K or V buffer of `cache`, positions [first, length) with first =
// c.first_position(layer) (0 unless a sliding-window layer's ring has wrapped): a read-only uint8
// view [batch, kv_heads, length - first, row_bytes] that keeps the cache alive, or, where a
// ring's rows are not in position order, a read-only copy in position order.
pyb::array packed_view(pyb::object self, const model::KvCache& c, std::int64_t layer, bool keys) {
  const model::KvBuffer& buf = keys ? c.keys(layer) : c.values(layer);
  const std::int64_t first = c.first_position(layer), n = c.length() - first;
  const pyb::ssize_t rb = buf.row_bytes(), rows = buf.rows();
  const std::vector<pyb::ssize_t> shape{c.batch(), c.kv_heads(), n, rb};
  pyb::array a;
  if (!buf.ring() || buf.rows(0, 0).run(first, n) == n) {
    a = pyb::array(pyb::dtype::of<std::uint8_t>(), shape,
                   std::vector<pyb::ssize_t>{c.kv_heads() * rows * rb, rows * rb, rb, 1},
                   buf.rows(0, 0).row(first), self);
  } else {
    // array_t, as decoded(): pybind11 2.10's pyb::array(dtype, shape) read every element from one
    // byte.
    pyb::array_t<std::uint8_t> copy(shape);
    std::uint8_t* out = copy.mutable_data();
    for (std::int64_t b = 0; b < c.batch(); ++b) {
      for (std::int64_t h = 0; h < c.kv_heads(); ++h) {
        const kernels::KvRowsView v = buf.rows(b, h);
        for (std::int64_t t = 0; t < n; ++t, out += rb) std::memcpy(out, v.row(first + t), rb);
      }
    }
    a = std::move(copy);
  }
  a.attr("setflags")(pyb::arg("write") = false);
  return a;
}

pyb::array_t<float> decoded(const model::KvCache& c, std::int64_t layer, bool keys) {
  const std::int64_t first = c.first_position(layer), n = c.length() - first;
  const std::vector<float> v = (keys ? c.keys(layer) : c.values(layer)).read(first, n);
  pyb::array_t<float> a(std::vector<pyb::ssize_t>{c.batch(), c.kv_heads(), n, c.head_dim()});
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

pyb::dict stream_params(const model::KvBuffer& buf, std::int64_t kv_heads) {
  std::vector<float> scale, zero, global;
  for (std::int64_t h = 0; h < kv_heads; ++h) {
    scale.push_back(buf.scale(h));
    zero.push_back(buf.zero_point(h));
    global.push_back(buf.global_scale(h));
  }
  auto array = [](const std::vector<float>& v) {
    // Shape given as a vector: pybind11 2.10's array_t(count, ptr) made a stride-0 array here.
    pyb::array_t<float> a(std::vector<pyb::ssize_t>{static_cast<pyb::ssize_t>(v.size())});
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  };
  pyb::dict d;
  d["scale"] = array(scale);
  d["zero_point"] = array(zero);
  d["global_scale"] = array(global);
  return d;
}

}  // namespace

const tok::Tokenizer& PyModel::tokenizer() const {
  if (!src.tokenizer)
    fail<InvalidArgument>("{} has no tokenizer.json: pass token ids", src.dir.string());
  return *src.tokenizer;
}

void PyModel::set_lifecycle(std::unique_ptr<lifecycle::QuantizationLifecycle> lc) {
  src.lifecycle.reset();
  src.lifecycle = std::move(lc);
}

ModelPtr load_model(const std::filesystem::path& path, const std::string& weights) {
  const model::LoadOptions options{model::resolve_weight_dtype(weights, path)};
  auto m = std::make_shared<PyModel>();
  m->weights = std::string(model::weight_dtype_label(options.weights));
  with_path(path, [&] {
    run_native([&] {
      m->src = runtime::open_model_source(path, /*with_quantization=*/true, options,
                                          /*require_tokenizer=*/false);
    });
  });
  return m;
}

ModelPtr as_model(pyb::handle model_or_path) {
  if (pyb::isinstance<PyModel>(model_or_path)) return model_or_path.cast<ModelPtr>();
  if (is_path_like(model_or_path)) return load_model(to_path(model_or_path), "auto");
  throw pyb::type_error("model: expected a kvq.Model or a model directory");
}

void bind_model(pyb::module_& m) {
  pyb::class_<PyHookHandle>(m, "RemovableHandle",
                            "Returned by register_*_hook; remove() unregisters the hook.")
      .def(
          "remove", [](PyHookHandle& h) { h.handle.remove(); }, "Unregisters (idempotent).")
      .def_property_readonly("active", [](const PyHookHandle& h) { return h.handle.active(); })
      .def("__enter__", [](pyb::object self) { return self; })
      .def("__exit__", [](PyHookHandle& h, pyb::args) { h.handle.remove(); });

  pyb::class_<PyModule>(m, "Module",
                        "A module of the model's tree, named and classed like transformers'.")
      .def_property_readonly("name", [](const PyModule& s) { return s.module->name(); })
      .def_property_readonly("class_name", [](const PyModule& s) { return s.module->class_name(); })
      .def_property_readonly("class_hierarchy",
                             [](const PyModule& s) { return s.module->class_hierarchy(); })
      .def_property_readonly(
          "is_attention",
          [](const PyModule& s) { return dynamic_cast<AttentionModule*>(s.module) != nullptr; })
      .def(
          "named_modules",
          [](const PyModule& s) {
            pyb::list out;
            const std::string prefix = s.module->name().empty() ? "" : s.module->name() + ".";
            for (model::Module* mod : s.module->named_modules()) {
              const std::string rel = mod == s.module ? "" : mod->name().substr(prefix.size());
              out.append(pyb::make_tuple(rel, PyModule{s.owner, mod}));
            }
            return out;
          },
          "(relative name, module) pairs of this module and its descendants, pre-order.")
      .def_property_readonly(
          "layer_idx", [](const PyModule& s) { return attention_of(s, "layer_idx")->layer_idx(); })
      .def_property_readonly(
          "num_heads", [](const PyModule& s) { return attention_of(s, "num_heads")->num_heads(); })
      .def_property_readonly(
          "num_kv_heads",
          [](const PyModule& s) { return attention_of(s, "num_kv_heads")->num_kv_heads(); })
      .def_property_readonly(
          "head_dim", [](const PyModule& s) { return attention_of(s, "head_dim")->head_dim(); })
      .def_property_readonly(
          "num_hooks", [](const PyModule& s) { return attention_of(s, "num_hooks")->num_hooks(); })
      .def("__getattr__", &quantization_attribute)
      .def("__eq__", [](const PyModule& a, const PyModule& b) { return a.module == b.module; })
      .def("__hash__", [](const PyModule& s) { return std::hash<const void*>()(s.module); })
      .def("__repr__", [](const PyModule& s) {
        return "<kvq.Module '" + s.module->name() + "' " + s.module->class_name() + ">";
      });

  pyb::class_<PyCache>(m, "KvCache",
                       "A KV cache (Model.make_cache): packed low-bit K / V rows and their scales.")
      .def_property_readonly("length", [](const PyCache& c) { return c.cache->length(); })
      .def_property_readonly("capacity", [](const PyCache& c) { return c.cache->capacity(); })
      .def_property_readonly("layers", [](const PyCache& c) { return c.cache->layers(); })
      .def_property_readonly("batch", [](const PyCache& c) { return c.cache->batch(); })
      .def_property_readonly("kv_heads", [](const PyCache& c) { return c.cache->kv_heads(); })
      .def_property_readonly("head_dim", [](const PyCache& c) { return c.cache->head_dim(); })
      .def_property_readonly(
          "format",
          [](const PyCache& c) { return std::string(quant::kv_format_name(c.cache->format())); })
      .def_property_readonly("label", [](const PyCache& c) { return c.cache->config().label(); })
      .def_property_readonly("bytes_per_token",
                             [](const PyCache& c) { return c.cache->bytes_per_token(); })
      .def(
          "first_position",
          [](const PyCache& c, std::int64_t layer) { return c.cache->first_position(layer); },
          pyb::arg("layer"),
          "The first position the layer still holds: 0, or in a sliding-window layer whose "
          "ring has wrapped, length - its ring's rows.")
      .def(
          "keys",
          [](pyb::object self, std::int64_t layer) {
            return packed_view(self, *self.cast<PyCache&>().cache, layer, true);
          },
          pyb::arg("layer"),
          "Layer's packed K rows of positions [first_position(layer), length): read-only uint8 "
          "[batch, kv_heads, positions, row_bytes] (a view, or a copy where a ring wrapped).")
      .def(
          "values",
          [](pyb::object self, std::int64_t layer) {
            return packed_view(self, *self.cast<PyCache&>().cache, layer, false);
          },
          pyb::arg("layer"), "Layer's packed V rows (as keys()).")
      .def(
          "key_params",
          [](const PyCache& c, std::int64_t layer) {
            return stream_params(c.cache->keys(layer), c.cache->kv_heads());
          },
          pyb::arg("layer"), "{scale, zero_point, global_scale}: float32 [kv_heads] each.")
      .def(
          "value_params",
          [](const PyCache& c, std::int64_t layer) {
            return stream_params(c.cache->values(layer), c.cache->kv_heads());
          },
          pyb::arg("layer"))
      .def(
          "read_keys",
          [](const PyCache& c, std::int64_t layer) { return decoded(*c.cache, layer, true); },
          pyb::arg("layer"),
          "Decoded K of positions [first_position(layer), length): float32 [batch, kv_heads, "
          "positions, head_dim] (a copy).")
      .def(
          "read_values",
          [](const PyCache& c, std::int64_t layer) { return decoded(*c.cache, layer, false); },
          pyb::arg("layer"))
      .def(
          "reset", [](PyCache& c) { c.cache->reset(); }, "Forgets every token.");

  pyb::class_<PyModel, ModelPtr>(m, "Model", "A causal LM loaded by kvq.load_model.")
      .def_property_readonly("path", [](const PyModel& s) { return s.src.dir.string(); })
      .def_property_readonly("weights", [](const PyModel& s) { return s.weights; })
      .def_property_readonly(
          "config",
          [](const PyModel& s) { return from_json(io::read_json_file(s.src.dir / "config.json")); },
          "config.json as a dict.")
      .def_property_readonly(
          "quantization_config",
          [](const PyModel& s) -> pyb::object {
            if (!s.src.lifecycle) return pyb::none();
            auto c = s.src.lifecycle->config_from_model();
            if (!c) return pyb::none();
            return from_json(c->to_json());
          },
          "The config the model's quantization declares (None when plain).")
      .def("named_modules", &named_modules, "(name, module) pairs in transformers' order.")
      .def(
          "get_submodule",
          [](const ModelPtr& s, const std::string& name) {
            model::Module* mod = s->lm().find_module(name);
            if (mod == nullptr) throw pyb::attribute_error("no module named " + name);
            return PyModule{s, mod};
          },
          pyb::arg("target"))
      .def(
          "encode",
          [](const PyModel& s, const std::string& text, bool add_special_tokens) {
            return s.tokenizer().encode(text, add_special_tokens);
          },
          pyb::arg("text"), pyb::arg("add_special_tokens") = false)
      .def(
          "decode",
          [](const PyModel& s, const std::vector<std::int32_t>& ids, bool skip_special) {
            return pyb::bytes(s.tokenizer().decode(ids, skip_special))
                .attr("decode")("utf-8", "replace");
          },
          pyb::arg("ids"), pyb::arg("skip_special_tokens") = false)
      .def(
          "make_cache",
          [](const ModelPtr& s, std::int64_t capacity, const std::string& kv_cache,
             std::int64_t batch, std::int64_t window_chunk) {
            if (capacity <= 0) capacity = s->lm().config().max_position_embeddings;
            model::KvCacheConfig config =
                runtime::resolve_kv_cache(kv_cache, s->src.lifecycle.get(), s->src.dir.string());
            config.window_chunk = window_chunk;
            return PyCache{
                s, std::make_unique<model::KvCache>(s->lm().make_cache(batch, capacity, config))};
          },
          pyb::arg("capacity") = 0, pyb::arg("kv_cache") = "auto", pyb::arg("batch") = 1,
          pyb::arg("window_chunk") = model::KvCacheConfig::kDefaultWindowChunk,
          "A cache for `batch` sequences of up to `capacity` tokens (0: the model's context); "
          "kv_cache as the CLI's --kv-cache. Sliding-window layers keep a ring of window - 1 + "
          "window_chunk rows when that is shorter (0: full-length everywhere).")
      .def(
          "forward",
          [](const ModelPtr& s, pyb::handle input_ids, PyCache* cache) {
            const TokenInput t = to_tokens(input_ids);
            if (cache != nullptr && cache->owner != s)
              fail<InvalidArgument>("forward: the cache was made by another model");
            Tensor logits;
            run_native([&] {
              model::CausalLM& lm = s->lm();
              constexpr auto all = model::LogitsMode::kAll;
              if (cache != nullptr)
                logits = lm.forward_batch(t.ids, t.batch, *cache->cache, all);
              else
                logits = lm.forward_batch(t.ids, t.batch, all);
            });
            pyb::array_t<float> out = to_numpy(logits);
            if (!t.batched) out = out.attr("reshape")(out.shape(1), out.shape(2));
            return out;
          },
          pyb::arg("input_ids"), pyb::arg("cache") = nullptr,
          "Logits of every position: float32 [S, vocab] ([batch, S, vocab] for 2-D input_ids). "
          "With a cache the tokens are appended to it; without, attention sees these tokens only.")
      .def(
          "__call__",
          [](pyb::object self, pyb::handle input_ids, pyb::object cache) {
            return self.attr("forward")(input_ids, cache);
          },
          pyb::arg("input_ids"), pyb::arg("cache") = pyb::none())
      .def(
          "save_pretrained",
          [](const ModelPtr& s, pyb::handle out_dir, bool overwrite) {
            if (!s->src.lifecycle)
              fail<InvalidArgument>("save_pretrained: the model is not quantized");
            const std::filesystem::path out = to_path(out_dir);
            run_native([&] {
              lifecycle::save_pretrained(*s->src.lifecycle, s->src.dir, out, {}, overwrite);
            });
          },
          pyb::arg("save_directory"), pyb::arg("overwrite") = false,
          "Writes the quantized model as a compressed-tensors checkpoint (atomically).")
      .def("__repr__", [](const PyModel& s) {
        return "<kvq.Model '" + s.src.dir.string() + "' " +
               std::string(s.lm().architecture().hf_class) + " " + s.weights +
               (s.src.lifecycle ? " quantized" : "") + ">";
      });

  m.def(
      "load_model",
      [](pyb::handle path, const std::string& weights) {
        return load_model(to_path(path), weights);
      },
      pyb::arg("path"), pyb::arg("weights") = "auto",
      "Loads a Hugging Face model directory (a quantized checkpoint with its quantization).");

  m.def(
      "is_narrow_match",
      [](const ModelPtr& model, pyb::handle targets, const std::string& name) {
        std::vector<std::string> t;
        if (pyb::isinstance<pyb::str>(targets))
          t.push_back(targets.cast<std::string>());
        else
          t = targets.cast<std::vector<std::string>>();
        return lifecycle::is_narrow_match(model->lm().root(), t, name);
      },
      pyb::arg("model"), pyb::arg("targets"), pyb::arg("name"),
      "compressed-tensors 0.19's is_narrow_match: a target matches the module but neither its "
      "parent nor any descendant.");

  m.def(
      "apply_quantization_config",
      [](const ModelPtr& model, pyb::handle config) {
        const quant::QuantizationConfig c = to_config(config);
        model->set_lifecycle(nullptr);  // the model is plain before the new config applies
        model->set_lifecycle(lifecycle::apply_quantization_config(model->lm(), c));
      },
      pyb::arg("model"), pyb::arg("config"),
      "Applies a QuantizationConfig (or dict / recipe) to the model, replacing its quantization.");

  // register_query_hook / register_key_hook / register_value_hook: one definition, three kinds.
  struct HookPoint {
    const char* name;
    model::StatesKind kind;
    const char* states;  // what the hook sees
  };
  for (const HookPoint& p :
       {HookPoint{"register_query_hook", model::StatesKind::kQuery,
                  "query states (post-RoPE, every query head)"},
        HookPoint{"register_key_hook", model::StatesKind::kKey,
                  "keys being appended to the cache (post-RoPE, kv heads, before the GQA repeat)"},
        HookPoint{"register_value_hook", model::StatesKind::kValue,
                  "values being appended to the cache (kv heads)"}}) {
    const std::string doc =
        std::string("compressed-tensors' ") + p.name +
        ": hook(module, states) runs in every forward with the " + p.states +
        " as a float32 NumPy VIEW [batch, heads, new_tokens, head_dim] of kvq's buffer; it may "
        "edit it in place or return a replacement of that shape. The view is valid during the "
        "call only (copy it to keep it). An exception raised in the hook propagates to the "
        "caller of the forward. Returns a RemovableHandle.";
    m.def(
        p.name,
        [p](const PyModule& mod, pyb::function fn) {
          return register_hook(mod, p.kind, std::move(fn), p.name);
        },
        pyb::arg("module"), pyb::arg("hook"), doc.c_str());  // pybind11 copies the docstring
  }
}

}  // namespace kvq::py
