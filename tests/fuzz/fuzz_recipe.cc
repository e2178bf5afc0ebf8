// Recipes (llm-compressor YAML or JSON): quant::parse_recipe, JSON tried first, then YAML.
#include <cstdint>

#include "fuzz_support.h"
#include "kvq/quant/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  fuzz::expect_kvq_errors_only(
      [&] { (void)quant::parse_recipe(fuzz::as_text(data, size), "recipe.yaml"); });
  return 0;
}
