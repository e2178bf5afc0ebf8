#include "kvq/model/module.h"

#include <algorithm>

namespace kvq::model {

Module::Module(std::string name, std::vector<std::string> class_hierarchy)
    : name_(std::move(name)), class_hierarchy_(std::move(class_hierarchy)) {
  KVQ_CHECK(!class_hierarchy_.empty(), "module {} has no class", name_);
}

bool Module::is_instance_of(std::string_view class_name) const {
  return std::find(class_hierarchy_.begin(), class_hierarchy_.end(), class_name) !=
         class_hierarchy_.end();
}

std::string_view Module::local_name() const {
  const std::string_view n = name_;
  const std::size_t dot = n.rfind('.');
  return dot == std::string_view::npos ? n : n.substr(dot + 1);
}

Module* Module::child(std::string_view local_name) const {
  for (Module* c : children_) {
    if (c->local_name() == local_name) return c;
  }
  return nullptr;
}

void Module::adopt(std::unique_ptr<Module> child) {
  child->parent_ = this;
  children_.push_back(child.get());
  owned_.push_back(std::move(child));
}

std::vector<Module*> Module::named_modules() {
  std::vector<Module*> out{this};
  for (Module* c : children_) {
    std::vector<Module*> sub = c->named_modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<const Module*> Module::named_modules() const {
  std::vector<const Module*> out{this};
  for (const Module* c : children_) {
    std::vector<const Module*> sub = c->named_modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::string> linear_classes() { return {"Linear", "Module"}; }
std::vector<std::string> embedding_classes() { return {"Embedding", "Module"}; }
std::vector<std::string> module_list_classes() { return {"ModuleList", "Module"}; }

}  // namespace kvq::model
