#!/usr/bin/env python3
"""Writes tests/data/tokenizer/chat_template_goldens.json: each chat template of
tests/data/tokenizer/chat_templates/ rendered by transformers' own Jinja rendering
(transformers.utils.chat_template_utils.render_jinja_template, the function
apply_chat_template calls) for a fixed set of conversations.

Template variables are what apply_chat_template passes: messages, add_generation_prompt and the
tokenizer's special tokens (bos_token / eos_token as each model family's tokenizer_config.json
has them; a family without a bos token passes none). Two clocks are pinned so the goldens are
reproducible:
  - strftime_now (a global transformers defines as datetime.now().strftime) is replaced by the
    same function of the fixed moment NOW (a template variable shadows the global), used by
    Llama 3.2 ("%d %b %Y") and Mistral Small 3.2 ("%Y-%m-%d");
  - some Llama cases pass date_string, as apply_chat_template(..., date_string=...) does.
A case the template rejects (raise_exception, or an undefined messages[0]) records "error"
instead of "rendered": kvq must reject it too.

Usage: /root/.cache/kvq/refvenv/bin/python tools/reference/make_chat_template_goldens.py
"""

import json
from datetime import datetime
from pathlib import Path

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "data" / "tokenizer" / "chat_templates"
OUT = ROOT / "tests" / "data" / "tokenizer" / "chat_template_goldens.json"

NOW = datetime(2025, 3, 7, 12, 0, 0)

# file -> special tokens of the family's tokenizer (None: the tokenizer has none).
FAMILIES = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>"),
    "google-gemma-3-4b-it.jinja": ("<bos>", "<eos>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("<s>", "</s>"),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": (None, "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": (None, "<|im_end|>"),
}


def u(c):
    return {"role": "user", "content": c}


def a(c):
    return {"role": "assistant", "content": c}


def s(c):
    return {"role": "system", "content": c}


UNICODE = "\u3000\xa0 Grüße — 数学 🙂 naïve\nline two\t \n"
THINK = "<think>\nLet me add.\n12 + 30 = 42\n</think>\n\nThe answer is 42."

# (name, messages, add_generation_prompt, date_string or None)
CASES = [
    ("user_gen", [u("What is 12 + 30?")], True, None),
    ("user_nogen", [u("What is 12 + 30?")], False, None),
    ("system_user_gen", [s("You are a terse math tutor.\nUse digits."), u("Hi there")], True, None),
    ("multi_turn_gen", [u("Hi"), a("Hello! How can I help?"), u("Add 2 and 3.")], True, None),
    (
        "system_multi_turn_nogen",
        [s("Be brief."), u("Q1\nsecond line"), a("A1"), u("Q2"), a("  A2 with spaces  ")],
        False,
        None,
    ),
    ("unicode_whitespace", [s(UNICODE), u(UNICODE), a(UNICODE), u("  x  ")], True, None),
    ("date_string", [s("Sys"), u("What day is it?")], True, "15 Mar 2025"),
    ("think_history_gen", [u("12 + 30?"), a(THINK), u("And 1 + 1?")], True, None),
    ("think_last_nogen", [u("12 + 30?"), a(THINK)], False, None),
    ("plain_last_assistant_nogen", [u("12 + 30?"), a("42")], False, None),
    ("tool_response_text_user", [u("Q"), a("A"), u("<tool_response>r</tool_response>"), a("B")], False, None),
    ("empty_system", [s(""), u("Hi")], True, None),
    ("system_only_gen", [s("Only a system message.")], True, None),
    ("system_mid", [u("Hi"), s("Now be formal."), u("Hello")], True, None),
    ("user_user", [u("one"), u("two")], True, None),
    ("empty_conversation", [], True, None),
]


def main():
    cases = []
    for file, (bos, eos) in FAMILIES.items():
        template = (TEMPLATES / file).read_text(encoding="utf-8")
        for name, messages, gen, date_string in CASES:
            kwargs = {"strftime_now": lambda fmt: NOW.strftime(fmt)}
            if bos is not None:
                kwargs["bos_token"] = bos
            if eos is not None:
                kwargs["eos_token"] = eos
            if date_string is not None:
                kwargs["date_string"] = date_string
            case = {"template": file, "name": name, "messages": messages, "add_generation_prompt": gen}
            if date_string is not None:
                case["date_string"] = date_string
            try:
                rendered, _ = render_jinja_template(
                    conversations=[messages], chat_template=template, add_generation_prompt=gen, **kwargs
                )
                case["rendered"] = rendered[0]
            except (jinja2.exceptions.TemplateError, IndexError, TypeError) as e:
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
    out = {
        "generator": "tools/reference/make_chat_template_goldens.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now": NOW.strftime("%Y-%m-%d"),
        "special_tokens": {f: {"bos_token": b, "eos_token": e} for f, (b, e) in FAMILIES.items()},
        "cases": cases,
    }
    OUT.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in cases)
    print(f"{OUT}: {len(cases)} cases, {errors} rejected by their template")


if __name__ == "__main__":
    main()
