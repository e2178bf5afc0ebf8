// Reads tests/data/quant/math_goldens.{json,bin.gz} (written by
// tools/reference/make_quant_goldens_math.py) and compares tensors bit for bit.
#pragma once

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvq/core/tensor.h"
#include "support/test_paths.h"

namespace kvq::test {

class GoldenBlob {
 public:
  explicit GoldenBlob(const std::string& stem) {
    const auto bin_path = test_data_dir() / "quant" / (stem + ".bin.gz");
    gzFile gz = gzopen(bin_path.c_str(), "rb");
    if (gz == nullptr) throw std::runtime_error("cannot open " + bin_path.string());
    data_ = std::make_shared<std::string>();
    char buffer[1 << 16];
    int n = 0;
    while ((n = gzread(gz, buffer, sizeof buffer)) > 0)
      data_->append(buffer, static_cast<std::size_t>(n));
    const bool ok = n == 0;
    gzclose(gz);
    if (!ok) throw std::runtime_error("corrupt gzip data in " + bin_path.string());
    std::ifstream js(test_data_dir() / "quant" / (stem + ".json"));
    index_ = nlohmann::ordered_json::parse(js);
  }
  const nlohmann::ordered_json& index() const { return index_; }
  Tensor tensor(const nlohmann::ordered_json& entry) const {
    const auto dtype = dtype_from_name(entry.at("dtype").get<std::string>());
    Shape shape = entry.at("shape").get<Shape>();
    Tensor t(*dtype, shape);
    const auto offset = entry.at("offset").get<std::size_t>();
    if (offset + t.nbytes() > data_->size() || entry.at("nbytes").get<std::size_t>() != t.nbytes())
      throw std::runtime_error("golden entry out of range of the blob");
    std::memcpy(t.mutable_data(), data_->data() + entry.at("offset").get<std::size_t>(),
                entry.at("nbytes").get<std::size_t>());
    return t;
  }

 private:
  std::shared_ptr<std::string> data_;
  nlohmann::ordered_json index_;
};

// Bitwise equality of dtype, shape and bytes (NaN payloads included); on mismatch reports the
// count and the largest absolute difference.
inline ::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure()
           << "dtype " << dtype_name(got.dtype()) << " != " << dtype_name(want.dtype());
  if (shape_numel(got.shape()) != shape_numel(want.shape()) ||
      (got.shape() != want.shape() && !(got.ndim() == 0 || want.ndim() == 0)))
    return ::testing::AssertionFailure()
           << "shape " << shape_str(got.shape()) << " != " << shape_str(want.shape());
  if (std::memcmp(got.data(), want.data(), got.nbytes()) == 0) return ::testing::AssertionSuccess();
  const auto a = got.to_f32_vector(), b = want.to_f32_vector();
  std::size_t bad = 0;
  double max_diff = 0;
  std::size_t first = a.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool same = std::memcmp(&a[i], &b[i], sizeof(float)) == 0;
    if (!same) {
      ++bad;
      if (first == a.size()) first = i;
      max_diff = std::max(max_diff, std::fabs(double(a[i]) - double(b[i])));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << "/" << a.size() << " values differ, max |diff| " << max_diff << ", first at "
         << first << ": got " << a[first] << " want " << b[first];
}

}  // namespace kvq::test
