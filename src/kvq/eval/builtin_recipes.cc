#include "kvq/eval/builtin_recipes.h"

#include <string>

#include "kvq/core/error.h"

namespace kvq::eval {

std::string_view builtin_recipe(std::string_view file) {
  std::string names;
  for (const BuiltinRecipe& r : builtin_recipes()) {
    if (r.file == file) return r.text;
    names += (names.empty() ? "" : ", ") + std::string(r.file);
  }
  fail<InvalidArgument>("no built-in recipe '{}' (examples/recipes has: {})", file, names);
}

}  // namespace kvq::eval
