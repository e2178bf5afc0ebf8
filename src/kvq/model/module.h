// The module tree, named and classed like transformers' model of the architecture
// (model/architecture.h: LlamaForCausalLM, ...).
//
// Every module has its Hugging Face path ("model.layers.3.self_attn.k_proj"), its class name
// ("Linear") and its class hierarchy, most derived first, as Python's MRO lists it (so a recipe
// target "Module" or "LlamaAttention" matches as it does in compressed-tensors). Children are kept
// in registration order, and named_modules() is a pre-order walk, exactly transformers' order.
// Modules are owned by their model; pointers stay valid for the model's lifetime.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/tensor.h"

namespace kvq::model {

class Module {
 public:
  Module(std::string name, std::vector<std::string> class_hierarchy);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }  // "" for the root
  const std::string& class_name() const { return class_hierarchy_.front(); }
  // Most derived first, ending with "Module": {"LlamaAttention", "Module"}.
  const std::vector<std::string>& class_hierarchy() const { return class_hierarchy_; }
  bool is_instance_of(std::string_view class_name) const;

  // The last component of the name ("k_proj"; "" for the root).
  std::string_view local_name() const;
  Module* parent() const { return parent_; }
  const std::vector<Module*>& children() const { return children_; }
  Module* child(std::string_view local_name) const;  // nullptr when absent

  // The module's "weight" parameter (Linear, Embedding, LlamaRMSNorm); undefined otherwise.
  const Tensor& weight() const { return weight_; }
  bool has_weight() const { return weight_.defined() && weight_.numel() > 0; }
  // A Linear's "bias" (Qwen2's q/k/v_proj), fp32 [out]; undefined when it has none.
  const Tensor& bias() const { return bias_; }
  bool has_bias() const { return bias_.defined() && bias_.numel() > 0; }

  // Pre-order walk of this module and its descendants (transformers' named_modules()).
  std::vector<Module*> named_modules();
  std::vector<const Module*> named_modules() const;

  // Builder API used by the model: takes ownership of `child`, records it as the next child.
  template <class M>
  M* add_child(std::unique_ptr<M> child) {
    M* raw = child.get();
    adopt(std::move(child));
    return raw;
  }
  void set_weight(Tensor weight) { weight_ = std::move(weight); }
  void set_bias(Tensor bias) { bias_ = std::move(bias); }

 private:
  void adopt(std::unique_ptr<Module> child);

  std::string name_;
  std::vector<std::string> class_hierarchy_;
  Module* parent_ = nullptr;
  std::vector<Module*> children_;
  std::vector<std::unique_ptr<Module>> owned_;
  Tensor weight_;
  Tensor bias_;
};

// Class hierarchies of the modules every architecture shares (Python MRO restricted to
// nn.Module subclasses, most derived first); the family's own are in model/architecture.h.
std::vector<std::string> linear_classes();       // {"Linear", "Module"}
std::vector<std::string> embedding_classes();    // {"Embedding", "Module"}
std::vector<std::string> module_list_classes();  // {"ModuleList", "Module"}

}  // namespace kvq::model
