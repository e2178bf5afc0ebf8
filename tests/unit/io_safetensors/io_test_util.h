// Helpers shared by the io tests: write raw bytes, assert on error type and message.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/error.h"

namespace kvq::test {

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// u64 little-endian header length + header + data, as a safetensors file lays them out.
inline std::string safetensors_bytes(std::string_view header, std::string_view data,
                                     std::uint64_t length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>(length >> (8 * i));
  out += header;
  out += data;
  return out;
}
inline std::string safetensors_bytes(std::string_view header, std::string_view data) {
  return safetensors_bytes(header, data, header.size());
}

inline std::vector<std::string> list_dir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kvq::test

// Runs `statement`, expects it to throw `type`, and checks that the message contains each of
// the given substrings.
#define EXPECT_THROW_MSG(statement, type, ...)                                               \
  do {                                                                                       \
    try {                                                                                    \
      statement;                                                                             \
      ADD_FAILURE() << "expected " #type " from " #statement;                                \
    } catch (const type& e) {                                                                \
      for (const std::string& kvq_part_ : std::initializer_list<std::string>{__VA_ARGS__}) { \
        EXPECT_NE(std::string(e.what()).find(kvq_part_), std::string::npos)                  \
            << "message: " << e.what() << "\nlacks: " << kvq_part_;                          \
      }                                                                                      \
    }                                                                                        \
  } while (0)
