#!/usr/bin/env python3
"""Checks the cost-model config line that cachalot_device_costs prints (and gpu-check.sh copies
into its results block) against the syntax the simulated device's cost model reads:

    cost-model config: cost_segment_alloc:25us+40us/GiB,cost_segment_free:...,...

Every key of the contract appears exactly once, in the contract's order, and nothing else; a
key is `cost_<call>`; a value is a duration (a number with a unit: ns, us, ms or s; decimals
allowed; a bare 0 allowed) and, for calls that take a size, may be `<duration>+<duration>/GiB`.

Usage: check_cost_line.py [--library LIB] FILE    (the tool's output, or a results block;
                                                   '-': stdin)
       check_cost_line.py [--library LIB] --run CMD ARGS  (runs CMD and checks what it prints;
                                                   exit 77 is passed through as a skip)
With --library (a libcachalot.so), the line must also be accepted by cachalot's own config
parser: an allocator on the simulated device is created with it through the C API.
Prints the line and exits 0 when it is well formed; prints what is wrong and exits 1.
"""
import ctypes
import re
import subprocess
import sys

PREFIX = "cost-model config: "
# (key, takes a size), in the contract's order.
KEYS = [
    ("cost_segment_alloc", True),
    ("cost_segment_free", True),
    ("cost_range_reserve", True),
    ("cost_range_release", True),
    ("cost_chunk_create", True),
    ("cost_chunk_map", True),
    ("cost_chunk_access", True),
    ("cost_chunk_unmap", True),
    ("cost_chunk_release", True),
    ("cost_event_create", False),
    ("cost_event_record", False),
    ("cost_event_query", False),
    ("cost_event_sync", False),
    ("cost_stream_sync", False),
    ("cost_device_sync", False),
    ("cost_copy", True),
]
DURATION = r"(?:0|[0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s))"
PLAIN = re.compile(rf"^{DURATION}$")
SIZED = re.compile(rf"^{DURATION}(?:\+{DURATION}/GiB)?$")


def problems(line):
    """What is wrong with the config line (without its prefix); empty when nothing is."""
    found = []
    items = line.split(",")
    names = [item.split(":", 1)[0] for item in items]
    expected = [k for k, _ in KEYS]
    if names != expected:
        missing = [k for k in expected if k not in names]
        extra = [n for n in names if n not in expected]
        found.append(f"keys {names} are not the contract's {expected}"
                     f" (missing {missing}, unknown {extra})")
    sized = dict(KEYS)
    for item in items:
        if ":" not in item:
            found.append(f"'{item}' has no ':'")
            continue
        key, value = item.split(":", 1)
        if key not in sized:
            continue
        pattern = SIZED if sized[key] else PLAIN
        if not pattern.match(value):
            kind = "<duration>[+<duration>/GiB]" if sized[key] else "<duration>"
            found.append(f"{key}: '{value}' is not {kind}")
    return found


def parser_problem(library, line):
    """What cachalot's config parser says of `line` (None when it accepts it)."""
    try:
        lib = ctypes.CDLL(library)
    except OSError as e:
        return f"cannot load {library}: {e}"
    lib.cachalot_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.cachalot_create.restype = ctypes.c_int
    lib.cachalot_destroy.argtypes = [ctypes.c_void_p]
    lib.cachalot_last_error.restype = ctypes.c_char_p
    handle = ctypes.c_void_p()
    conf = ("backend:simulated,capacity:1GiB," + line).encode()
    if lib.cachalot_create(conf, ctypes.byref(handle)) != 0:
        return (lib.cachalot_last_error() or b"").decode()
    lib.cachalot_destroy(handle)
    return None


def check_text(text, library=None):
    stripped = (l.strip().strip("`") for l in text.splitlines())  # a results block quotes it
    lines = [l[len(PREFIX):].strip() for l in stripped if l.startswith(PREFIX)]
    if len(lines) != 1:
        print(f"check_cost_line: expected one '{PREFIX}...' line, found {len(lines)}")
        return 1
    bad = problems(lines[0])
    if not bad and library:
        why = parser_problem(library, lines[0])
        if why is not None:
            bad.append(f"cachalot's config parser refuses it: {why}")
    for b in bad:
        print(f"check_cost_line: {b}")
    if not bad:
        print(f"check_cost_line: well formed: {lines[0]}")
    return 1 if bad else 0


def main(argv):
    library = None
    if len(argv) >= 3 and argv[1] == "--library":
        library = argv[2]
        argv = argv[:1] + argv[3:]
    if len(argv) >= 3 and argv[1] == "--run":
        proc = subprocess.run(argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False)
        sys.stdout.write(proc.stdout)
        if proc.returncode == 77:
            return 77
        if proc.returncode != 0:
            print(f"check_cost_line: {argv[2]} exited with {proc.returncode}")
            return 1
        return check_text(proc.stdout, library)
    if len(argv) != 2:
        print(__doc__)
        return 2
    text = sys.stdin.read() if argv[1] == "-" else open(argv[1], encoding="utf-8").read()
    return check_text(text, library)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
