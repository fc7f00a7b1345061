#!/usr/bin/env python3
"""Sums a `cargo test` log: the tests passed, failed and ignored over every
test binary, then each failed test and each failed target by name, so that
the end of a long run says what went wrong.

Usage: scripts/test-summary.py LOG [LABEL]"""
import re
import sys

log_path = sys.argv[1]
label = sys.argv[2] if len(sys.argv) > 2 else "tests"
passed = failed = ignored = 0
failed_tests, failed_targets = [], []
in_targets = False
running = None
with open(log_path, encoding="utf-8", errors="replace") as f:
    for line in f:
        line = line.rstrip("\n")
        m = re.match(r"\s*Running (\S+)", line)
        if m:
            running = m.group(1)
        m = re.match(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", line)
        if m:
            passed += int(m.group(1))
            failed += int(m.group(2))
            ignored += int(m.group(3))
        m = re.match(r"test (\S+) \.\.\. FAILED$", line)
        if m:
            failed_tests.append(f"{m.group(1)}  ({running or '?'})")
        if re.match(r"error: \d+ targets? failed:", line):
            in_targets = True
            continue
        if in_targets:
            if line.startswith("    "):
                failed_targets.append(line.strip())
            else:
                in_targets = False
        m = re.match(r"error: test failed, to rerun pass (.+)$", line)
        if m:
            failed_targets.append(m.group(1).strip("`"))

print()
print(f"== {label} ==")
for t in failed_tests:
    print(f"FAILED test {t}")
for t in dict.fromkeys(failed_targets):
    print(f"FAILED target {t}")
print(f"{label}: {passed} passed, {failed} failed, {ignored} skipped")
