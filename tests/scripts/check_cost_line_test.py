"""scripts/check_cost_line.py accepts the cost-model config line in the contract's syntax (every
key once, in order; durations with units; `<duration>+<duration>/GiB` for sized calls only) and
refuses each way of breaking it; with --library (argv[2], a built libcachalot.so) it also refuses a
well-formed line that cachalot's own config parser refuses (a duration above its one-hour limit).
Usage: check_cost_line_test.py ROOT LIBCACHALOT_SO"""
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
library = sys.argv[2]
checker = os.path.join(root, "scripts", "check_cost_line.py")
KEYS = ["cost_segment_alloc", "cost_segment_free", "cost_range_reserve", "cost_range_release",
        "cost_chunk_create", "cost_chunk_map", "cost_chunk_access", "cost_chunk_unmap",
        "cost_chunk_release", "cost_event_create", "cost_event_record", "cost_event_query",
        "cost_event_sync", "cost_stream_sync", "cost_device_sync", "cost_copy"]
SIZED = {"cost_segment_alloc", "cost_segment_free", "cost_range_reserve", "cost_range_release",
         "cost_chunk_create", "cost_chunk_map", "cost_chunk_access", "cost_chunk_unmap",
         "cost_chunk_release", "cost_copy"}


def line(values):
    return "cost-model config: " + ",".join(f"{k}:{values.get(k, '1.5us')}" for k in KEYS)


def check(text, options=()):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, checker, *options, f.name], stdout=subprocess.PIPE,
                              text=True, check=False)
    finally:
        os.unlink(f.name)


failures = []


def expect(ok, text, why, options=()):
    r = check(text, options)
    if (r.returncode == 0) != ok:
        failures.append(f"{why}: expected {'accept' if ok else 'refuse'}, got rc {r.returncode}: "
                        f"{r.stdout.strip()}")


good = {k: "25us+40us/GiB" for k in SIZED}
good.update({"cost_event_query": "0", "cost_stream_sync": "2s", "cost_device_sync": "800ns"})
expect(True, line(good), "the contract's example form")
expect(True, "noise\n| table |\n`" + line(good) + "`\n", "quoted in a results block")
expect(True, line({}), "plain durations everywhere")
expect(False, line(good) + "\n" + line(good), "two lines")
expect(False, "nothing here\n", "no line")
expect(False, line({"cost_event_record": "3us+1us/GiB"}), "a size part on a call without size")
expect(False, line({"cost_segment_alloc": "25"}), "a bare number other than 0")
expect(False, line({"cost_segment_alloc": "25 us"}), "a space")
expect(False, line({"cost_copy": "1us+2us"}), "a size part without /GiB")
expect(False, line({"cost_copy": "1e3ns"}), "an exponent")
expect(False, line(good).replace("cost_copy", "cost_copies"), "an unknown key")
expect(False, line(good).replace(",cost_copy:25us+40us/GiB", ""), "a missing key")
swapped = line(good).replace("cost_event_create", "X").replace("cost_event_record",
                                                                 "cost_event_create")
expect(False, swapped.replace("X", "cost_event_record"), "keys out of order")

# Through cachalot's parser: the good line is taken; two hours is well formed but above the limit.
with_lib = ("--library", library)
expect(True, line(good), "the contract's example form, parsed by cachalot", with_lib)
too_long = line(good).replace("cost_stream_sync:2s", "cost_stream_sync:7200s")
expect(True, too_long, "two hours is well formed")
expect(False, too_long, "two hours, refused by cachalot's parser", with_lib)
r = check(too_long, with_lib)
if "cost_stream_sync" not in r.stdout:
    failures.append(f"the parser's refusal should name the key: {r.stdout.strip()}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("check_cost_line: all cases as expected")
