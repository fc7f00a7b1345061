#!/usr/bin/env python3
"""Structured output against the real `kestrel serve`: every schema of
tests/structured/schemas/ is sent, with a few seeds, as a chat request
with `response_format: {"type": "json_schema", ...}`, and each answer is
parsed and validated with the `jsonschema` package (Draft 2020-12).

  scripts/check-structured.py [--models smollm2 gemma3 qwen2] [--seeds 5]
      [--subset K] [--temperature 0.8] [--max-tokens 400] [--json-object]
      [--device gpu] [--kestrel BIN]

Each model gets its own server. An answer counts as valid only when it
ended by itself (finish_reason "stop"), parses as JSON and satisfies its
schema; an answer cut by max_tokens is invalid and reported with its
finish_reason. `--subset K` runs the first K schemas with 2 seeds (for CI);
`--json-object` adds requests in `{"type": "json_object"}` mode, whose
answers must be JSON objects. Prints valid/total per model and every
failure (schema, seed, why, text); exits 1 when any answer was invalid.
Needs `pip install jsonschema`.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import ROOT, Server, add_server_args, error_text  # noqa: E402

try:
    import jsonschema
except ImportError:
    sys.exit("check-structured.py needs the jsonschema package: pip install jsonschema")

SCHEMA_DIR = os.path.join(ROOT, "tests", "structured", "schemas")
JSON_OBJECT_PROMPTS = [
    "Describe your favourite book as a small JSON object.",
    "Give the settings of a video game's audio menu as a JSON object.",
    "Write a JSON object describing a houseplant and how to water it.",
]


def load_schemas(directory, subset):
    paths = sorted(glob.glob(os.path.join(directory, "*.json")))
    if not paths:
        sys.exit(f"no schemas in {directory}")
    cases = []
    for p in paths[:subset] if subset else paths:
        with open(p, encoding="utf-8") as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        name = os.path.splitext(os.path.basename(p))[0]
        cases.append((name, schema))
    return cases


def user_message(schema):
    # The description says what object is wanted; the constraint, not the
    # prompt, is what must keep the answer to the schema.
    return f"{schema['description']} Answer with the JSON object only."


class Outcome:
    def __init__(self, case, seed, ok, why="", text="", tokens=0):
        self.case, self.seed, self.ok, self.why = case, seed, ok, why
        self.text, self.tokens = text, tokens


def judge(status, body, validator):
    """(ok, why, text, completion tokens) for one chat answer."""
    if status != 200:
        return False, f"HTTP {status}: {error_text(body)}", "", 0
    try:
        choice = body["choices"][0]
        text = choice["message"]["content"] or ""
        finish = choice["finish_reason"]
        tokens = body.get("usage", {}).get("completion_tokens", 0)
    except (KeyError, IndexError, TypeError):
        return False, "malformed answer", json.dumps(body)[:300], 0
    if finish != "stop":
        why = f"finish_reason {finish!r}"
        # The usual way a constrained answer overruns: the schema's grammar
        # lets whitespace go on, and a small model takes it.
        tail = len(text) - len(text.rstrip())
        if tail >= 20:
            why += f", ending in {tail} whitespace characters"
        return False, why, text, tokens
    try:
        value = json.loads(text)
    except ValueError as e:
        return False, f"not JSON: {e}", text, tokens
    if validator is None:
        if not isinstance(value, dict):
            return False, f"not an object but {type(value).__name__}", text, tokens
        return True, "", text, tokens
    err = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        return False, f"schema violation at {where}: {err.message}", text, tokens
    return True, "", text, tokens


def run_one(server, args, name, schema, seed):
    if schema is None:
        body = {"messages": [{"role": "user", "content": name}],
                "response_format": {"type": "json_object"}}
        validator = None
    else:
        body = {"messages": [{"role": "user", "content": user_message(schema)}],
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": name.split("_", 1)[-1], "schema": schema, "strict": True}}}
        validator = jsonschema.Draft202012Validator(schema)
    body.update({"seed": seed, "temperature": args.temperature, "max_tokens": args.max_tokens,
                 "cache_prompt": args.cache_prompt})
    status, answer = server.post("/v1/chat/completions", body)
    ok, why, text, tokens = judge(status, answer, validator)
    label = name if schema is not None else "json_object: " + name
    return Outcome(label, seed, ok, why, text, tokens)


def check_model(args, model, cases, seeds):
    server = Server(args, model)
    jobs = [(name, schema, seed) for name, schema in cases for seed in seeds]
    if args.json_object:
        jobs += [(p, None, seed) for p in JSON_OBJECT_PROMPTS for seed in seeds]
    t0 = time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            outcomes = list(pool.map(lambda j: run_one(server, args, *j), jobs))
    finally:
        server.stop()
    return outcomes, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--schemas", default=SCHEMA_DIR, help="directory of *.json schemas")
    ap.add_argument("--subset", type=int, metavar="K",
                    help="only the first K schemas, and 2 seeds unless --seeds is given")
    ap.add_argument("--seeds", type=int, help="seeds per schema (default 5; 2 with --subset)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--json-object", action="store_true",
                    help="also send json_object requests (answers must be JSON objects)")
    ap.add_argument("--full-text", action="store_true", help="print failed texts uncut")
    args = ap.parse_args()

    cases = load_schemas(args.schemas, args.subset)
    n_seeds = args.seeds or (2 if args.subset else 5)
    seeds = list(range(1, n_seeds + 1))
    summary = []
    for model in args.models:
        print(f"== {model}: {len(cases)} schemas x {len(seeds)} seeds", flush=True)
        outcomes, secs = check_model(args, model, cases, seeds)
        bad = [o for o in outcomes if not o.ok]
        tokens = sum(o.tokens for o in outcomes)
        for o in bad:
            text = o.text if args.full_text or len(o.text) <= 400 else o.text[:400] + "…"
            print(f"  FAIL {o.case} seed {o.seed}: {o.why}")
            if o.text:
                print(f"       text: {text!r}")
        line = (f"{model}: {len(outcomes) - len(bad)}/{len(outcomes)} valid "
                f"({tokens} tokens generated, {secs:.0f} s)")
        print(line, flush=True)
        summary.append((line, bad))
    print("\n== summary")
    for line, _ in summary:
        print(line)
    sys.exit(1 if any(bad for _, bad in summary) else 0)


if __name__ == "__main__":
    main()
