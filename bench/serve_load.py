#!/usr/bin/env python3
"""Load generator for `kvq serve` (or any OpenAI-compatible /v1/completions server); stdlib only.

For each client count N, N threads each send --requests streamed completions one after another
(a prompt of --prompt-tokens random token ids, --max-tokens new tokens with ignore_eos, greedy)
and the script reports, per N: output tokens/s over the wall time of the round, time to first
token (TTFT) and inter-token latency (ITL, the gaps between streamed chunks) at p50 / p99. With
--requests 1 it also reports the decode tokens/s while all N sequences were decoding at once
(the tokens streamed between the last request's first token and the first request's last one,
over that time): the continuous batch's decode throughput, without the prompts' prefill; give
--max-tokens room for the window (e.g. 512 with 16 clients of 1792-token prompts).

  build/kvq serve --model M --kv-cache int8 --max-seqs 16 --port 8000 &
  bench/serve_load.py --url http://127.0.0.1:8000 --clients 1,4,8,16 --prompt-tokens 512 \\
      --max-tokens 256 --json out.jsonl

With --chat QUESTIONS.jsonl the requests are chat completions of real questions instead (the
"question" field of each line, e.g. GSM8K test, in order, greedy, ending at the model's own end
of turn), and --max-tokens 0 leaves max_tokens out as chat clients usually do (the server then
allows up to the context): the load where a paged KV cache pays, since a sequence holds blocks
for what it generated, not for what it might.

  bench/serve_load.py --chat ../shared/data/gsm8k/test.jsonl --max-tokens 0 --clients 16

Timings mean something only on a quiet machine (check `uptime`; no build running).
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def wait_healthy(proc, port, log, timeout_s=300):
    """Waits until the server process `proc` answers GET /health on loopback `port`; exits the
    script naming `log` when it dies first or does not come up within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode} at start; log {log}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"server not healthy after {timeout_s} s; log {log}")


def one_request(url, prompt, max_tokens, model):
    """Streams one completion (a chat completion when `prompt` is a string: a question);
    returns (ttft_s, [itl_s...], completion_tokens, [perf_counter of each token]) or raises."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=600)
    chat = isinstance(prompt, str)
    body = {"temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body.update({"prompt": prompt, "ignore_eos": True})
    if max_tokens > 0:
        body["max_tokens"] = max_tokens
    if model:
        body["model"] = model
    start = time.perf_counter()
    path = "/v1/chat/completions" if chat else "/v1/completions"
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    first, last, gaps, tokens, usage_tokens, stamps = None, None, [], 0, None, []
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage_tokens = chunk["usage"]["completion_tokens"]
        choice = chunk["choices"][0] if chunk.get("choices") else {}
        if not (choice.get("text") or choice.get("delta", {}).get("content")):
            continue
        tokens += 1  # one token per chunk (kvq and llama-server stream token by token)
        now = time.perf_counter()
        stamps.append(now)
        if first is None:
            first = now - start
        else:
            gaps.append(now - last)
        last = now
    conn.close()
    if usage_tokens is not None:
        tokens = usage_tokens
    return first if first is not None else float("nan"), gaps, tokens, stamps


def full_batch_decode_tok_s(stamps):
    """Tokens/s streamed while every request was decoding: between the last first token and the
    first last token (None when that window is empty)."""
    if not stamps or any(not s for s in stamps):
        return None
    begin, end = max(s[0] for s in stamps), min(s[-1] for s in stamps)
    if end <= begin:
        return None
    return sum(1 for s in stamps for t in s if begin < t <= end) / (end - begin)


def run_round(args, clients, rng):
    n = clients * args.requests
    if args.chat:
        prompts = [args.questions[i % len(args.questions)] for i in range(n)]
    else:
        prompts = [[rng.randrange(100, args.vocab) for _ in range(args.prompt_tokens)]
                   for _ in range(n)]
    ttft, itl, tokens, errors, stamps = [], [], [0], [], []
    lock = threading.Lock()

    def client(i):
        for r in range(args.requests):
            try:
                t, gaps, n, st = one_request(args.url, prompts[i * args.requests + r],
                                             args.max_tokens, args.model)
            except Exception as e:  # a failed request is reported, the round goes on
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttft.append(t)
                itl.extend(gaps)
                tokens[0] += n
                stamps.append(st)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {"clients": clients, "requests": clients * args.requests, "errors": len(errors),
            "prompt_tokens": None if args.chat else args.prompt_tokens,
            "max_tokens": args.max_tokens or None, "chat": args.chat or None,
            "output_tokens": tokens[0], "wall_s": wall, "output_tok_s": tokens[0] / wall,
            "ttft_p50_s": percentile(ttft, 0.5), "ttft_p99_s": percentile(ttft, 0.99),
            "itl_p50_s": percentile(itl, 0.5), "itl_p99_s": percentile(itl, 0.99),
            "decode_tok_s": (full_batch_decode_tok_s(stamps)
                             if args.requests == 1 and not errors else None),
            "first_error": errors[0] if errors else None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="", help="the request's model name (default: none sent)")
    p.add_argument("--clients", default="1,4,8,16,32", help="comma-separated client counts")
    p.add_argument("--requests", type=int, default=2, help="requests per client per round")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=256, help="0: not sent (the server's default)")
    p.add_argument("--chat", default="", help="JSONL of questions: chat completions of these")
    p.add_argument("--vocab", type=int, default=49152, help="random prompt ids are below this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="append one JSON line per round to this file")
    args = p.parse_args()
    if args.chat:
        with open(args.chat) as f:
            args.questions = [json.loads(line)["question"] for line in f if line.strip()]
    rng = random.Random(args.seed)
    print(f"{'clients':>7} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} "
          f"{'ITL p99':>8} {'errors':>6} {'decode tok/s':>12}")
    for clients in [int(c) for c in args.clients.split(",")]:
        row = run_round(args, clients, rng)
        print(f"{clients:>7} {row['output_tok_s']:>10.1f} {row['ttft_p50_s']:>8.3f}s "
              f"{row['ttft_p99_s']:>8.3f}s {row['itl_p50_s'] * 1e3:>6.1f}ms "
              f"{row['itl_p99_s'] * 1e3:>6.1f}ms {row['errors']:>6} "
              f"{row['decode_tok_s'] or float('nan'):>12.1f}", flush=True)
        if row["first_error"]:
            print(f"  first error: {row['first_error']}", file=sys.stderr)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
