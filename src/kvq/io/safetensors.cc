#include "kvq/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/strings.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/json_file.h"

namespace kvq::io {
namespace fs = std::filesystem;
namespace {

constexpr std::uint64_t kHeaderLengthBytes = 8;
// The reference crate's MAX_HEADER_SIZE: a larger header is a corrupt or hostile file.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint64_t json_u64(const nlohmann::json& v, const std::string& file, const std::string& tensor,
                       std::string_view what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer()) {
    fail<FormatError>("{}: tensor '{}': negative {} {}", file, tensor, what, v.dump());
  }
  fail<FormatError>("{}: tensor '{}': {} must be a non-negative integer, got {}", file, tensor,
                    what, v.dump());
}

TensorInfo parse_tensor_entry(const std::string& file, const std::string& name,
                              const nlohmann::json& entry) {
  if (!entry.is_object()) {
    fail<FormatError>("{}: tensor '{}': header entry must be an object", file, name);
  }
  TensorInfo info;
  info.name = name;
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail<FormatError>("{}: tensor '{}': missing 'dtype'", file, name);
  if (!dtype_it->is_string())
    fail<FormatError>("{}: tensor '{}': 'dtype' must be a string", file, name);
  const auto dtype_name_str = dtype_it->get<std::string>();
  const auto dtype = dtype_from_name(dtype_name_str);
  if (!dtype) {
    fail<FormatError>(
        "{}: tensor '{}': unknown dtype '{}' (supported: F32 F16 BF16 F64 F8_E4M3 F8_E5M2 I8 U8 "
        "I16 I32 I64 BOOL)",
        file, name, dtype_name_str);
  }
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail<FormatError>("{}: tensor '{}': missing 'shape'", file, name);
  if (!shape_it->is_array())
    fail<FormatError>("{}: tensor '{}': 'shape' must be an array", file, name);
  for (const auto& d : *shape_it) {
    const std::uint64_t dim = json_u64(d, file, name, "dimension");
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail<FormatError>("{}: tensor '{}': dimension {} is too large", file, name, dim);
    }
    info.shape.push_back(static_cast<std::int64_t>(dim));
  }

  const auto off_it = entry.find("data_offsets");
  if (off_it == entry.end()) {
    fail<FormatError>("{}: tensor '{}': missing 'data_offsets'", file, name);
  }
  if (!off_it->is_array() || off_it->size() != 2) {
    fail<FormatError>("{}: tensor '{}': 'data_offsets' must be [begin, end]", file, name);
  }
  info.begin = json_u64((*off_it)[0], file, name, "data offset");
  info.end = json_u64((*off_it)[1], file, name, "data offset");
  if (info.begin > info.end) {
    fail<FormatError>("{}: tensor '{}': data_offsets begin {} > end {}", file, name, info.begin,
                      info.end);
  }

  // numel × element size with overflow checks (the reference's ValidationOverflow).
  std::uint64_t numel = 1;
  for (std::int64_t d : info.shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && numel > std::numeric_limits<std::uint64_t>::max() / ud) {
      fail<FormatError>("{}: tensor '{}': shape {} overflows", file, name, shape_str(info.shape));
    }
    numel *= ud;
  }
  const std::uint64_t esize = dtype_size(info.dtype);
  if (numel > std::numeric_limits<std::uint64_t>::max() / esize) {
    fail<FormatError>("{}: tensor '{}': shape {} overflows", file, name, shape_str(info.shape));
  }
  if (numel * esize != info.end - info.begin) {
    fail<FormatError>(
        "{}: tensor '{}': shape {} × {} needs {} bytes but data_offsets [{}, {}] hold {}", file,
        name, shape_str(info.shape), dtype_name_str, numel * esize, info.begin, info.end,
        info.end - info.begin);
  }
  return info;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.map_ = MappedFile::open(path);
  const std::string file = path.string();
  const std::uint64_t size = f.map_->size();
  if (size < kHeaderLengthBytes) {
    fail<FormatError>("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length",
                      file, size);
  }
  const std::uint64_t n = read_u64_le(f.map_->data());
  if (n > kMaxHeaderSize) {
    fail<FormatError>("{}: not a safetensors file: header length {} exceeds the {} byte limit",
                      file, n, kMaxHeaderSize);
  }
  if (n > size - kHeaderLengthBytes) {
    fail<FormatError>("{}: header length {} runs past the end of the file ({} bytes; truncated?)",
                      file, n, size);
  }
  const std::string_view header(reinterpret_cast<const char*>(f.map_->data() + kHeaderLengthBytes),
                                static_cast<std::size_t>(n));
  if (const auto bad = find_invalid_utf8(header); bad != std::string_view::npos) {
    fail<FormatError>("{}: header is not valid UTF-8 (byte {} of the header)", file, bad);
  }

  // A plain parse sorts the keys (an ordered_json keeps them, but its key insertion is linear:
  // quadratic for 100,000 tensors) and silently merges duplicates: the header order and the
  // duplicates come from a second, SAX pass.
  const nlohmann::json j = parse_json(header, file + ": header");
  if (!j.is_object()) fail<FormatError>("{}: header must be a JSON object", file);
  const std::vector<std::string> keys = json_top_level_keys(header);  // header order
  std::set<std::string_view> seen;
  for (const std::string& key : keys)
    if (!seen.insert(key).second) fail<FormatError>("{}: header lists '{}' twice", file, key);

  for (const std::string& key : keys) {
    const nlohmann::json& value = j.at(key);
    if (key == kMetadataKey) {
      if (value.is_null()) continue;
      if (!value.is_object()) fail<FormatError>("{}: '__metadata__' must be an object", file);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          fail<FormatError>("{}: '__metadata__' value for '{}' must be a string, got {}", file, mk,
                            mv.dump());
        }
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    f.tensors_.push_back(parse_tensor_entry(file, key, value));
  }

  // The reference requires the tensors, sorted by offsets, to tile the data section exactly.
  std::vector<std::size_t> order(f.tensors_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& ta = f.tensors_[a];
    const auto& tb = f.tensors_[b];
    return std::tie(ta.begin, ta.end) < std::tie(tb.begin, tb.end);
  });
  std::uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;
  for (std::size_t i : order) {
    const TensorInfo& t = f.tensors_[i];
    if (t.begin < cursor) {
      fail<FormatError>("{}: tensor '{}' bytes [{}, {}] overlap tensor '{}' bytes [{}, {}]", file,
                        t.name, t.begin, t.end, previous->name, previous->begin, previous->end);
    }
    if (t.begin > cursor) {
      fail<FormatError>("{}: {} unused bytes in the data section before tensor '{}' (offset {})",
                        file, t.begin - cursor, t.name, t.begin);
    }
    cursor = t.end;
    previous = &t;
  }
  const std::uint64_t data_size = size - kHeaderLengthBytes - n;
  if (cursor != data_size) {
    if (cursor > data_size) {
      fail<FormatError>(
          "{}: tensor data ends at byte {} of the data section but the file holds "
          "only {} (truncated?)",
          file, cursor, data_size);
    }
    fail<FormatError>(
        "{}: {} trailing bytes after the last tensor (data section {} bytes, tensors "
        "cover {})",
        file, data_size - cursor, data_size, cursor);
  }
  f.data_offset_ = kHeaderLengthBytes + n;
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return index_.find(std::string(name)) != index_.end();
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  if (it == index_.end()) fail<FormatError>("{}: no tensor named '{}'", path_.string(), name);
  return tensors_[it->second];
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo& t = info(name);
  const std::uint8_t* ptr = map_->data() + data_offset_ + t.begin;
  Tensor view = Tensor::view(t.dtype, t.shape, ptr, map_);
  // Reference writers pad the header to 8 bytes, so data is aligned; a foreign file may not be,
  // and typed access through a misaligned pointer is undefined: copy those.
  if (reinterpret_cast<std::uintptr_t>(ptr) % dtype_size(t.dtype) != 0) return view.clone();
  return view;
}

void SafetensorsFile::release(std::string_view name) const {
  const TensorInfo& t = info(name);
  map_->release(data_offset_ + t.begin, t.end - t.begin);
}

// ---------------------------------------------------------------------------------------------
// SafetensorsModel

SafetensorsModel SafetensorsModel::open(const fs::path& dir_or_file) {
  SafetensorsModel m;
  m.source_ = dir_or_file;
  std::error_code ec;
  if (!fs::exists(dir_or_file, ec)) {
    fail<IoError>("{}: no such file or directory", dir_or_file.string());
  }
  if (!fs::is_directory(dir_or_file, ec)) {
    m.files_.push_back(SafetensorsFile::open(dir_or_file));
  } else {
    const fs::path index_path = dir_or_file / "model.safetensors.index.json";
    const fs::path single = dir_or_file / "model.safetensors";
    if (fs::exists(index_path, ec)) {
      const std::string index_name = index_path.string();
      const nlohmann::json index = read_json_file(index_path);
      if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        fail<FormatError>("{}: missing 'weight_map' object", index_name);
      }
      std::map<std::string, std::size_t> shard_of_file;
      std::vector<std::pair<std::string, std::string>> wanted;  // tensor, shard file name
      for (const auto& [tensor_name, shard] : index["weight_map"].items()) {
        if (!shard.is_string()) {
          fail<FormatError>("{}: weight_map entry for '{}' must be a file name", index_name,
                            tensor_name);
        }
        const std::string shard_name = shard.get<std::string>();
        const fs::path rel(shard_name);
        const bool escapes =
            std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; });
        if (shard_name.empty() || rel.is_absolute() || escapes) {
          fail<FormatError>(
              "{}: shard '{}' for tensor '{}' is not a file inside the model directory", index_name,
              shard_name, tensor_name);
        }
        if (!shard_of_file.contains(shard_name)) {
          const fs::path shard_path = dir_or_file / rel;
          if (!fs::is_regular_file(shard_path, ec)) {
            fail<IoError>("{}: shard '{}' (listed for tensor '{}') does not exist at {}",
                          index_name, shard_name, tensor_name, shard_path.string());
          }
          shard_of_file.emplace(shard_name, m.files_.size());
          m.files_.push_back(SafetensorsFile::open(shard_path));
        }
        wanted.emplace_back(tensor_name, shard_name);
      }
      for (const auto& [tensor_name, shard_name] : wanted) {
        const std::size_t fi = shard_of_file.at(shard_name);
        if (!m.files_[fi].contains(tensor_name)) {
          fail<FormatError>("{}: tensor '{}' is mapped to shard '{}' but {} does not contain it",
                            index_name, tensor_name, shard_name, m.files_[fi].path().string());
        }
        m.file_index_.emplace(tensor_name, fi);
      }
      for (const auto& f : m.files_) {
        for (const auto& t : f.tensors()) {
          if (!m.file_index_.contains(t.name)) {
            log::warn("{}: tensor '{}' is not in {}; ignored", f.path().string(), t.name,
                      index_name);
          }
        }
      }
      return m;
    }
    if (!fs::exists(single, ec)) {
      fail<IoError>("{}: no model.safetensors or model.safetensors.index.json",
                    dir_or_file.string());
    }
    m.files_.push_back(SafetensorsFile::open(single));
  }
  for (const auto& t : m.files_[0].tensors()) m.file_index_.emplace(t.name, 0);
  return m;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(file_index_.size());
  for (const auto& [name, fi] : file_index_) out.push_back(name);
  return out;  // std::map iterates in sorted order
}

bool SafetensorsModel::contains(std::string_view name) const {
  return file_index_.find(name) != file_index_.end();
}

const TensorInfo& SafetensorsModel::info(std::string_view name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end())
    fail<FormatError>("{}: no tensor named '{}'", source_.string(), name);
  return files_[it->second].info(name);
}

Tensor SafetensorsModel::tensor(std::string_view name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end())
    fail<FormatError>("{}: no tensor named '{}'", source_.string(), name);
  return files_[it->second].tensor(name);
}

void SafetensorsModel::release(std::string_view name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end())
    fail<FormatError>("{}: no tensor named '{}'", source_.string(), name);
  files_[it->second].release(name);
}

std::string SafetensorsModel::file_of(std::string_view name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end())
    fail<FormatError>("{}: no tensor named '{}'", source_.string(), name);
  return files_[it->second].path().filename().string();
}

// ---------------------------------------------------------------------------------------------
// SafetensorsWriter

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::add(std::string name, Tensor tensor) {
  if (name.empty() || name == kMetadataKey) {
    fail<InvalidArgument>("safetensors: invalid tensor name '{}'", name);
  }
  if (!tensor.defined()) fail<InvalidArgument>("safetensors: tensor '{}' has no data", name);
  for (const auto& [existing, t] : tensors_) {
    if (existing == name) fail<InvalidArgument>("safetensors: tensor '{}' added twice", name);
  }
  tensors_.emplace_back(std::move(name), std::move(tensor));
}

std::string SafetensorsWriter::header_json() const {
  // Built by hand to keep "__metadata__" first and tensors in insertion order; nlohmann escapes
  // the strings.
  std::string out = "{";
  bool first = true;
  if (!metadata_.empty()) {
    out += "\"__metadata__\":";
    out += nlohmann::json(metadata_).dump();
    first = false;
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    if (!first) out += ",";
    first = false;
    const std::uint64_t bytes = t.nbytes();
    out += nlohmann::json(name).dump();
    out +=
        fmt::format(R"(:{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", dtype_name(t.dtype()),
                    nlohmann::json(t.shape()).dump(), offset, offset + bytes);
    offset += bytes;
  }
  out += "}";
  return out;
}

void SafetensorsWriter::write(const fs::path& path,
                              const std::function<void(const std::string& name)>& written) const {
  std::string header = header_json();
  // Pad with spaces so the data section starts 8-byte aligned (the reference does the same).
  header.append((8 - header.size() % 8) % 8, ' ');
  std::uint8_t length[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(n >> (8 * i));
  AtomicFileWriter out(path);
  out.write(length, sizeof(length));
  out.write(header);
  for (const auto& [name, t] : tensors_) {
    if (t.nbytes() > 0) out.write(t.data(), t.nbytes());
    if (written) written(name);
  }
  out.commit();
}

}  // namespace kvq::io
