// safetensors: read (zero-copy over mmap, single file or sharded directory) and write.
//
// Format: u64 little-endian header length N, N bytes of UTF-8 JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section. Offsets are relative to the data section. The reader validates like the
// reference Rust crate (safetensors 0.x `validate`): tensors must cover the data section exactly,
// with no overlap and no gap, and each byte range must equal numel × dtype size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/tensor.h"
#include "kvq/io/mmap.h"

namespace kvq::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

// One .safetensors file, mapped read-only.
class SafetensorsFile {
 public:
  // Throws IoError (cannot open) or FormatError naming the file and the problem.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }                                                                    // "__metadata__"
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  bool contains(std::string_view name) const;
  const TensorInfo& info(
      std::string_view name) const;            // FormatError naming file + tensor if absent
  Tensor tensor(std::string_view name) const;  // zero-copy view into the mmap
  // Drops the tensor's pages from this process (MappedFile::release); its views stay valid.
  void release(std::string_view name) const;
  std::uint64_t data_offset() const { return data_offset_; }  // 8 + header length

 private:
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> map_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> index_;  // name -> position in tensors_
  std::uint64_t data_offset_ = 0;
};

// A model: a directory with model.safetensors, or with model.safetensors.index.json + shards; or
// a path to one .safetensors file.
class SafetensorsModel {
 public:
  static SafetensorsModel open(const std::filesystem::path& dir_or_file);

  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  const TensorInfo& info(std::string_view name) const;  // FormatError naming the model if absent
  Tensor tensor(std::string_view name) const;
  std::string file_of(std::string_view name) const;  // the shard's file name (no directory)
  void release(std::string_view name) const;         // SafetensorsFile::release
  const std::filesystem::path& source() const { return source_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::filesystem::path source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t, std::less<>> file_index_;  // tensor name -> files_ index
};

// Collects tensors and writes one .safetensors file.
class SafetensorsWriter {
 public:
  void set_metadata(std::string key, std::string value);
  void add(std::string name, Tensor tensor);  // InvalidArgument on a duplicate or empty name
  // Atomic. Header padded with spaces to a multiple of 8 bytes (as the reference writer does);
  // tensors in insertion order; dtype names per DType. `written(name)` runs after each tensor's
  // bytes are out (save_pretrained releases the source's pages there).
  void write(const std::filesystem::path& path,
             const std::function<void(const std::string& name)>& written = {}) const;
  // The header JSON text (unpadded) that write() would produce.
  std::string header_json() const;
  std::size_t size() const { return tensors_.size(); }

 private:
  std::map<std::string, std::string> metadata_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

}  // namespace kvq::io
