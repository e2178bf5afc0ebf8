// tests/data/codec/codec_goldens.json (torch / compressed-tensors float8 and fp4 codecs, written
// by tools/reference/make_codec_goldens.py), parsed once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_paths.h"

namespace kvq::test {

inline const nlohmann::json& codec_goldens() {
  static const nlohmann::json j = [] {
    std::ifstream in(test_data_dir() / "codec" / "codec_goldens.json");
    EXPECT_TRUE(in.good()) << "missing tests/data/codec/codec_goldens.json";
    return nlohmann::json::parse(in);
  }();
  return j;
}

}  // namespace kvq::test
