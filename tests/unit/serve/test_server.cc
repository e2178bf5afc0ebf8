// kvq serve end to end on the tiny model through a real HTTP client: every endpoint, streaming,
// echo + logprobs (lm-eval's loglikelihood), the answers of the one generation engine, batching
// exactness, bad input, the queue limit, a client that goes away, and draining.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "kvq/eval/perplexity.h"
#include "kvq/runtime/generator.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "serve_fixture.h"

namespace kvq::serve::test {
namespace {

using namespace std::chrono_literals;

json greedy(const std::string& prompt, int max_tokens) {
  return {{"model", "tiny"},
          {"prompt", prompt},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

// Slows every forward of the model down (a query hook that sleeps; a hook that changes nothing
// leaves the logits bit-identical), so a test can act while a sequence runs.
std::vector<model::ScopedHook> slow_down(model::CausalLM& llm,
                                         std::chrono::milliseconds per_layer) {
  std::vector<model::ScopedHook> hooks;
  for (model::AttentionModule* a : llm.attention_modules()) {
    hooks.emplace_back(
        a->register_query_hook([per_layer](model::AttentionModule&, model::StatesView) {
          std::this_thread::sleep_for(per_layer);
        }));
  }
  return hooks;
}

bool wait_for(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 10s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(Serve, HealthModelsAndMetrics) {
  TinyServer server;
  httplib::Client c = server.client();
  const auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  const auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  // 3 layers x 2 kv heads x 16 dims x (K, V) x 4 bytes of f32.
  EXPECT_EQ(server.metric("kvq_kv_bytes_per_token"), 3 * 2 * 16 * 2 * 4);
  EXPECT_EQ(server.metric("kvq_kv_block_tokens"), 16);
  EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 0);
  // A block: 16 positions of one layer's K and V.
  EXPECT_EQ(server.metric("kvq_kv_block_bytes"), 16 * 768 / 3);
  EXPECT_EQ(server.metric("kvq_kv_blocks_free"), (4 << 20) / (16 * 768 / 3));
  EXPECT_EQ(server.metric("kvq_preemptions_total"), 0);
  EXPECT_EQ(server.metric("kvq_running_sequences"), 0);
  EXPECT_EQ(server.metric("kvq_waiting_sequences"), 0);
}

// A port another server listens on is refused with a clear error (cpp-httplib's default
// SO_REUSEPORT let a second server bind it and take half of the requests).
TEST(Serve, ABusyPortIsRefused) {
  TinyServer first;
  ServerOptions options;
  options.model_name = "tiny";
  options.port = first.port();
  Server second(first.source(), options);
  try {
    second.bind();
    FAIL() << "a second server bound port " << first.port();
  } catch (const IoError& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
        std::string::npos)
        << e.what();
  }
}

// cpp-httplib's stop() is lost when it comes before its listen loop has started, and the loop
// then serves forever: a server shut down right after bind() (a SIGTERM at start-up, a short test)
// hung a CI run. shutdown() before, right after, and long after listen() starts: listen() returns.
TEST(Serve, ShutdownStopsListenWhateverTheOrder) {
  kvq::test::TempDir dir;
  kvq::test::write_tiny_chat_model(dir.path());
  runtime::ModelSource source = runtime::open_model_source(dir.path());
  for (int round = 0; round < 40; ++round) {
    ServerOptions options;
    options.model_name = "tiny";
    options.port = 0;
    options.scheduler.kv_cache_bytes = 1 << 20;
    Server server(source, options);
    server.bind();
    if (round == 0) server.shutdown();  // before listen() is even called
    std::promise<void> returned;
    std::thread listener([&] {
      server.listen();
      returned.set_value();
    });
    if (round == 1) std::this_thread::sleep_for(50ms);  // well after listen() started
    if (round != 0) server.shutdown();
    if (returned.get_future().wait_for(20s) != std::future_status::ready) {
      // The listener cannot be joined: report and leave instead of hanging the suite.
      std::fprintf(stderr, "FAILED: listen() still serving 20 s after shutdown() (round %d)\n",
                   round);
      std::_Exit(1);
    }
    listener.join();
  }
}

TEST(Serve, TokenizerEndpointsAreKvqsTokenizer) {
  TinyServer server;
  const tok::Tokenizer& tokenizer = *server.source().tokenizer;
  const auto [status, body] = server.post("/tokenize", {{"prompt", "Hello"}});
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["tokens"].get<std::vector<std::int32_t>>(), tokenizer.encode("Hello"));
  EXPECT_EQ(body["count"], 5);
  EXPECT_EQ(body["max_model_len"], 256);
  const auto [s2, chat] =
      server.post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_EQ(s2, 200);
  const std::vector<tok::ChatMessage> messages = {{"user", "Hi"}};
  EXPECT_EQ(chat["tokens"].get<std::vector<std::int32_t>>(),
            tokenizer.encode(tokenizer.apply_chat_template(messages, true)));
  const auto [s3, text] = server.post("/detokenize", {{"tokens", {72, 105}}});
  ASSERT_EQ(s3, 200);
  EXPECT_EQ(text["prompt"], "Hi");
  EXPECT_EQ(server.post("/detokenize", {{"tokens", {72, 999}}}).first, 400);
  EXPECT_EQ(server.post("/tokenize", {{"text", "x"}}).first, 400);
  httplib::Client c = server.client();
  const auto info = c.Get("/tokenizer_info");
  ASSERT_TRUE(info);
  const json i = json::parse(info->body);
  EXPECT_EQ(i["eos_token"], "<|im_end|>");
  EXPECT_NE(i["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
}

TEST(Serve, CompletionIsTheGeneratorsGreedyAnswer) {
  TinyServer server;
  const auto [status, body] = server.post("/v1/completions", greedy("Hello there", 12));
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  EXPECT_EQ(body["usage"]["total_tokens"], 23);

  // The same request through runtime::generate, the engine every command uses.
  runtime::GenerationRequest r;
  r.prompt = server.source().tokenizer->encode("Hello there");
  r.max_new_tokens = 12;
  const runtime::Generation g = runtime::generate(*server.source().model, std::span(&r, 1)).front();
  // The random model's bytes are not all UTF-8: compare as the server writes them (U+FFFD).
  EXPECT_EQ(body["choices"][0]["text"].dump(),
            serve::dump(json(server.source().tokenizer->decode(g.tokens))));
  EXPECT_EQ(server.metric("kvq_generation_tokens_total"), 12);
  EXPECT_EQ(server.metric("kvq_prompt_tokens_total"), 11);
}

TEST(Serve, EchoLogprobsAreThePromptsLoglikelihood) {
  TinyServer server;
  // lm-eval's local-completions loglikelihood request: token ids, echo, logprobs, 0 new tokens.
  const std::vector<std::int32_t> ids = {72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100};
  const json req = {{"model", "tiny"}, {"prompt", json::array({ids})},
                    {"max_tokens", 0}, {"echo", true},
                    {"logprobs", 1},   {"temperature", 0}};
  const auto [status, body] = server.post("/v1/completions", req);
  ASSERT_EQ(status, 200) << body.dump();
  const json& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(body["choices"][0]["text"], "Hello world");
  EXPECT_EQ(body["usage"]["completion_tokens"], 0);

  // Equal to -token_nll of one forward over the prompt, bit for bit (JSON doubles round-trip).
  model::CausalLM& llm = *server.source().model;
  model::KvCache cache = llm.make_cache(1, static_cast<std::int64_t>(ids.size()));
  const Tensor logits = llm.forward(ids, cache, model::LogitsMode::kAll);
  const auto vocab = static_cast<std::size_t>(llm.config().vocab_size);
  for (std::size_t i = 1; i < ids.size(); ++i) {
    const std::span<const float> row(logits.f32() + (i - 1) * vocab, vocab);
    EXPECT_EQ(lp["token_logprobs"][i].get<double>(), -eval::token_nll(row, ids[i])) << i;
    ASSERT_EQ(lp["top_logprobs"][i].size(), 1u);
    // The top alternative is at least as likely as the actual token.
    EXPECT_GE(lp["top_logprobs"][i].begin().value().get<double>(),
              lp["token_logprobs"][i].get<double>());
  }
  EXPECT_EQ(lp["text_offset"][1], 1);
}

TEST(Serve, ChatCompletionUsesTheChatTemplate) {
  TinyServer server;
  const json req = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                    {"max_tokens", 5},
                    {"temperature", 0},
                    {"logprobs", true},
                    {"top_logprobs", 2}};
  const auto [status, body] = server.post("/v1/chat/completions", req);
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  const std::vector<tok::ChatMessage> messages = {{"user", "Hi"}};
  const std::string rendered = server.source().tokenizer->apply_chat_template(messages, true);
  EXPECT_EQ(body["usage"]["prompt_tokens"], server.source().tokenizer->encode(rendered).size());
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
}

TEST(Serve, StreamingSendsTheSameTextAsOneResponse) {
  TinyServer server;
  const auto [status, whole] = server.post("/v1/completions", greedy("Stream me", 20));
  ASSERT_EQ(status, 200);
  json req = greedy("Stream me", 20);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  httplib::Client c = server.client();
  const auto res = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_events(res->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    text += chunk["choices"][0]["text"].get<std::string>();
    if (i + 3 == events.size()) {
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 20);

  // Chat: the first delta names the role.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"stream", true}};
  const auto chat_res = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(chat_res);
  const std::vector<std::string> chat_events = sse_events(chat_res->body);
  ASSERT_GE(chat_events.size(), 2u);
  EXPECT_EQ(json::parse(chat_events[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(chat_events[0])["object"], "chat.completion.chunk");
  EXPECT_EQ(chat_events.back(), "[DONE]");
}

TEST(Serve, StopStringsEndTheText) {
  TinyServer server;
  const tok::Tokenizer& tokenizer = *server.source().tokenizer;
  runtime::GenerationRequest r;
  r.prompt = tokenizer.encode("abc");
  r.max_new_tokens = 30;
  const std::vector<std::int32_t> tokens =
      runtime::generate(*server.source().model, std::span(&r, 1)).front().tokens;
  // The first token after the first that is one ASCII letter or digit not seen before: a stop
  // string the text reaches there first.
  std::size_t at = 1;
  std::string stop;
  for (; at < tokens.size(); ++at) {
    const std::string& piece = tokenizer.token_to_piece(tokens[at]);
    const std::vector<std::int32_t> before(tokens.begin(),
                                           tokens.begin() + static_cast<std::ptrdiff_t>(at));
    if (piece.size() == 1 && std::isalnum(static_cast<unsigned char>(piece[0])) &&
        tokenizer.decode(before).find(piece) == std::string::npos) {
      stop = piece;
      break;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no usable stop string in the greedy answer";
  json req = greedy("abc", 30);
  req["stop"] = {"never-generated", stop};
  const auto [status, cut] = server.post("/v1/completions", req);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  const std::vector<std::int32_t> kept(tokens.begin(),
                                       tokens.begin() + static_cast<std::ptrdiff_t>(at));
  EXPECT_EQ(cut["choices"][0]["text"].dump(), serve::dump(json(tokenizer.decode(kept))));
  EXPECT_EQ(cut["usage"]["completion_tokens"], at + 1);
}

// Alone and batched with others, a greedy request gets the same tokens and logprobs bit for
// bit: on the f32 cache with whole-prompt prefill, on a packed int8 cache (dynamic scales) with
// prompts prefilled in 4-token chunks interleaved with the others' decoding, and with a prompt's
// layers spread over several steps (prefill_step_ms 1 on a model slowed to 1 ms per layer).
struct BatchingCase {
  const char* name;
  const char* kv_cache;
  std::int64_t prefill_chunk;
  std::int64_t prefill_step_ms;
  bool slowed;
};
class ServeBatching : public ::testing::TestWithParam<BatchingCase> {};

TEST_P(ServeBatching, BatchedRequestsGiveBitIdenticalTokensAndLogprobs) {
  ServerOptions options;
  options.scheduler.kv_cache = runtime::resolve_kv_cache(GetParam().kv_cache, nullptr, "tiny");
  options.scheduler.prefill_chunk = GetParam().prefill_chunk;
  options.scheduler.prefill_step_ms = GetParam().prefill_step_ms;
  TinyServer server(options);
  std::vector<model::ScopedHook> hooks;
  if (GetParam().slowed) hooks = slow_down(*server.source().model, 1ms);
  // (layer, tokens) of every query-hook call, in order: a prompt chunk's layers with a decode
  // step (1 token) between them show that its layers were spread over steps.
  std::mutex calls_mutex;
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  const auto layers = static_cast<std::int64_t>(server.source().model->attention_modules().size());
  for (std::int64_t l = 0; l < layers; ++l) {
    hooks.emplace_back(server.source().model->attention(l).register_query_hook(
        [&calls_mutex, &calls, l](model::AttentionModule&, model::StatesView q) {
          const std::lock_guard lock(calls_mutex);
          calls.emplace_back(l, q.tokens);
        }));
  }
  std::vector<json> requests;
  for (int i = 0; i < 6; ++i) {
    json r = greedy(std::string("prompt number ") + std::to_string(i * 37), 24 + 5 * i);
    r["logprobs"] = 3;
    requests.push_back(r);
  }
  std::vector<json> alone;
  for (const json& r : requests) {
    const auto [status, body] = server.post("/v1/completions", r);
    ASSERT_EQ(status, 200);
    alone.push_back(body["choices"][0]);
  }
  const double steps_alone = server.metric("kvq_decode_steps_total");
  // All at once: they join the running batch as they arrive.
  std::vector<std::future<std::pair<int, json>>> futures;
  for (const json& r : requests) {
    futures.push_back(
        std::async(std::launch::async, [&server, r] { return server.post("/v1/completions", r); }));
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto [status, body] = futures[i].get();
    ASSERT_EQ(status, 200);
    EXPECT_EQ(body["choices"][0], alone[i]) << "request " << i;
  }
  // They were batched: fewer decode steps than alone (one step serves several sequences).
  EXPECT_LT(server.metric("kvq_decode_steps_total") - steps_alone, steps_alone);
  if (GetParam().prefill_step_ms > 0 && GetParam().slowed) {
    bool spread = false;
    bool in_prompt = false, decoded_inside = false;
    for (const auto& [layer, tokens] : calls) {
      if (tokens > 1 && layer == 0) in_prompt = true, decoded_inside = false;
      if (tokens == 1 && in_prompt) decoded_inside = true;
      if (tokens > 1 && layer == layers - 1) {
        spread = spread || decoded_inside;
        in_prompt = false;
      }
    }
    EXPECT_TRUE(spread) << "no prompt's layers were interleaved with decode steps";
  }
}

INSTANTIATE_TEST_SUITE_P(KvCaches, ServeBatching,
                         ::testing::Values(BatchingCase{"f32", "f32", 256, 0, false},
                                           BatchingCase{"int8", "int8", 4, 0, false},
                                           BatchingCase{"int8LayerSlices", "int8", 256, 1, true}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Serve, BadRequestsGetOpenAIErrorsNamingTheField) {
  ServerOptions options;
  options.max_body_bytes = 64 << 10;
  TinyServer server(options);
  struct Case {
    std::string path, body;
    int status;
    json param;
  };
  const std::string long_prompt(300, 'x');
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, nullptr},
      {"/v1/completions", "[1, 2]", 400, nullptr},
      {"/v1/completions", R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": 5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": -1})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 1.5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "hi", "n": 2})", 400, "n"},
      {"/v1/completions", R"({"prompt": "hi", "logprobs": 99})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt": "hi", "stop": [1]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "hi", "frobnicate": true})", 400, "frobnicate"},
      {"/v1/completions", R"({"prompt": [1, 2, 999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "model": "gpt-4"})", 404, "model"},
      {"/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 255})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "stream": true, "prompt": ["a", "b"]})", 400,
       "prompt"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "echo": true})",
       400, "echo"},
      {"/v1/completions", std::string(70 << 10, ' '), 413, nullptr},
      {"/v1/nothing", "{}", 404, nullptr},
  };
  for (const Case& c : cases) {
    const auto [status, body] = server.post_text(c.path, c.body);
    EXPECT_EQ(status, c.status) << c.path << " " << c.body.substr(0, 80) << " -> " << body.dump();
    ASSERT_TRUE(body.contains("error")) << body.dump();
    EXPECT_EQ(body["error"]["param"], c.param) << c.body.substr(0, 80) << " -> " << body.dump();
    EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
  }
  // Still serving; /metrics counts the errors by route and status, unknown paths as "other".
  EXPECT_EQ(server.post("/v1/completions", greedy("ok", 2)).first, 200);
  httplib::Client c = server.client();
  const auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvq_http_requests_total{path=\"/v1/completions\",status=\"400\"}"),
            std::string::npos);
  EXPECT_NE(metrics->body.find("kvq_http_requests_total{path=\"other\",status=\"404\"} 1"),
            std::string::npos);
}

TEST(Serve, AFullQueueAnswers429AndARequestBeyondThePoolIsRefused) {
  ServerOptions options;
  options.scheduler.max_seqs = 1;
  options.scheduler.max_queue = 1;
  options.scheduler.kv_cache_bytes = 16 * 768 * 20;  // 20 blocks: 320 tokens
  TinyServer server(options);
  // Two prompts in one request cannot both wait in a queue of one.
  json two = greedy("x", 4);
  two["prompt"] = {"a", "b"};
  const auto [status, body] = server.post("/v1/completions", two);
  EXPECT_EQ(status, 429) << body.dump();
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(server.metric("kvq_sequences_rejected_total"), 1);

  // One running (slowed down), one waiting, the next one is refused.
  const auto hooks = slow_down(*server.source().model, 2ms);
  auto running = std::async(std::launch::async,
                            [&] { return server.post("/v1/completions", greedy("a", 100)); });
  ASSERT_TRUE(wait_for([&] { return server.metric("kvq_running_sequences") == 1; }));
  auto waiting = std::async(std::launch::async,
                            [&] { return server.post("/v1/completions", greedy("b", 4)); });
  ASSERT_TRUE(wait_for([&] { return server.metric("kvq_waiting_sequences") == 1; }));
  EXPECT_EQ(server.post("/v1/completions", greedy("c", 4)).first, 429);
  EXPECT_EQ(running.get().first, 200);
  EXPECT_EQ(waiting.get().first, 200);
  EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 0);
}

TEST(Serve, PromptsBeyondTheKvPoolAreRefusedUpFront) {
  ServerOptions options;
  options.scheduler.kv_cache_bytes = 16 * 768 * 4;  // 4 blocks: 64 tokens
  TinyServer server(options);
  const auto [status, body] = server.post("/v1/completions", greedy("x", 100));
  EXPECT_EQ(status, 400);
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_EQ(server.post("/v1/completions", greedy("x", 40)).first, 200);
}

// A sliding-window model's sequences hold the blocks their rings fill (model/kv_cache.h), not
// those of full-length layers: here mistral's window of 24 in a ring of 24 - 1 + 32 = 55 rows on
// both layers, 4 blocks of 16 each, so a 200-token sequence runs in a pool of 10 blocks (80
// positions per layer at full length) without a preemption.
TEST(Serve, SlidingWindowSequencesHoldTheirRingsBlocks) {
  ServerOptions options;
  options.scheduler.kv_cache.window_chunk = 32;
  options.scheduler.kv_cache_bytes = 16 * 512 * 5;  // 10 blocks of 16 positions of a layer
  TinyServer server(options, "mistral");
  EXPECT_EQ(server.metric("kvq_kv_blocks_free"), 10);
  const auto hooks = slow_down(*server.source().model, 2ms);
  auto running = std::async(std::launch::async,
                            [&] { return server.post("/v1/completions", greedy("a", 190)); });
  ASSERT_TRUE(wait_for([&] { return server.metric("kvq_generation_tokens_total") >= 100; }));
  EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 8);
  const auto [status, body] = running.get();
  EXPECT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["usage"]["completion_tokens"], 190);
  EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 0);
  EXPECT_EQ(server.metric("kvq_preemptions_total"), 0);
}

// Blocks are taken as sequences grow: a pool that holds one request's prompt + max_tokens but
// not six at once admits them all, and when it runs out the youngest is preempted (its blocks go
// back), prefilled again later, replays its tokens and finishes. Every request gets the tokens and
// logprobs it gets alone, bit for bit, and the pool ends empty.
// On the f32 cache, and on a packed int8 one with dynamic scales and 4-token prefill chunks (the
// scales are fixed by the first chunk again). With --preemption-mode recompute (vLLM's: prompt and
// tokens prefilled at once) the rebuilt rows equal the lost ones up to rounding: the tokens are
// still alone's on the tiny model, the logprobs within 1e-4.
struct PreemptionCase {
  const char* kv;
  std::int64_t chunk;
  PreemptionMode mode;
};
TEST(Serve, AFullPoolPreemptsTheYoungestAndEveryRequestFinishes) {
  for (const auto& [kv, chunk, mode] : {PreemptionCase{"f32", 256, PreemptionMode::kExact},
                                        PreemptionCase{"int8", 4, PreemptionMode::kExact},
                                        PreemptionCase{"f32", 256, PreemptionMode::kRecompute}}) {
    const bool exact = mode == PreemptionMode::kExact;
    SCOPED_TRACE(std::string(kv) + (exact ? " exact" : " recompute"));
    ServerOptions options;
    options.scheduler.kv_cache = runtime::resolve_kv_cache(kv, nullptr, "tiny");
    options.scheduler.prefill_chunk = chunk;
    options.scheduler.preemption = mode;
    // 8 blocks of 16 positions per layer: one request and a third.
    options.scheduler.kv_cache_bytes =
        24 * model::KvCache::block_bytes(3, 2, 16, options.scheduler.kv_cache, 16);
    TinyServer server(options);
    std::vector<json> requests;
    for (int i = 0; i < 6; ++i) {
      json r = greedy("request " + std::to_string(i), 100);  // 7 blocks per layer at the end
      r["logprobs"] = 1;
      requests.push_back(r);
    }
    std::vector<json> alone;
    for (const json& r : requests) {
      const auto [status, body] = server.post("/v1/completions", r);
      ASSERT_EQ(status, 200) << body.dump();
      alone.push_back(body["choices"][0]);
    }
    EXPECT_EQ(server.metric("kvq_preemptions_total"), 0);
    std::vector<std::future<std::pair<int, json>>> futures;
    for (const json& r : requests) {
      futures.push_back(std::async(std::launch::async,
                                   [&server, r] { return server.post("/v1/completions", r); }));
    }
    for (std::size_t i = 0; i < futures.size(); ++i) {
      const auto [status, body] = futures[i].get();
      ASSERT_EQ(status, 200) << body.dump();
      EXPECT_EQ(body["usage"]["completion_tokens"], 100) << i;
      if (exact) {
        EXPECT_EQ(body["choices"][0], alone[i]) << i;  // tokens and logprobs, bit for bit
        continue;
      }
      const json &got = body["choices"][0]["logprobs"], &want = alone[i]["logprobs"];
      EXPECT_EQ(got["tokens"], want["tokens"]) << i;
      for (std::size_t t = 0; t < want["token_logprobs"].size(); ++t) {
        ASSERT_NEAR(got["token_logprobs"][t].get<double>(), want["token_logprobs"][t].get<double>(),
                    1e-4)
            << i << " token " << t;
      }
    }
    EXPECT_GT(server.metric("kvq_preemptions_total"), 0);
    EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 0);
    EXPECT_EQ(server.metric("kvq_waiting_sequences"), 0);
    EXPECT_TRUE(wait_for([&] { return server.metric("kvq_running_sequences") == 0; }));
  }
}

TEST(Serve, AClientThatLeavesMidStreamFreesItsBlocks) {
  TinyServer server;
  const auto hooks = slow_down(*server.source().model, 2ms);
  json req = greedy("leave", 200);
  req["stream"] = true;
  httplib::Client c = server.client();
  int chunks = 0;
  httplib::Request post;
  post.method = "POST";
  post.path = "/v1/completions";
  post.body = req.dump();
  post.set_header("Content-Type", "application/json");
  post.content_receiver = [&](const char*, std::size_t, std::uint64_t, std::uint64_t) {
    return ++chunks < 3;  // hang up after 2 chunks
  };
  EXPECT_FALSE(c.send(post));
  EXPECT_TRUE(wait_for([&] { return server.metric("kvq_sequences_finished_total") == 1; }));
  EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 0);
  EXPECT_EQ(server.metric("kvq_running_sequences"), 0);
  EXPECT_LT(server.metric("kvq_generation_tokens_total"), 200);  // cancelled, not finished
}

// A client that gives up on a whole (non-streaming) answer: nothing was written to it, so the
// handler watches its socket and cancels the sequence when the peer closes it.
TEST(Serve, AClientThatGivesUpOnAWholeAnswerFreesItsBlocks) {
  TinyServer server;
  const auto hooks = slow_down(*server.source().model, 2ms);
  {
    httplib::Client c = server.client();
    c.set_read_timeout(std::chrono::milliseconds(300));
    EXPECT_FALSE(c.Post("/v1/completions", greedy("leave", 200).dump(), "application/json"));
  }  // the connection closes here
  EXPECT_TRUE(wait_for([&] { return server.metric("kvq_sequences_finished_total") == 1; }));
  EXPECT_EQ(server.metric("kvq_kv_blocks_used"), 0);
  EXPECT_LT(server.metric("kvq_generation_tokens_total"), 200);  // cancelled, not finished
  EXPECT_EQ(server.post("/v1/completions", greedy("next", 4)).first, 200);
}

TEST(Serve, ShutdownDrainsTheRunningRequests) {
  auto server = std::make_unique<TinyServer>();
  const auto hooks = slow_down(*server->source().model, 1ms);
  auto running = std::async(std::launch::async,
                            [&] { return server->post("/v1/completions", greedy("a", 60)); });
  ASSERT_TRUE(wait_for([&] { return server->metric("kvq_running_sequences") == 1; }));
  std::thread stopper([&] { server->server().shutdown(); });
  ASSERT_TRUE(wait_for([&] {
    httplib::Client c = server->client();
    const auto r = c.Get("/health");
    return r && r->status == 503;
  }));
  EXPECT_EQ(server->post("/v1/completions", greedy("late", 2)).first, 503);
  const auto [status, body] = running.get();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body["usage"]["completion_tokens"], 60);
  stopper.join();
}

}  // namespace
}  // namespace kvq::serve::test
