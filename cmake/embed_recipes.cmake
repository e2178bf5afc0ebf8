# Writes OUT: a C++ source holding every examples/recipes/*.yaml as a string, so `kvq compare`'s
# built-in schemes ARE those recipes (one source of truth; eval/builtin_recipes.h).
# Run with -DRECIPE_DIR=... -DOUT=... (at build time, whenever a recipe changes).
file(GLOB recipes ${RECIPE_DIR}/*.yaml)
list(SORT recipes)
set(body "")
foreach(f IN LISTS recipes)
  get_filename_component(name ${f} NAME)
  file(READ ${f} text)
  string(FIND "${text}" ")kvqrecipe\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${f}: contains the raw-string delimiter )kvqrecipe\"")
  endif()
  string(APPEND body "      {\"${name}\", R\"kvqrecipe(${text})kvqrecipe\"},\n")
endforeach()
file(WRITE ${OUT}.tmp "// Generated from examples/recipes/*.yaml by cmake/embed_recipes.cmake. Do not edit.
#include \"kvq/eval/builtin_recipes.h\"

namespace kvq::eval {

std::span<const BuiltinRecipe> builtin_recipes() {
  static const BuiltinRecipe table[] = {
${body}  };
  return table;
}

}  // namespace kvq::eval
")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
