#!/usr/bin/env python3
"""Prints why tests were skipped, from a CTest run: the names come from ctest's own output
("The following tests did not run: ... (Skipped)"), the reasons from Testing/Temporary/
LastTest.log (a GoogleTest skip message, or the last line a skipping program printed). Tests
with the same reason are grouped.

usage: skip_reasons.py CTEST_OUTPUT LAST_TEST_LOG
Python 3 standard library only.
"""

import re
import sys


def skipped_names(ctest_output):
    names = []
    for line in ctest_output.splitlines():
        m = re.match(r"\s*\d+ - (.+) \((Skipped|Not Run|Disabled)\)\s*$", line)
        if m:
            names.append(m.group(1))
    return names


def outputs(log):
    """{test name: its output text} from a LastTest.log."""
    found = {}
    for block in re.split(r"(?m)^(?=\d+/\d+ Testing: )", log):
        m = re.search(r"^\d+/\d+ Testing: (.+)$", block, re.M)
        out = re.search(r"Output:\n-{20,}\n(.*?)<end of output>", block, re.S)
        if m:
            found[m.group(1).strip()] = out.group(1) if out else ""
    return found


def reason(text):
    lines = [l.strip() for l in text.splitlines()]
    for i, l in enumerate(lines):
        if re.search(r":\d+: Skipped$", l):  # GoogleTest: the message follows
            msg = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("[  SKIPPED ]") or not nxt:
                    break
                msg.append(nxt)
            if msg:
                return " ".join(msg)
    meaningful = [l for l in lines if l and not l.startswith("[")]
    return meaningful[-1] if meaningful else "no reason printed"


def main():
    with open(sys.argv[1], errors="replace") as f:
        names = skipped_names(f.read())
    try:
        with open(sys.argv[2], errors="replace") as f:
            texts = outputs(f.read())
    except OSError:
        texts = {}
    groups = {}
    for n in names:
        groups.setdefault(reason(texts.get(n, "")), []).append(n)
    if not names:
        print("no test was skipped")
        return 0
    print("%d tests skipped:" % len(names))
    for why, tests in groups.items():
        shown = ", ".join(tests[:4]) + (", ..." if len(tests) > 4 else "")
        print("  %s\n      (%d: %s)" % (why, len(tests), shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
