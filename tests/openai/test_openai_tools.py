#!/usr/bin/env python3
"""Tool calls through the official `openai` package, against a `kestrel serve`
running Qwen2.5-Coder-0.5B-Instruct (its template writes Hermes `<tool_call>`
blocks); crates/kestrel-cli/tests/openai_client.rs starts the server and runs:

    python3 tests/openai/test_openai_tools.py --base-url http://127.0.0.1:8080/v1 --api-key KEY [--seeds 50]

Checks: `tool_choice: "required"` with a weather and a calculator tool gives a
valid call whose arguments validate against the function's schema, for every
seed; the streamed calls (id and name first, argument fragments after) equal
the non-streamed ones; `auto` never yields a malformed `tool_calls`; a second
turn with the tool's result is answered. Prints the counts; exits 1 on any
failure.
"""

import argparse
import json
import sys

try:
    import jsonschema
    import openai
except ImportError as e:
    req = __file__.rsplit("/", 1)[0] + "/requirements.txt"
    sys.exit(f"{e.name} is missing: python3 -m pip install -r {req}")

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CALC = {
    "type": "object",
    "properties": {"expression": {"type": "string"}},
    "required": ["expression"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "calculate", "description": "Evaluate an arithmetic expression.",
                                      "parameters": CALC}},
]
SCHEMAS = {"get_weather": WEATHER, "calculate": CALC}
QUESTIONS = ["What is the weather in Paris?", "How much is 12 * 7?", "Is it cold in Oslo today?",
             "What is 2 to the power of 10?"]


def validate_call(call):
    assert call.type == "function", call
    assert call.id, call
    name = call.function.name
    assert name in SCHEMAS, f"unknown function {name!r}"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[name])


def streamed_calls(stream):
    calls, finish = [], None
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            if d.index == len(calls):
                assert d.id and d.function.name, f"a call's first delta carries its id and name: {d}"
                calls.append({"id": d.id, "name": d.function.name, "arguments": ""})
            calls[d.index]["arguments"] += d.function.arguments or ""
    return calls, finish


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--seeds", type=int, default=50)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
    model = client.models.list().data[0].id
    failures = []

    def ask(q, seed, **kw):
        return client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}],
                                              tools=TOOLS, temperature=0.8, seed=seed, max_tokens=120, **kw)

    valid = 0
    for seed in range(args.seeds):
        q = QUESTIONS[seed % len(QUESTIONS)]
        try:
            r = ask(q, seed, tool_choice="required")
            c = r.choices[0]
            assert c.finish_reason == "tool_calls", f"finish_reason {c.finish_reason}"
            assert c.message.tool_calls, "no tool_calls"
            for call in c.message.tool_calls:
                validate_call(call)
            if seed < 10:
                calls, finish = streamed_calls(ask(q, seed, tool_choice="required", stream=True))
                whole = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                         for t in c.message.tool_calls]
                assert calls == whole, f"streamed {calls} != whole {whole}"
                assert finish == "tool_calls", finish
            valid += 1
        except Exception as e:  # count every seed
            failures.append(f"required seed {seed}: {e}")
    print(f"required: {valid} of {args.seeds} valid calls", flush=True)

    clean = 0
    n_auto = min(args.seeds, 12)
    for seed in range(n_auto):
        q = QUESTIONS[seed % len(QUESTIONS)] if seed % 3 else "Tell me a short joke."
        try:
            c = ask(q, seed, tool_choice="auto").choices[0]
            if c.message.tool_calls:
                assert c.finish_reason == "tool_calls", c.finish_reason
                for call in c.message.tool_calls:
                    validate_call(call)
            else:
                assert c.message.content is not None and c.finish_reason in ("stop", "length"), c
            clean += 1
        except Exception as e:
            failures.append(f"auto seed {seed}: {e}")
    print(f"auto: {clean} of {n_auto} answers well-formed", flush=True)

    try:
        r = ask("What is the weather in Paris?", 1, tool_choice="required")
        call = r.choices[0].message.tool_calls[0]
        history = [{"role": "user", "content": "What is the weather in Paris?"},
                   r.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21, "sky": "clear"}'}]
        second = client.chat.completions.create(model=model, messages=history, tools=TOOLS, max_tokens=60,
                                                temperature=0)
        assert second.choices[0].message.content, second
        print("second turn: answered", flush=True)
    except Exception as e:
        failures.append(f"second turn: {e}")

    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
