#!/usr/bin/env bash
# Runs lm-eval-harness (lm-eval 0.4.x from the reference venv, tools/reference/make_venv.sh)
# against `kvq serve`: GSM8K as lm-eval's gsm8k task through local-chat-completions (the model's
# chat template, few-shot as multiturn, the reference PR's settings) and WikiText-2 word
# perplexity through local-completions (loglikelihood_rolling: echo + logprobs), both on the local
# data in ../shared/data. lm-eval tokenizes with the server's /tokenize (kvq's tokenizer).
#
#   tools/lm_eval_serve.sh MODEL_DIR [KV_CACHE] [LIMIT] [TASKS]
#     KV_CACHE  --kv-cache of the server (default auto)
#     LIMIT     documents per task (default: all)
#     TASKS     gsm8k_kvq,wikitext_kvq (default both)
# Results (lm-eval's JSON) go to lm_eval_out/<model>-<kv>/; the server's log beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: tools/lm_eval_serve.sh MODEL_DIR [KV_CACHE] [LIMIT] [TASKS]}"
kv="${2:-auto}"
limit="${3:-}"
tasks="${4:-gsm8k_kvq,wikitext_kvq}"
venv="${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}"
shared="$(cd ../shared/data && pwd)"
port="${KVQ_SERVE_PORT:-8123}"
name="$(basename "$model")"
out="lm_eval_out/${name}-${kv//[:+]/_}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT

# The task YAMLs with this machine's paths, lm-eval's wikitext helpers beside them, and the
# WikiText-2 test file as one JSON line per article.
for t in tools/lm_eval_tasks/*.yaml.in; do
  sed -e "s|@SHARED_DATA@|$shared|g" -e "s|@WORK@|$work|g" "$t" >"$work/$(basename "${t%.in}")"
done
echo 'from lm_eval.tasks.wikitext.preprocess_wikitext import *  # noqa: F401,F403' \
  >"$work/preprocess_wikitext.py"
python3 - "$shared/wikitext-2-raw/wiki.test.raw" "$work/wikitext_documents.jsonl" <<'PY'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
# A top-level heading " = Title = " (one '=' each side) starts an article.
starts = [m.start() for m in re.finditer(r"^ = [^=].* = \n", text, flags=re.M)]
docs = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"page": d}) + "\n")
print(f"wikitext: {len(docs)} articles", file=sys.stderr)
PY

build/kvq serve --model "$model" --kv-cache "$kv" --port "$port" --max-seqs 8 \
  --model-name "$name" 2>"$out/server.log" &
server=$!
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$out/server.log"; exit 1; }
  sleep 1
done

limit_args=()
[ -n "$limit" ] && limit_args=(--limit "$limit")
common=(--include_path "$work" --output_path "$out" --log_samples "${limit_args[@]}")
IFS=, read -r -a task_list <<<"$tasks"
for task in "${task_list[@]}"; do
  case "$task" in
    gsm8k_kvq)
      "$venv/bin/lm_eval" --model local-chat-completions \
        --model_args "model=$name,base_url=http://127.0.0.1:$port/v1/chat/completions,num_concurrent=8,max_retries=1,timeout=3600,tokenizer_backend=remote" \
        --tasks gsm8k_kvq --apply_chat_template --fewshot_as_multiturn --batch_size 1 \
        "${common[@]}" ;;
    wikitext_kvq)
      "$venv/bin/lm_eval" --model local-completions \
        --model_args "model=$name,base_url=http://127.0.0.1:$port/v1/completions,num_concurrent=8,max_retries=1,timeout=3600,tokenizer_backend=remote,max_length=2048" \
        --tasks wikitext_kvq --batch_size 1 "${common[@]}" ;;
    *) echo "unknown task $task" >&2; exit 2 ;;
  esac
done
echo "lm_eval_serve: results in $out/"
