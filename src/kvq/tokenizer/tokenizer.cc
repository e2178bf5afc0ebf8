#include "kvq/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "kvq/core/error.h"
#include "kvq/core/strings.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"
#include "kvq/tokenizer/bpe.h"
#include "kvq/tokenizer/byte_level.h"
#include "kvq/tokenizer/pre_tokenizer.h"
#include "kvq/tokenizer/spm_bpe.h"
#include "kvq/tokenizer/unigram.h"

namespace kvq::tok {
namespace {

using nlohmann::json;

json parse_json(const std::filesystem::path& path) { return io::read_json_file(path); }

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit = text.find(from); hit != std::string_view::npos; hit = text.find(from, pos)) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_word_byte(char c) {
  auto u = static_cast<uint8_t>(c);
  return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' ||
         u >= 0x80;
}

// Adds the ids a (possibly nested) post-processor puts before and after the sequence.
void parse_post_processor(const json& spec, const std::string& where, std::vector<int32_t>& pre,
                          std::vector<int32_t>& post) {
  if (spec.is_null()) return;
  const std::string type = spec.at("type").get<std::string>();
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "Sequence") {
    for (const json& p : spec.at("processors")) parse_post_processor(p, where, pre, post);
    return;
  }
  if (type != "TemplateProcessing") {
    fail<NotSupported>(
        "{}: post_processor type '{}' not supported; supported: ByteLevel, TemplateProcessing, "
        "Sequence",
        where, type);
  }
  const json& specials = spec.at("special_tokens");
  bool seen_sequence = false;
  for (const json& item : spec.at("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    if (!specials.contains(name)) {
      fail<FormatError>("{}: TemplateProcessing uses undefined special token '{}'", where, name);
    }
    for (const json& id : specials.at(name).at("ids")) {
      (seen_sequence ? post : pre).push_back(id.get<int32_t>());
    }
  }
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j.at("content").get<std::string>();
  return "";
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  Tokenizer t;
  t.load_json(tokenizer_json);
  return t;
}

Tokenizer Tokenizer::from_dir(const std::filesystem::path& model_dir) {
  Tokenizer t;
  t.load_json(model_dir / "tokenizer.json");
  t.load_config(model_dir);
  return t;
}

void Tokenizer::load_json(const std::filesystem::path& path) {
  source_ = path.string();
  const std::string& where = source_;
  json j = parse_json(path);
  try {
    const json& model = j.at("model");
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE" && type != "Unigram" && type != kSpmBpeModelType) {
      fail<NotSupported>(
          "{}: model type {} not supported; supported: BPE (byte-level), Unigram, {} (kvq's "
          "SentencePiece BPE)",
          where, type, kSpmBpeModelType);
    }
    const bool spm = type == kSpmBpeModelType;
    const bool unigram = type == "Unigram";
    const bool scored_vocab = unigram || spm;  // vocab: [[token, score], ...] in id order
    if (!scored_vocab) {
      for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (model.contains(key) && !model[key].is_null()) {
          fail<NotSupported>("{}: BPE {} not supported (byte-level BPE only)", where, key);
        }
      }
      if (model.contains("dropout") && !model["dropout"].is_null() &&
          model["dropout"].get<double>() != 0.0) {
        fail<NotSupported>("{}: BPE dropout not supported", where);
      }
    }
    normalizer_ = Normalizer::from_json(j.value("normalizer", json()), where);
    pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()), where);
    if (!scored_vocab && !pre_tokenizer_->is_byte_level()) {
      fail<NotSupported>(
          "{}: pre_tokenizer has no ByteLevel step; supported: BPE (byte-level) tokenizers", where);
    }

    // Ids index tables sized by the largest one: an id of 2^31 - 1 would allocate gigabytes.
    constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 24;  // 64x the largest vocabularies
    const auto token_id = [&](const json& id, std::string_view token) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() >= kMaxTokenId)
        fail<FormatError>("{}: token '{}' has id {}, outside [0, {})", where, token, id.dump(),
                          kMaxTokenId);
      return static_cast<int32_t>(id.get<std::int64_t>());
    };
    std::unordered_map<std::string, int32_t> vocab;
    std::vector<std::pair<std::string, double>> scored;  // scored_vocab: (token, score) by id
    int32_t max_id = -1;
    if (scored_vocab) {
      const json& list = model.at("vocab");
      if (!list.is_array() || static_cast<std::int64_t>(list.size()) >= kMaxTokenId) {
        fail<FormatError>("{}: {} vocab is not a list of [token, score] under {} entries", where,
                          type, kMaxTokenId);
      }
      scored.reserve(list.size());
      vocab.reserve(list.size());
      for (const json& entry : list) {
        if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() ||
            !entry[1].is_number()) {
          fail<FormatError>("{}: {} vocab entry {} is not [token, score]", where, type,
                            scored.size());
        }
        scored.emplace_back(entry[0].get<std::string>(), entry[1].get<double>());
        vocab[scored.back().first] = static_cast<int32_t>(scored.size() - 1);  // last id wins
      }
      max_id = static_cast<int32_t>(scored.size()) - 1;
    } else {
      vocab.reserve(model.at("vocab").size());
      for (const auto& [token, id] : model.at("vocab").items()) {
        const int32_t i = token_id(id, token);
        vocab.emplace(token, i);
        max_id = std::max(max_id, i);
      }
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(model.value("merges", json::array()).size());
    for (const json& m : scored_vocab ? json::array() : model.value("merges", json::array())) {
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          fail<FormatError>("{}: merge '{}' is not two tokens separated by a space", where, s);
        }
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else {
        merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      }
    }

    std::vector<AddedToken> added;
    for (const json& a : j.value("added_tokens", json::array())) {
      AddedToken t{a.at("content").get<std::string>(),
                   token_id(a.at("id"), a.at("content").get<std::string>()),
                   a.value("special", false),
                   a.value("lstrip", false),
                   a.value("rstrip", false),
                   a.value("single_word", false)};
      if (t.content.empty() || t.id < 0) {
        fail<FormatError>("{}: added token with empty content or negative id", where);
      }
      if (a.value("normalized", false) && !normalizer_.empty()) {
        fail<NotSupported>(
            "{}: added token '{}' is normalized; kvq matches added tokens in the raw text only",
            where, t.content);
      }
      max_id = std::max(max_id, t.id);
      added.push_back(std::move(t));
    }

    BpeOptions options;  // byte_fallback is read for both models
    options.ignore_merges = model.value("ignore_merges", false);
    options.byte_fallback = model.value("byte_fallback", false);
    options.fuse_unk = model.value("fuse_unk", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      if (auto it = vocab.find(model["unk_token"].get<std::string>()); it != vocab.end()) {
        options.unk_id = it->second;
      }
    }

    // The tables below are sized by the largest id, so ids far past the number of tokens would
    // cost time and memory the file does not pay for (a 2 KB file with one id of 12 million took
    // 4.6 s under ASan: fuzz_tokenizer, 2026-12-06). Real vocabularies are dense (ids 0..N-1,
    // added tokens right after): allow twice the tokens given, plus slack.
    const std::int64_t given = static_cast<std::int64_t>(vocab.size() + added.size());
    if (max_id >= 2 * given + 1024) {
      fail<FormatError>(
          "{}: token id {} is far past the {} tokens the file defines (ids must be below {}; "
          "vocabularies are numbered from 0 without large gaps)",
          where, max_id, given, 2 * given + 1024);
    }
    id_to_token_.assign(static_cast<size_t>(max_id) + 1, std::string());
    special_.assign(id_to_token_.size(), 0);
    if (scored_vocab) {
      for (size_t id = 0; id < scored.size(); ++id) id_to_token_[id] = scored[id].first;
    } else {
      for (const auto& [token, id] : vocab) id_to_token_[static_cast<size_t>(id)] = token;
    }
    for (const AddedToken& a : added) {
      id_to_token_[static_cast<size_t>(a.id)] = a.content;
      special_[static_cast<size_t>(a.id)] = a.special ? 1 : 0;
    }
    token_to_id_ = vocab;
    for (const AddedToken& a : added) token_to_id_[a.content] = a.id;
    id_to_bytes_.resize(id_to_token_.size());
    for (size_t id = 0; id < id_to_token_.size(); ++id) {
      const std::string& tok = id_to_token_[id];
      if ((options.byte_fallback || spm) && tok.size() == 6 && tok.starts_with("<0x") &&
          tok[5] == '>' && std::isxdigit(static_cast<unsigned char>(tok[3])) &&
          std::isxdigit(static_cast<unsigned char>(tok[4]))) {
        id_to_bytes_[id] =
            std::string(1, static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16)));
      } else if (scored_vocab) {
        id_to_bytes_[id] = replace_all(tok, "\u2581", " ");  // Gemma's Replace decoder
      } else {
        id_to_bytes_[id] = byte_level_decode(tok);
      }
    }

    // Leftmost-longest matching tries the longest candidates first.
    std::stable_sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) {
      return a.content.size() > b.content.size();
    });
    added_ = std::move(added);
    for (uint32_t i = 0; i < added_.size(); ++i) {
      added_by_first_[static_cast<uint8_t>(added_[i].content[0])].push_back(i);
    }

    parse_post_processor(j.value("post_processor", json()), where, prefix_ids_, suffix_ids_);
    for (int32_t id : prefix_ids_) {
      if (id < 0 || id >= vocab_size()) {
        fail<FormatError>("{}: post_processor id {} out of range", where, id);
      }
    }
    if (scored_vocab) {
      std::optional<int32_t> unk_id;
      if (model.contains("unk_id") && !model["unk_id"].is_null()) {
        unk_id = token_id(model["unk_id"], "unk_id");
      }
      if (spm) {
        spm_ = std::make_unique<SpmBpe>(scored, unk_id, where);
      } else {
        unigram_ = std::make_unique<Unigram>(scored, unk_id, options.byte_fallback, where);
      }
    } else {
      bpe_ = std::make_unique<Bpe>(vocab, merges, options, where);
    }
  } catch (const json::exception& e) {
    fail<FormatError>("{}: unexpected tokenizer.json structure: {}", where, e.what());
  }
}

void Tokenizer::load_config(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  ChatSpecialTokens special;
  if (std::filesystem::exists(config_path)) {
    json c = parse_json(config_path);
    try {
      auto lookup = [&](const char* key) -> std::optional<int32_t> {
        if (!c.contains(key)) return std::nullopt;
        std::string content = token_content(c[key]);
        if (content.empty()) return std::nullopt;
        auto id = token_id(content);
        if (!id) {
          fail<FormatError>("{}: {} '{}' is not a token of tokenizer.json", config_path.string(),
                            key, content);
        }
        return id;
      };
      bos_id_ = lookup("bos_token");
      eos_id_ = lookup("eos_token");
      // The templates print the special tokens as text ({{ bos_token }}, {{ eos_token }}).
      if (c.contains("bos_token")) special.bos_token = token_content(c["bos_token"]);
      if (c.contains("eos_token")) special.eos_token = token_content(c["eos_token"]);
      if (c.contains("chat_template")) {
        const json& ct = c["chat_template"];
        if (ct.is_string()) {
          chat_template_text_ = ct.get<std::string>();
        } else if (ct.is_array()) {  // named templates: take "default"
          for (const json& named : ct) {
            if (named.value("name", std::string()) == "default") {
              chat_template_text_ = named.at("template").get<std::string>();
            }
          }
        }
      }
    } catch (const json::exception& e) {
      fail<FormatError>("{}: unexpected structure: {}", config_path.string(), e.what());
    }
  }
  const auto jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) chat_template_text_ = io::read_file(jinja_path);
  chat_template_ = ChatTemplate(chat_template_text_, std::move(special));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    fail<InvalidArgument>("tokenizer encode: text is not valid UTF-8 (byte offset {})", bad);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  size_t cursor = 0;  // start of the text not yet encoded
  if (!added_.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      const auto& candidates = added_by_first_[static_cast<uint8_t>(text[i])];
      if (candidates.empty()) continue;
      const AddedToken* hit = nullptr;
      for (uint32_t k : candidates) {
        const AddedToken& a = added_[k];
        if (text.compare(i, a.content.size(), a.content) != 0) continue;
        if (a.single_word) {
          size_t end = i + a.content.size();
          if ((i > 0 && is_word_byte(text[i - 1])) ||
              (end < text.size() && is_word_byte(text[end]))) {
            continue;
          }
        }
        hit = &a;
        break;
      }
      if (hit == nullptr) continue;
      size_t start = i, end = i + hit->content.size();
      if (hit->lstrip) {
        while (start > cursor && is_space(text[start - 1])) --start;
      }
      if (hit->rstrip) {
        while (end < text.size() && is_space(text[end])) ++end;
      }
      encode_plain(text.substr(cursor, start - cursor), ids);
      ids.push_back(hit->id);
      cursor = end;
      i = end - 1;
    }
  }
  encode_plain(text.substr(cursor), ids);
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  thread_local std::vector<Span> pieces, tmp;
  pieces.assign(1, Span{0, static_cast<uint32_t>(text.size())});
  if (text.size() > UINT32_MAX) fail<InvalidArgument>("tokenizer encode: text over 4 GiB");
  thread_local std::string normalized;
  if (!normalizer_.empty()) {
    normalized = normalizer_.normalize(text);
    text = normalized;
    if (text.size() > UINT32_MAX) fail<InvalidArgument>("tokenizer encode: text over 4 GiB");
    pieces.assign(1, Span{0, static_cast<uint32_t>(text.size())});
  }
  pre_tokenizer_->split(text, pieces, tmp);
  for (const Span& p : pieces) {
    if (p.end <= p.begin) continue;
    const std::string_view piece = text.substr(p.begin, p.end - p.begin);
    if (spm_) {
      spm_->encode(piece, out);
    } else if (unigram_) {
      unigram_->encode(piece, out);
    } else {
      bpe_->encode(piece, out);
    }
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      fail<InvalidArgument>("tokenizer decode: id {} out of range [0, {})", id, vocab_size());
    }
    if (skip_special && special_[static_cast<size_t>(id)]) continue;
    out += id_to_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    fail<InvalidArgument>("tokenizer token_to_piece: id {} out of range [0, {})", id, vocab_size());
  }
  return id_to_bytes_[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)] != 0;
}

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  return chat_template_.render(messages, add_generation_prompt);
}

}  // namespace kvq::tok
