// The one generation loop (kvq/runtime/generator.h) on the tiny GQA Llama: greedy tokens equal
// transformers' golden decode, batching never changes a greedy result, stops (ids, callback,
// length) end where they should, and bad requests fail before any work.
#include <gtest/gtest.h>

#include <vector>

#include "kvq/core/error.h"
#include "kvq/io/safetensors.h"
#include "kvq/runtime/generator.h"
#include "support/test_paths.h"

namespace kvq::runtime {
namespace {

std::filesystem::path tiny_dir() { return test::test_data_dir() / "tiny_llama" / "gqa"; }

std::vector<std::int32_t> ids_of(const Tensor& t) {
  std::vector<std::int32_t> out;
  for (float v : t.to_f32_vector()) out.push_back(static_cast<std::int32_t>(v));
  return out;
}

GenerationRequest request(std::vector<std::int32_t> prompt, std::int64_t max_new_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  return r;
}

TEST(Generator, GreedyMatchesTheTransformersGoldenTokensAndStreams) {
  auto model = model::CausalLM::load(tiny_dir());
  const io::SafetensorsFile golden = io::SafetensorsFile::open(tiny_dir() / "golden.safetensors");
  const std::vector<std::int32_t> prompt = ids_of(golden.tensor("prompt0.input_ids"));
  const std::vector<std::int32_t> want = ids_of(golden.tensor("prompt0.decode_tokens"));
  const GenerationRequest r = request(prompt, static_cast<std::int64_t>(want.size()));
  std::vector<std::int32_t> streamed;
  Generation got;
  generate(
      *model, std::span(&r, 1), {}, [&](std::size_t, std::int32_t t) { streamed.push_back(t); },
      [&](std::size_t i, Generation g) {
        EXPECT_EQ(i, 0u);
        got = std::move(g);
      });
  EXPECT_EQ(got.tokens, want);
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(got.stop, StopReason::kLength);
  EXPECT_EQ(got.prompt_tokens, static_cast<std::int64_t>(prompt.size()));
  EXPECT_EQ(got.decode_steps, static_cast<std::int64_t>(want.size()) - 1);

  // A stop id ends the generation after it (it is kept); so does the callback; 0 tokens: none.
  GenerationRequest eos = r;
  eos.stop_ids = {want[2]};
  Generation g = generate(*model, std::span(&eos, 1)).front();
  EXPECT_EQ(g.tokens, std::vector<std::int32_t>(want.begin(), want.begin() + 3));
  EXPECT_EQ(g.stop, StopReason::kStopId);
  GenerationRequest cb = r;
  cb.stop_after = [](std::span<const std::int32_t> generated) { return generated.size() == 2; };
  g = generate(*model, std::span(&cb, 1)).front();
  EXPECT_EQ(g.tokens.size(), 2u);
  EXPECT_EQ(g.stop, StopReason::kStopped);
  EXPECT_EQ(stop_reason_name(g.stop), "stop");
  const GenerationRequest none = request(prompt, 0);
  EXPECT_TRUE(generate(*model, std::span(&none, 1)).front().tokens.empty());
}

// Sequences of different lengths in flight together, slots refilled as they finish: each gets
// exactly the tokens it gets alone (greedy), with a packed int8 cache too.
TEST(Generator, BatchingNeverChangesAGreedyResult) {
  auto model = model::CausalLM::load(tiny_dir());
  std::vector<GenerationRequest> requests = {request({5, 17, 200, 3}, 9), request({99, 42}, 4),
                                             request({7, 128, 64, 1, 250}, 12), request({33}, 6),
                                             request({11, 12, 13}, 1)};
  for (const model::KvCacheConfig& kv :
       {model::KvCacheConfig{}, model::KvCacheConfig::dynamic(quant::KvFormat::kINT8)}) {
    std::vector<Generation> alone;
    for (const GenerationRequest& r : requests) {
      alone.push_back(generate(*model, std::span(&r, 1), {kv, 1}).front());
    }
    for (std::int64_t batch : {2, 3, 8}) {
      const std::vector<Generation> together = generate(*model, requests, {kv, batch});
      ASSERT_EQ(together.size(), requests.size());
      for (std::size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(together[i].tokens, alone[i].tokens)
            << kv.label() << " batch " << batch << " #" << i;
        EXPECT_EQ(together[i].tokens.size(), static_cast<std::size_t>(requests[i].max_new_tokens));
      }
    }
  }
}

TEST(Generator, SampledGenerationIsReproducibleFromItsSeed) {
  auto model = model::CausalLM::load(tiny_dir());
  GenerationRequest r = request({5, 17, 200, 3}, 16);
  r.sampling = {.temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 7};
  const auto a = generate(*model, std::span(&r, 1)).front().tokens;
  EXPECT_EQ(generate(*model, std::span(&r, 1)).front().tokens, a);
  r.sampling.seed = 8;
  EXPECT_NE(generate(*model, std::span(&r, 1)).front().tokens, a);
}

TEST(Generator, BadRequestsFailBeforeAnyWork) {
  auto model = model::CausalLM::load(tiny_dir());
  std::vector<GenerationRequest> rs = {request({1, 2}, 4), request({}, 4)};
  int done = 0;
  const auto count = [&](std::size_t, Generation) { ++done; };
  EXPECT_THROW(generate(*model, rs, {}, {}, count), InvalidArgument);
  rs[1] = request({3}, -1);
  EXPECT_THROW(generate(*model, rs, {}, {}, count), InvalidArgument);
  rs[1] = request({3}, 1);
  EXPECT_THROW(generate(*model, rs, {model::KvCacheConfig{}, 0}, {}, count), InvalidArgument);
  EXPECT_EQ(done, 0);
}

}  // namespace
}  // namespace kvq::runtime
