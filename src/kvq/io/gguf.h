// GGUF (v2 and v3, little-endian) reader: header, metadata, tensor infos, zero-copy tensor bytes.
//
// Layout (gguf.md in ggml): "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count ×
// (string key, u32 value type, value); tensor_count × (string name, u32 n_dims, n_dims × u64
// ne, u32 ggml type, u64 offset); padding to `general.alignment` (default 32); the data section.
// Strings are u64 length + UTF-8 bytes; arrays are u32 element type + u64 count + elements.
// ne[0] is the innermost (contiguous) dimension, so the row-major shape is ne reversed.
//
// Every inconsistency (bad magic, unsupported version, truncation, counts larger than the file,
// unknown value or tensor types, tensor data out of range or overlapping, ...) throws
// FormatError naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/io/gguf_types.h"

namespace kvq::io {

// One metadata value. Scalars keep their declared type; integers are widened into u64/i64,
// floats into f64 (f32 values round-trip exactly).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  std::uint64_t u64 = 0;  // u8, u16, u32, u64
  std::int64_t i64 = 0;   // i8, i16, i32, i64
  double f64 = 0.0;       // f32, f64
  bool boolean = false;
  std::string str;
  GgufValueType array_type = GgufValueType::kU8;  // element type when type == kArray
  std::vector<GgufValue> array;

  bool is_integer() const;
  bool is_float() const;
  // A short human rendering ("576", "1e-05", "\"llama\"", "[49152 × string]").
  std::string summary(std::size_t max_chars = 80) const;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<std::uint64_t> ne;  // GGUF order: ne[0] innermost
  std::uint64_t offset = 0;       // relative to the data section
  std::uint64_t nbytes = 0;

  Shape shape() const;  // row-major (ne reversed): [out_features, in_features] for a matrix
  std::int64_t numel() const;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

class GgufFile {
 public:
  // Maps and parses the file. IoError when it cannot be opened, FormatError when invalid.
  static GgufFile open(const std::filesystem::path& path);
  // Parses bytes already in memory; `source_name` names them in errors; `owner` keeps them alive
  // for tensor views (may be null when the caller outlives every view).
  static GgufFile parse(std::span<const std::uint8_t> bytes, std::string source_name,
                        std::shared_ptr<const void> owner);

  const std::string& source() const { return source_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // absolute, aligned
  std::uint64_t file_size() const { return bytes_.size(); }

  // Metadata in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  // FormatError "<file>: missing GGUF metadata key '<key>'" when absent.
  const GgufValue& get(std::string_view key) const;

  // Typed getters. Integers convert between widths when the value fits; otherwise (or on a
  // type mismatch) FormatError naming the file, the key, the expected and the actual type.
  std::uint32_t get_u32(std::string_view key) const;
  std::uint64_t get_u64(std::string_view key) const;
  std::int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;  // f32, or f64 that is exactly representable
  double get_f64(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<std::int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;
  // The same, nullopt when the key is absent (a present key of the wrong type still throws).
  std::optional<std::uint32_t> find_u32(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool has_tensor(std::string_view name) const;
  // FormatError naming the file and the tensor when absent.
  const GgufTensorInfo& tensor_info(std::string_view name) const;
  // The tensor's raw bytes inside the file (valid while this GgufFile or an owner lives).
  std::span<const std::uint8_t> tensor_bytes(const GgufTensorInfo& info) const;
  // Keeps the underlying bytes alive (for zero-copy views of F32/F16/BF16 data).
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::string source_;
  std::shared_ptr<const void> owner_;
  std::span<const std::uint8_t> bytes_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::unordered_map<std::string, std::size_t> key_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

}  // namespace kvq::io
