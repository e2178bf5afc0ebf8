// config.json: ModelConfig parsing as a model directory is loaded (load_model_config), then what
// is derived from a config before any weight is read (the architecture, its layer windows and
// expected tensors, the quantization_config, the config written back); generation_config.json
// from the same bytes.
#include <cstdint>

#include "fuzz_support.h"
#include "kvq/model/architecture.h"
#include "kvq/model/model_config.h"
#include "kvq/quant/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::write_scratch("config.json", text);
  fuzz::write_scratch("generation_config.json", text);
  const auto& dir = fuzz::scratch_dir();
  fuzz::expect_kvq_errors_only([&] {
    const model::ModelConfig config = model::load_model_config(dir);
    (void)model::model_config_to_json(config);
    fuzz::expect_kvq_errors_only([&] {
      if (config.raw.contains("quantization_config"))
        (void)quant::parse_quantization_config(config.raw, "config.json");
    });
    const model::Architecture& arch = model::find_architecture(config, "config.json");
    (void)model::layer_windows(arch, config, "config.json");
    (void)model::expected_tensors(arch, config);
  });
  fuzz::expect_kvq_errors_only([&] { (void)model::load_generation_config(dir); });
  return 0;
}
