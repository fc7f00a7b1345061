#!/usr/bin/env python3
"""Writes the tool-calling chat-template fixtures of kestrel-tokenizer.

Renders every conversation in crates/kestrel-tokenizer/tests/fixtures/tools/conversations.json
with Qwen2.5-Coder's template (tests/fixtures/chat/qwen2.5-coder.jinja, with its BOS/EOS texts)
and the `tools` list from the same file, using Python Jinja2 configured as Hugging Face
transformers configures it (sandboxed environment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, strftime_now, a json.dumps-based tojson).

transformers passes messages through as given; the conversations hold OpenAI-shaped tool calls
(arguments as JSON strings), so this script first turns each arguments string into the dict
that transformers' documentation uses, which is what Qwen's template (`arguments | tojson`)
expects. add_generation_prompt is True. Output: qwen2.5-coder.<conversation>.txt (exact bytes).

Needs only jinja2. Run from anywhere: python3 scripts/tool-template-fixture.py
"""
import json
import os
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "crates", "kestrel-tokenizer", "tests", "fixtures")
OUT = os.path.join(FIXTURES, "tools")


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def with_dict_arguments(message):
    message = dict(message)
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            call = dict(call, function=dict(call["function"]))
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
            calls.append(call)
        message["tool_calls"] = calls
    return message


def main():
    with open(os.path.join(OUT, "conversations.json"), encoding="utf-8") as f:
        data = json.load(f)
    with open(os.path.join(FIXTURES, "chat", "qwen2.5-coder.jinja"), encoding="utf-8", newline="") as f:
        template = hf_environment().from_string(f.read())
    with open(os.path.join(FIXTURES, "chat", "qwen2.5-coder.tokens.json"), encoding="utf-8") as f:
        tokens = json.load(f)
    for name, messages in data["conversations"].items():
        text = template.render(
            messages=[with_dict_arguments(m) for m in messages],
            tools=data["tools"],
            documents=None,
            add_generation_prompt=True,
            **tokens,
        )
        path = os.path.join(OUT, f"qwen2.5-coder.{name}.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        print(f"{os.path.relpath(path, ROOT)}: {len(text)} chars")


if __name__ == "__main__":
    main()
