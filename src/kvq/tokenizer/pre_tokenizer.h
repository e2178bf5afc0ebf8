// Pre-tokenizers of Hugging Face tokenizer.json ("pre_tokenizer"): they cut the text into
// pieces that BPE then encodes independently. Supported: ByteLevel (use_regex with the GPT-2
// regex, add_prefix_space=false), Digits, Split (Regex or String pattern; behaviors Removed,
// Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert) and Sequence of those.
//
// Pieces are byte ranges of the original text: without a normalizer nothing is rewritten, and
// the byte-level mapping is folded into the BPE vocabulary instead (see bpe.h).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvq::tok {

// One piece: [begin, end) in bytes of the text being pre-tokenized.
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` (ranges of `text`, in order) by their refinement.
  virtual void split(std::string_view text, std::vector<Span>& pieces,
                     std::vector<Span>& tmp) const = 0;
  // Whether this pre-tokenizer (or one in a sequence) is ByteLevel.
  virtual bool is_byte_level() const { return false; }
};

// Builds the pre-tokenizer described by `spec` (null -> whole text is one piece). `where`
// names the file in error messages. Throws NotSupported / FormatError.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 const std::string& where);

// The GPT-2 pre-tokenization regex used by ByteLevel(use_regex=true).
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace kvq::tok
