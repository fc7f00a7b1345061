#!/usr/bin/env python3
"""GBNF grammars against the real `kestrel serve`: llama.cpp's json.gbnf,
arithmetic.gbnf, list.gbnf and c.gbnf, three requests each, rendered with
the model's chat template and sent to `/completion` with `grammar`; each text is checked by
scripts/gbnf_recognizer.py (an Earley recogniser written apart from
Kestrel's grammar code), and json.gbnf's texts also by json.loads.

  scripts/check-gbnf.py [--models smollm2 gemma3 qwen2] [--grammars DIR]
      [--seeds 1] [--n-predict 512] [--temperature 0.8] [--device gpu]
      [--kestrel BIN] [--allow-limit] [--self-test]

The grammars come from the llama.cpp peer's source (default
~/.cache/kestrel/llama.cpp/src/grammars, which scripts/build-llama-cpp.sh
unpacks); without them the script says so and exits 0. Before any
request the recogniser must agree with fixed examples for each grammar
(`--self-test` runs only that). A text that stopped by itself must match
the whole grammar; one cut by n_predict (stop_type "limit") is a failure
counted apart, with whether it was still a valid prefix. Prints pass/total
per model and grammar and every failure; exits 1 on any failure
(`--allow-limit`: on any but valid prefixes cut by n_predict).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gbnf_recognizer import Grammar, describe_failure  # noqa: E402
from serve_harness import Server, add_server_args, error_text  # noqa: E402

DEFAULT_DIR = os.path.expanduser("~/.cache/kestrel/llama.cpp/src/grammars")

# Three requests per grammar, each inviting text the grammar allows. They
# go through the model's chat template (/apply-template), so that the
# model ends its turn after an answer: given a bare prompt, these small
# models rarely choose end-of-text under a grammar that repeats (`item+`).
PROMPTS = {
    "json.gbnf": [
        "Describe a cat named Tom as a small JSON object.",
        "Give a user record (name, age, email) as JSON.",
        "Give the capital and population of France as a JSON object.",
    ],
    "arithmetic.gbnf": [
        "Write two simple equations, one per line, like x = 1+2.",
        "Write one equation with a variable, such as y = 3*4.",
        "Write the equation for the area of a 3 by 5 rectangle, as area = ...",
    ],
    "list.gbnf": [
        "List three things to take on a picnic, one per line starting with a dash.",
        "List three things to pack for a trip, as a dashed list.",
        "List the steps to make tea, as a short dashed list.",
    ],
    "c.gbnf": [
        "Write a C function that adds two integers.",
        "Write a C function computing a factorial.",
        "Write a C function returning the larger of two ints.",
    ],
}

# (text, expected status) pairs that fix what the recogniser must say
# before its verdicts on the server's texts are trusted.
SELF_TEST = {
    "json.gbnf": [
        ('{"a": [1, -2.5e3, "x\\n\\u00e9", true, null], "b": {}}\n', "full"),
        ('{"a" 1}', "fail"),
        ('{"a": 01}', "fail"),
        ("[1]", "fail"),
        ('{"a": [1, 2', "prefix"),
    ],
    "arithmetic.gbnf": [
        ("x = 1\n(a+b)*2= c\n", "full"),
        ("x = 1", "prefix"),
        ("X = 1\n", "fail"),
    ],
    "list.gbnf": [
        ("- milk\n- eggs\n", "full"),
        ("- milk\n\n", "fail"),
        ("-milk\n", "fail"),
    ],
    "c.gbnf": [
        ("", "full"),
        ("int add(int a){return a+1;}", "full"),
        ("int main(){int x = 3;while(x>0){x = x-1;}// done\n/* c */}", "full"),
        ("int f(int a){int b = (a);}", "fail"),  # parentheses need ws inside
        ("int f(int a){return (a);}", "full"),  # a call of `return`
        ("int main() {}", "fail"),
    ],
}


def load(directory):
    grammars = {}
    for name in PROMPTS:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            text = f.read()
        grammars[name] = (text, Grammar(text))
    return grammars


def self_test(grammars):
    wrong = []
    for name, cases in SELF_TEST.items():
        for text, want in cases:
            got = grammars[name][1].match(text)[0]
            if got != want:
                wrong.append(f"{name}: {text!r} gave {got}, expected {want}")
    return wrong


def judge(name, grammar, status, body):
    """(verdict, why, text): verdict "pass", "fail" or "limit"."""
    if status != 200:
        return "fail", f"HTTP {status}: {error_text(body)}", ""
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        return "fail", "malformed answer", str(body)[:300]
    text = body["content"]
    match, offset = grammar.match(text)
    if body.get("stop_type") == "limit":
        why = ("cut by n_predict; the text so far is a valid prefix" if match != "fail"
               else "cut by n_predict, and off the grammar " + describe_failure(text, offset))
        return ("limit" if match != "fail" else "fail"), why, text
    if match == "fail":
        return "fail", "off the grammar " + describe_failure(text, offset), text
    if match == "prefix":
        return "fail", f"stopped ({body.get('stop_type')}) before the grammar could end", text
    if name == "json.gbnf":
        try:
            json.loads(text)
        except ValueError as e:
            return "fail", f"the grammar accepts it but json.loads does not: {e}", text
    return "pass", "", text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--grammars", default=DEFAULT_DIR, help="directory of the .gbnf files")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per prompt (default 1)")
    ap.add_argument("--n-predict", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--allow-limit", action="store_true",
                    help="exit 0 when the only failures are texts cut by n_predict that were "
                         "still valid prefixes (the constraint held; the model did not stop)")
    ap.add_argument("--self-test", action="store_true", help="only check the recogniser")
    args = ap.parse_args()

    missing = [n for n in PROMPTS if not os.path.exists(os.path.join(args.grammars, n))]
    if missing:
        print(f"SKIPPED: {', '.join(missing)} not in {args.grammars} "
              "(scripts/build-llama-cpp.sh fetches llama.cpp's source; or pass --grammars)")
        return 0
    grammars = load(args.grammars)
    wrong = self_test(grammars)
    if wrong:
        print("the recogniser disagrees with its own examples:\n  " + "\n  ".join(wrong))
        return 2
    n_cases = sum(len(c) for c in SELF_TEST.values())
    print(f"recogniser self-test: {n_cases}/{n_cases}")
    if args.self_test:
        return 0

    failed = False
    summary = []
    for model in args.models:
        print(f"== {model}", flush=True)
        server = Server(args, model)
        t0 = time.time()
        try:
            for name, prompts in PROMPTS.items():
                text_g, grammar = grammars[name]
                counts = {"pass": 0, "fail": 0, "limit": 0}
                for i, request in enumerate(prompts):
                    status, body = server.post("/apply-template", {
                        "messages": [{"role": "user", "content": request}]})
                    if status != 200 or not isinstance(body, dict) or "prompt" not in body:
                        sys.exit(f"/apply-template failed: HTTP {status}: {error_text(body)}")
                    prompt = body["prompt"]
                    for seed in range(1, args.seeds + 1):
                        status, body = server.post("/completion", {
                            "prompt": prompt, "grammar": text_g, "n_predict": args.n_predict,
                            "seed": seed, "temperature": args.temperature,
                            "cache_prompt": args.cache_prompt})
                        verdict, why, text = judge(name, grammar, status, body)
                        counts[verdict] += 1
                        if verdict != "pass":
                            shown = text if len(text) <= 400 else text[:400] + "…"
                            print(f"  {verdict.upper()} {name} prompt {i} seed {seed}: {why}")
                            if text:
                                print(f"       text: {shown!r}")
                total = sum(counts.values())
                line = f"{model} {name}: {counts['pass']}/{total} pass"
                if counts["limit"]:
                    line += f" ({counts['limit']} cut by n_predict)"
                print(line, flush=True)
                summary.append(line)
                failed |= counts["fail"] > 0 or (counts["limit"] > 0 and not args.allow_limit)
        finally:
            server.stop()
        print(f"  ({time.time() - t0:.0f} s)")
    print("\n== summary\n" + "\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
