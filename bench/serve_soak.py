#!/usr/bin/env python3
"""Soak test for `kvq serve` (issue 19): many clients for minutes, valid and invalid traffic mixed.

Starts the server itself (so it can watch its memory and notice a crash), records the reference
answer of a few greedy prompts run one at a time, then lets --clients threads send requests for
--duration seconds, each picking at random:

  valid      non-streamed greedy completion of a reference prompt: text and token logprobs must
             equal the reference bit for bit (batched == alone, the server's promise)
  stream     the same streamed (chunks joined): the text must equal the reference
  chat       a non-streamed greedy chat completion: must equal its reference
  cancel     a streamed completion whose client hangs up after the first chunk
  malformed  a bad request (broken JSON, wrong types, out-of-range values, unknown fields,
             an oversized body): must get a 4xx with a JSON error body, never a 5xx

HTTP 429 (queue full) is counted and retried. The server's resident memory (VmRSS) is sampled
every --rss-every seconds; at the end SIGTERM must drain it and exit 0. Exit status 0 when there
was no crash, no wrong answer, no 5xx and RSS grew by at most --rss-tolerance from minute 1 to
the end.

  bench/serve_soak.py --kvq build/kvq --model ~/.cache/kvq/SmolLM2-135M-Instruct \\
      --kv-cache int8 --clients 32 --duration 300
"""
import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_load  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Water boils at 100 degrees Celsius at sea level because",
    "List three colours of the rainbow:",
    "Robert Boulter is an English film , television and theatre actor . He had a guest",
    "Question: Janet has 3 apples and buys 5 more. How many apples does she have?\nAnswer:",
    "In 1905, Albert Einstein published",
]
CHAT = [
    [{"role": "user", "content": "What is 12 times 7?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Name a planet."}],
]
MALFORMED = [
    ("/v1/completions", b"{not json"),
    ("/v1/completions", b'{"prompt": 42, "max_tokens": 8}'),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": -1}'),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 8, "temperature": "hot"}'),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 8, "frobnicate": true}'),
    ("/v1/completions", b'{"prompt": [1, 2, -7], "max_tokens": 8}'),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 100000000}'),
    ("/v1/chat/completions", b'{"messages": "hello"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user"}]}'),
    ("/v1/completions", b'{"prompt": "' + b"a" * (9 << 20) + b'"}'),
]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.problems = []

    def add(self, key, problem=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if problem and len(self.problems) < 20:
                self.problems.append(problem)


def post(port, path, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def completion(port, prompt, max_tokens):
    conn, r = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                             "temperature": 0, "logprobs": 1})
    body = r.read()
    conn.close()
    if r.status != 200:
        return r.status, None
    choice = json.loads(body)["choices"][0]
    return 200, (choice["text"], choice["logprobs"]["token_logprobs"])


def chat(port, messages, max_tokens):
    conn, r = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                                  "temperature": 0})
    body = r.read()
    conn.close()
    if r.status != 200:
        return r.status, None
    return 200, json.loads(body)["choices"][0]["message"]["content"]


def stream(port, prompt, max_tokens, hang_up):
    conn, r = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                             "temperature": 0, "stream": True})
    if r.status != 200:
        r.read()
        conn.close()
        return r.status, None
    text = []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        if line[6:] == "[DONE]":
            break
        chunk = json.loads(line[6:])
        if chunk.get("choices"):
            text.append(chunk["choices"][0].get("text", ""))
        if hang_up and text:
            conn.sock.close()  # the client goes away mid-stream
            conn.close()
            return 200, None
    conn.close()
    return 200, "".join(text)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kvq", default="build/kvq")
    p.add_argument("--model", required=True)
    p.add_argument("--kv-cache", default="int8")
    p.add_argument("--max-seqs", type=int, default=8)
    p.add_argument("--port", type=int, default=8131)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--duration", type=float, default=300)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--rss-every", type=float, default=5)
    p.add_argument("--rss-tolerance", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="write the summary as JSON to this file")
    args = p.parse_args()

    log = open(f"/tmp/kvq-soak-{args.port}.log", "w")
    server = subprocess.Popen(
        [args.kvq, "serve", "--model", args.model, "--kv-cache", args.kv_cache, "--max-seqs",
         str(args.max_seqs), "--port", str(args.port)], stdout=log, stderr=subprocess.STDOUT)
    serve_load.wait_healthy(server, args.port, log.name)
    # References: each prompt alone, nothing else running.
    ref = {i: completion(args.port, s, args.max_tokens)[1] for i, s in enumerate(PROMPTS)}
    ref_chat = {i: chat(args.port, m, args.max_tokens)[1] for i, m in enumerate(CHAT)}
    if None in ref.values() or None in ref_chat.values():
        sys.exit("serve_soak: a reference request failed")
    print(f"serve_soak: references recorded; {args.clients} clients for {args.duration:.0f} s",
          flush=True)

    stats = Stats()
    stop = time.monotonic() + args.duration
    kinds = ["valid"] * 4 + ["stream"] * 3 + ["chat"] * 2 + ["cancel"] * 2 + ["malformed"] * 2

    def client(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            kind = rng.choice(kinds)
            try:
                if kind == "malformed":
                    path, body = rng.choice(MALFORMED)
                    conn, r = post(args.port, path, body)
                    data = r.read()
                    conn.close()
                    ok = 400 <= r.status < 500 and r.status != 429
                    if ok:
                        ok = "error" in json.loads(data)
                    stats.add("malformed" if ok else "malformed_unexpected",
                              None if ok else f"{path} {body[:60]!r} -> {r.status} {data[:120]!r}")
                    continue
                i = rng.randrange(len(CHAT) if kind == "chat" else len(PROMPTS))
                if kind == "valid":
                    status, got = completion(args.port, PROMPTS[i], args.max_tokens)
                    want = ref[i]
                elif kind == "chat":
                    status, got = chat(args.port, CHAT[i], args.max_tokens)
                    want = ref_chat[i]
                else:
                    status, got = stream(args.port, PROMPTS[i], args.max_tokens,
                                         kind == "cancel")
                    want = None if kind == "cancel" else ref[i][0]
                if status == 429:
                    stats.add("429")
                    time.sleep(0.05)
                elif status != 200:
                    stats.add(f"{kind}_http_{status}", f"{kind} prompt {i} -> HTTP {status}")
                elif kind != "cancel" and got != want:
                    stats.add(f"{kind}_wrong", f"{kind} prompt {i}: {got!r} != {want!r}")
                else:
                    stats.add(kind)
            except (OSError, http.client.HTTPException, ValueError) as e:
                if server.poll() is not None:
                    return
                stats.add("client_error", f"{kind}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(args.seed * 1000 + i,))
               for i in range(args.clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    samples = []  # (seconds, VmRSS KiB)
    while any(t.is_alive() for t in threads) and server.poll() is None:
        samples.append((time.monotonic() - start, rss_kib(server.pid)))
        done = sum(v for k, v in stats.counts.items())
        print(f"  t={samples[-1][0]:5.0f}s rss={samples[-1][1] / 1024:7.1f} MiB "
              f"requests={done}", flush=True)
        time.sleep(args.rss_every)
    for t in threads:
        t.join()
    crashed = server.poll() is not None
    exit_code = None
    if not crashed:
        server.send_signal(signal.SIGTERM)
        try:
            exit_code = server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            exit_code = "hung on SIGTERM"
    else:
        exit_code = server.returncode
    after_1min = [kib for s, kib in samples if s >= 60] or [kib for _, kib in samples]
    rss_1 = after_1min[0] if after_1min else 0
    rss_end = samples[-1][1] if samples else 0
    growth = (rss_end - rss_1) / rss_1 if rss_1 else float("nan")
    bad = {k: v for k, v in stats.counts.items()
           if k.endswith("_wrong") or "_http_" in k or k.endswith("_unexpected")}
    summary = {"clients": args.clients, "duration_s": args.duration, "kv_cache": args.kv_cache,
               "max_seqs": args.max_seqs, "counts": stats.counts, "crashed": crashed,
               "exit_code": exit_code, "rss_mib_at_1min": rss_1 / 1024,
               "rss_mib_at_end": rss_end / 1024, "rss_growth": growth,
               "problems": stats.problems}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    ok = (not crashed and exit_code == 0 and not bad and growth <= args.rss_tolerance)
    print("serve_soak:", "PASS" if ok else "FAIL", f"(server log: {log.name})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
