#include "kvq/io/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/ranges.h>

#include "kvq/core/error.h"
#include "kvq/io/mmap.h"

namespace kvq::io {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;           // nested arrays deeper than this are surely corrupt
constexpr std::uint32_t kMaxDims = 4;       // GGML_MAX_DIMS
constexpr std::size_t kMaxTensorName = 64;  // GGML_MAX_NAME: llama.cpp refuses longer names too
// Metadata values held in memory, all arrays together. A value costs ~100 bytes of RAM but may
// take 1 byte of file, so the file size alone would let a 30 MB array cost 3 GB; real files hold
// at most about a million (a 256k vocabulary's tokens, scores and types, and its merges).
constexpr std::uint64_t kMaxMetadataValues = std::uint64_t{1} << 23;

// Sequential little-endian reader over the file bytes; every read is bounds-checked.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    const auto length = read<std::uint64_t>(what);
    if (length > remaining()) {
      fail<FormatError>(
          "{}: corrupt GGUF file: {} has length {} at offset {}, but only {} bytes remain", source_,
          what, length, pos_ - 8, remaining());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return s;
  }

  // Rejects `count` items of at least `min_item_bytes` each that cannot fit in the file, before
  // anything is allocated for them.
  void check_count(std::uint64_t count, std::uint64_t min_item_bytes, std::string_view what) {
    if (min_item_bytes > 0 && count > remaining() / min_item_bytes) {
      fail<FormatError>(
          "{}: corrupt GGUF file: {} count {} at offset {} needs at least {} bytes each, but "
          "only {} bytes remain",
          source_, what, count, pos_, min_item_bytes, remaining());
    }
  }

  [[noreturn]] void truncated(std::uint64_t size, std::string_view what) const {
    fail<FormatError>(
        "{}: truncated GGUF file: reading {} needs {} bytes at offset {}, but the file has {} "
        "bytes",
        source_, what, size, pos_, bytes_.size());
  }

 private:
  void need(std::uint64_t size, std::string_view what) const {
    if (size > remaining()) truncated(size, what);
  }

  std::span<const std::uint8_t> bytes_;
  const std::string& source_;
  std::uint64_t pos_ = 0;
};

// Smallest encoding of one value of `type` (for count plausibility checks).
std::uint64_t min_value_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
    case GgufValueType::kString:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 1;
}

GgufValueType read_value_type(Cursor& in, const std::string& source, std::string_view key) {
  const auto number = in.read<std::uint32_t>("a metadata value type");
  if (!gguf_value_type_is_valid(number)) {
    fail<FormatError>("{}: corrupt GGUF file: metadata key '{}' has unknown value type {}", source,
                      key, number);
  }
  return static_cast<GgufValueType>(number);
}

GgufValue read_value(Cursor& in, GgufValueType type, const std::string& source,
                     const std::string& key, int depth, std::uint64_t& values) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::kU8:
      v.u64 = in.read<std::uint8_t>(key);
      break;
    case GgufValueType::kI8:
      v.i64 = in.read<std::int8_t>(key);
      break;
    case GgufValueType::kU16:
      v.u64 = in.read<std::uint16_t>(key);
      break;
    case GgufValueType::kI16:
      v.i64 = in.read<std::int16_t>(key);
      break;
    case GgufValueType::kU32:
      v.u64 = in.read<std::uint32_t>(key);
      break;
    case GgufValueType::kI32:
      v.i64 = in.read<std::int32_t>(key);
      break;
    case GgufValueType::kU64:
      v.u64 = in.read<std::uint64_t>(key);
      break;
    case GgufValueType::kI64:
      v.i64 = in.read<std::int64_t>(key);
      break;
    case GgufValueType::kF32:
      v.f64 = in.read<float>(key);
      break;
    case GgufValueType::kF64:
      v.f64 = in.read<double>(key);
      break;
    case GgufValueType::kBool: {
      const auto b = in.read<std::uint8_t>(key);
      if (b > 1) {
        fail<FormatError>("{}: corrupt GGUF file: bool metadata '{}' has byte value {}", source,
                          key, b);
      }
      v.boolean = b != 0;
      break;
    }
    case GgufValueType::kString:
      v.str = in.read_string(fmt::format("string value of '{}'", key));
      break;
    case GgufValueType::kArray: {
      if (depth >= kMaxArrayDepth) {
        fail<FormatError>("{}: corrupt GGUF file: metadata '{}' nests arrays deeper than {}",
                          source, key, kMaxArrayDepth);
      }
      v.array_type = read_value_type(in, source, key);
      const auto count = in.read<std::uint64_t>(fmt::format("array length of '{}'", key));
      in.check_count(count, min_value_bytes(v.array_type), fmt::format("array '{}'", key));
      if (count > kMaxMetadataValues - values) {
        fail<FormatError>(
            "{}: GGUF metadata array '{}' has {} values: with the arrays before it more than {} "
            "(kvq's limit)",
            source, key, count, kMaxMetadataValues);
      }
      values += count;
      v.array.reserve(count);
      for (std::uint64_t i = 0; i < count; ++i) {
        v.array.push_back(read_value(in, v.array_type, source, key, depth + 1, values));
      }
      break;
    }
  }
  return v;
}

[[noreturn]] void wrong_type(const std::string& source, std::string_view key,
                             std::string_view expected, const GgufValue& v) {
  fail<FormatError>("{}: GGUF metadata '{}' should be {}, but is {} ({})", source, key, expected,
                    gguf_value_type_name(v.type), v.summary());
}

bool fits_f32(double value) {
  return std::isnan(value) || static_cast<double>(static_cast<float>(value)) == value;
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return type == GgufValueType::kF32 || type == GgufValueType::kF64;
}

std::string GgufValue::summary(std::size_t max_chars) const {
  std::string s;
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kU16:
    case GgufValueType::kU32:
    case GgufValueType::kU64:
      s = fmt::format("{}", u64);
      break;
    case GgufValueType::kI8:
    case GgufValueType::kI16:
    case GgufValueType::kI32:
    case GgufValueType::kI64:
      s = fmt::format("{}", i64);
      break;
    case GgufValueType::kF32:
      s = fmt::format("{}", static_cast<float>(f64));
      break;
    case GgufValueType::kF64:
      s = fmt::format("{}", f64);
      break;
    case GgufValueType::kBool:
      s = fmt::format("{}", boolean);
      break;
    case GgufValueType::kString: {
      s.push_back('"');
      for (char c : str) {
        if (c == '\n') {
          s += "\\n";
        } else {
          s += c;
        }
      }
      s.push_back('"');
      break;
    }
    case GgufValueType::kArray: {
      s = fmt::format("[{} × {}]", array.size(), gguf_value_type_name(array_type));
      if (!array.empty()) {
        s += " ";
        for (std::size_t i = 0; i < array.size() && s.size() < max_chars; ++i) {
          if (i) s += ", ";
          s += array[i].summary(max_chars);
        }
      }
      break;
    }
  }
  if (s.size() > max_chars) {
    // Cut at a UTF-8 character boundary: never inside a multi-byte sequence.
    std::size_t cut = max_chars;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s.resize(cut);
    s += "...";
  }
  return s;
}

Shape GgufTensorInfo::shape() const {
  Shape s(ne.rbegin(), ne.rend());
  return s;
}

std::int64_t GgufTensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : ne) n *= static_cast<std::int64_t>(d);
  return n;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  auto map = MappedFile::open(path);
  std::span<const std::uint8_t> bytes(map->data(), map->size());
  return parse(bytes, path.string(), std::move(map));
}

GgufFile GgufFile::parse(std::span<const std::uint8_t> bytes, std::string source_name,
                         std::shared_ptr<const void> owner) {
  GgufFile f;
  f.source_ = std::move(source_name);
  f.owner_ = std::move(owner);
  f.bytes_ = bytes;
  const std::string& src = f.source_;
  Cursor in(bytes, src);

  if (bytes.size() < 4) in.truncated(4, "the magic");
  const auto magic = in.read<std::uint32_t>("the magic");
  if (magic != kMagic) {
    fail<FormatError>(
        "{}: not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected "
        "'GGUF')",
        src, bytes[0], bytes[1], bytes[2], bytes[3]);
  }
  f.version_ = in.read<std::uint32_t>("the version");
  if (f.version_ != 2 && f.version_ != 3) {
    if ((f.version_ & 0xffffu) == 0 && f.version_ != 0) {
      fail<FormatError>("{}: big-endian GGUF files are not supported (version field {:#x})", src,
                        f.version_);
    }
    fail<FormatError>("{}: unsupported GGUF version {} (supported: 2, 3)", src, f.version_);
  }
  const auto tensor_count = in.read<std::uint64_t>("the tensor count");
  const auto kv_count = in.read<std::uint64_t>("the metadata count");
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
  // least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  in.check_count(kv_count, 13, "metadata");

  f.metadata_.reserve(kv_count);
  std::uint64_t values = 0;  // array elements read so far
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    std::string key = in.read_string("a metadata key");
    const auto type = read_value_type(in, src, key);
    GgufValue value = read_value(in, type, src, key, 0, values);
    if (!f.key_index_.emplace(key, f.metadata_.size()).second) {
      fail<FormatError>("{}: corrupt GGUF file: duplicate metadata key '{}'", src, key);
    }
    f.metadata_.push_back({std::move(key), std::move(value)});
  }

  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->type != GgufValueType::kU32) wrong_type(src, "general.alignment", "u32", *a);
    if (a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0) {
      fail<FormatError>("{}: general.alignment must be a power of two, got {}", src, a->u64);
    }
    f.alignment_ = a->u64;
  } else {
    f.alignment_ = kDefaultAlignment;
  }

  in.check_count(tensor_count, 24, "tensor");
  f.tensors_.reserve(tensor_count);
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.name = in.read_string("a tensor name");
    if (t.name.size() >= kMaxTensorName) {
      fail<FormatError>("{}: tensor name '{}...' is {} bytes long (GGUF allows at most {})", src,
                        t.name.substr(0, 40), t.name.size(), kMaxTensorName - 1);
    }
    const auto n_dims = in.read<std::uint32_t>("the dimension count");
    if (n_dims > kMaxDims) {
      fail<FormatError>("{}: tensor '{}' has {} dimensions (at most {} supported)", src, t.name,
                        n_dims, kMaxDims);
    }
    t.ne.resize(n_dims);
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      t.ne[d] = in.read<std::uint64_t>("a tensor dimension");
      // ggml stores ne as int64: anything above INT64_MAX is negative there.
      if (t.ne[d] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail<FormatError>("{}: tensor '{}' has negative dimension {}", src, t.name,
                          static_cast<std::int64_t>(t.ne[d]));
      }
      if (t.ne[d] != 0 &&
          numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / t.ne[d]) {
        fail<FormatError>("{}: tensor '{}' element count overflows (dims {})", src, t.name,
                          fmt::join(t.ne, " × "));
      }
      numel *= t.ne[d];
    }
    const auto type_number = in.read<std::uint32_t>("a tensor type");
    const auto traits = ggml_type_traits(type_number);
    if (!traits) {
      fail<FormatError>("{}: tensor '{}' has unknown GGML tensor type {}", src, t.name,
                        type_number);
    }
    t.type = traits->type;
    t.offset = in.read<std::uint64_t>("a tensor offset");
    const std::uint64_t row = n_dims == 0 ? 1 : t.ne[0];
    if (row % traits->block_size != 0) {
      fail<FormatError>(
          "{}: tensor '{}' ({}) has rows of {} elements, not a multiple of the "
          "block size {}",
          src, t.name, traits->name, row, traits->block_size);
    }
    const std::uint64_t blocks = numel / traits->block_size;
    if (blocks != 0 && traits->type_size > std::numeric_limits<std::uint64_t>::max() / blocks) {
      fail<FormatError>("{}: tensor '{}' byte size overflows", src, t.name);
    }
    t.nbytes = blocks * traits->type_size;
    if (t.offset % f.alignment_ != 0) {
      fail<FormatError>("{}: tensor '{}' data offset {} is not a multiple of the alignment {}", src,
                        t.name, t.offset, f.alignment_);
    }
    if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second) {
      fail<FormatError>("{}: corrupt GGUF file: duplicate tensor name '{}'", src, t.name);
    }
    f.tensors_.push_back(std::move(t));
  }

  const std::uint64_t header_end = in.pos();
  f.data_offset_ = (header_end + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (f.data_offset_ > bytes.size()) {
    if (!f.tensors_.empty()) {
      fail<FormatError>(
          "{}: truncated GGUF file: data section starts at {} but the file has {} "
          "bytes",
          src, f.data_offset_, bytes.size());
    }
    f.data_offset_ = bytes.size();  // no tensors: the padding may be missing
  }
  const std::uint64_t data_size = bytes.size() - f.data_offset_;

  // Every tensor inside the data section and no two overlapping.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (const auto& t : f.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      fail<FormatError>(
          "{}: tensor '{}' data [{}, {}) lies outside the data section ({} bytes; "
          "the file is truncated or corrupt)",
          src, t.name, t.offset, t.offset + t.nbytes, data_size);
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* cur = by_offset[i];
    if (prev->offset + prev->nbytes > cur->offset && prev->nbytes > 0 && cur->nbytes > 0) {
      fail<FormatError>("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", src, prev->name,
                        prev->offset, prev->offset + prev->nbytes, cur->name, cur->offset,
                        cur->offset + cur->nbytes);
    }
  }
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail<FormatError>("{}: missing GGUF metadata key '{}'", source_, key);
  return *v;
}

std::uint64_t GgufFile::get_u64(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.is_integer()) {
    const bool is_signed = v.type == GgufValueType::kI8 || v.type == GgufValueType::kI16 ||
                           v.type == GgufValueType::kI32 || v.type == GgufValueType::kI64;
    if (!is_signed) return v.u64;
    if (v.i64 >= 0) return static_cast<std::uint64_t>(v.i64);
  }
  wrong_type(source_, key, "a non-negative integer", v);
}

std::uint32_t GgufFile::get_u32(std::string_view key) const {
  const std::uint64_t value = get_u64(key);
  if (value > std::numeric_limits<std::uint32_t>::max()) {
    wrong_type(source_, key, "an integer that fits in u32", get(key));
  }
  return static_cast<std::uint32_t>(value);
}

std::int64_t GgufFile::get_i64(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.is_integer()) {
    const bool is_unsigned = v.type == GgufValueType::kU8 || v.type == GgufValueType::kU16 ||
                             v.type == GgufValueType::kU32 || v.type == GgufValueType::kU64;
    if (!is_unsigned) return v.i64;
    if (v.u64 <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return static_cast<std::int64_t>(v.u64);
    }
  }
  wrong_type(source_, key, "an integer that fits in i64", v);
}

double GgufFile::get_f64(std::string_view key) const {
  const GgufValue& v = get(key);
  if (!v.is_float()) wrong_type(source_, key, "a float", v);
  return v.f64;
}

float GgufFile::get_f32(std::string_view key) const {
  const double value = get_f64(key);
  if (!fits_f32(value)) wrong_type(source_, key, "a float representable as f32", get(key));
  return static_cast<float>(value);
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufValueType::kBool) wrong_type(source_, key, "bool", v);
  return v.boolean;
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufValueType::kString) wrong_type(source_, key, "string", v);
  return v.str;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufValueType::kArray || v.array_type != GgufValueType::kString) {
    wrong_type(source_, key, "an array of strings", v);
  }
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const auto& item : v.array) out.push_back(item.str);
  return out;
}

std::vector<std::int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = get(key);
  GgufValue probe;
  probe.type = v.array_type;
  if (v.type != GgufValueType::kArray || !probe.is_integer() ||
      v.array_type == GgufValueType::kU64) {
    wrong_type(source_, key, "an array of integers (up to i64)", v);
  }
  std::vector<std::int64_t> out;
  out.reserve(v.array.size());
  for (const auto& item : v.array) {
    out.push_back(probe.type == GgufValueType::kU8 || probe.type == GgufValueType::kU16 ||
                          probe.type == GgufValueType::kU32
                      ? static_cast<std::int64_t>(item.u64)
                      : item.i64);
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufValueType::kArray ||
      (v.array_type != GgufValueType::kF32 && v.array_type != GgufValueType::kF64)) {
    wrong_type(source_, key, "an array of floats", v);
  }
  std::vector<double> out;
  out.reserve(v.array.size());
  for (const auto& item : v.array) out.push_back(item.f64);
  return out;
}

std::optional<std::uint32_t> GgufFile::find_u32(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_u32(key);
}

std::optional<float> GgufFile::find_f32(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_f32(key);
}

std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_bool(key);
}

std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

bool GgufFile::has_tensor(std::string_view name) const {
  return tensor_index_.count(std::string(name)) != 0;
}

const GgufTensorInfo& GgufFile::tensor_info(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) {
    fail<FormatError>("{}: GGUF file has no tensor '{}'", source_, name);
  }
  return tensors_[it->second];
}

std::span<const std::uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& info) const {
  return bytes_.subspan(data_offset_ + info.offset, info.nbytes);
}

}  // namespace kvq::io
