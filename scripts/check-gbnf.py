#!/usr/bin/env python3
"""GBNF grammars against the real `kestrel serve`: llama.cpp's json.gbnf,
arithmetic.gbnf, list.gbnf and c.gbnf, three prompts each, sent to
`/completion` with `grammar`; each text is checked by
scripts/gbnf_recognizer.py (an Earley recogniser written apart from
Kestrel's grammar code), and json.gbnf's texts also by json.loads.

  scripts/check-gbnf.py [--models smollm2 gemma3 qwen2] [--grammars DIR]
      [--seeds 1] [--n-predict 512] [--temperature 0.8] [--device gpu]
      [--kestrel BIN] [--self-test]

The grammars come from the llama.cpp peer's source (default
~/.cache/kestrel/llama.cpp/src/grammars, which scripts/build-llama-cpp.sh
unpacks); without them the script says so and exits 0. Before any
request the recogniser must agree with fixed examples for each grammar
(`--self-test` runs only that). A text that stopped by itself must match
the whole grammar; one cut by n_predict (stop_type "limit") is a failure
counted apart, with whether it was still a valid prefix. Prints pass/total
per model and grammar and every failure; exits 1 on any failure.
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

# Three prompts per grammar, each inviting text the grammar allows.
PROMPTS = {
    "json.gbnf": [
        "A JSON object describing a cat named Tom:\n",
        "The user record, as JSON:\n",
        "Q: Give the capital and population of France as JSON.\nA: ",
    ],
    "arithmetic.gbnf": [
        "Some simple equations:\n",
        "Solve for the unknowns, one equation per line:\n",
        "Homework, written as equations:\n",
    ],
    "list.gbnf": [
        "Shopping list for a picnic:\n",
        "Three things to pack for a trip:\n",
        "Steps to make tea:\n",
    ],
    "c.gbnf": [
        "A C function that adds two integers:\n",
        "// A C function computing a factorial\n",
        "C code for the maximum of two numbers:\n",
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
                for i, prompt in enumerate(prompts):
                    for seed in range(1, args.seeds + 1):
                        status, body = server.post("/completion", {
                            "prompt": prompt, "grammar": text_g, "n_predict": args.n_predict,
                            "seed": seed, "temperature": args.temperature})
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
                failed |= counts["pass"] != total
        finally:
            server.stop()
        print(f"  ({time.time() - t0:.0f} s)")
    print("\n== summary\n" + "\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
