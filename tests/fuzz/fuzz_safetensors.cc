// safetensors files: SafetensorsFile::open (the header JSON, offsets, dtypes, shapes against the
// file size), then every tensor view, and SafetensorsModel::open on the same file.
#include <cstdint>

#include "fuzz_support.h"
#include "kvq/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  const auto path = fuzz::write_scratch("model.safetensors", fuzz::as_text(data, size));
  fuzz::expect_kvq_errors_only([&] {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path);
    for (const io::TensorInfo& info : file.tensors()) {
      const Tensor t = file.tensor(info.name);
      if (t.nbytes() > 0) {  // the view lies inside the mapped file
        const auto* bytes = static_cast<const unsigned char*>(t.data());
        volatile unsigned char sink = bytes[0] ^ bytes[t.nbytes() - 1];
        (void)sink;
      }
    }
  });
  fuzz::expect_kvq_errors_only([&] {
    const io::SafetensorsModel model = io::SafetensorsModel::open(path);
    for (const std::string& name : model.names()) (void)model.info(name);
  });
  return 0;
}
