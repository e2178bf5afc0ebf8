// Hand-built GGUF bytes for reader tests: every field written explicitly, so a test can corrupt
// exactly one of them.
#pragma once

#include <cstdint>
#include <cstring>
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
};

}  // namespace kvq::test
