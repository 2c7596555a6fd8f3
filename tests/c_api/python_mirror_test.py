"""The ctypes mirror of cachalot_stats used by the Python examples must match cachalot.h field
for field (a shorter mirror would let the library write past the Python object)."""
import os
import re
import sys

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "examples"))
import _cachalot_lib  # noqa: E402

header = open(os.path.join(root, "include", "cachalot", "cachalot.h")).read()
body = re.search(r"typedef struct cachalot_stats \{(.*?)\} cachalot_stats;", header, re.S).group(1)
c_fields = re.findall(r"uint64_t\s+(\w+);", body)
py_fields = [name for name, _ in _cachalot_lib.CachalotStats._fields_]
if c_fields != py_fields:
    print("mismatch:\n  cachalot.h: %s\n  python:     %s" % (c_fields, py_fields))
    sys.exit(1)
print("1 passed, 0 failed: %d fields match" % len(c_fields))
