// Hand-built GGUF bytes for reader tests: every field written explicitly, so a test can corrupt
// exactly one of them.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace kvq::test {

class GgufBuilder {
 public:
  std::vector<std::uint8_t> bytes;

  template <class T>
  GgufBuilder& put(T value) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  GgufBuilder& str(std::string_view s) {
    put<std::uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  GgufBuilder& header(std::uint32_t version, std::uint64_t n_tensors, std::uint64_t n_kv) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return put(version).put(n_tensors).put(n_kv);
  }
  // key + value type; the caller appends the value.
  GgufBuilder& key(std::string_view k, std::uint32_t type) { return str(k).put(type); }
  GgufBuilder& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type,
                      std::uint64_t offset) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
    for (auto d : ne) put(d);
    return put(type).put(offset);
  }
  GgufBuilder& pad_to(std::size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  GgufBuilder& zeros(std::size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  // Tensor infos of F32 tensors (anything with .name and .ne), then their data, each 32-byte
  // aligned; element i of every tensor is i.
  template <class Tensors>
  GgufBuilder& f32_tensors_of_index(const Tensors& tensors) {
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> numels;
    for (const auto& t : tensors) {
      std::uint64_t n = 1;
      for (auto d : t.ne) n *= d;
      tensor(t.name, t.ne, 0, offset);
      offset += (n * 4 + 31) / 32 * 32;
      numels.push_back(n);
    }
    pad_to(32);
    for (auto n : numels) {
      for (std::uint64_t i = 0; i < n; ++i) put<float>(static_cast<float>(i));
      pad_to(32);
    }
    return *this;
  }
  void save(const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
};

}  // namespace kvq::test
