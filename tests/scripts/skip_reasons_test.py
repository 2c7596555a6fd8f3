"""scripts/skip_reasons.py finds each skipped test's reason in a CTest log: a GoogleTest skip
message, or the last line a program exiting 77 printed; tests with one reason are grouped."""
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
ctest_output = """\
The following tests did not run:
\t 12 - cuda.A.One (Skipped)
\t 13 - cuda.A.Two (Skipped)
\t 40 - example.py (Skipped)
"""
log = """\
Start testing: Nov 30 21:35 UTC
----------------------------------------------------------
12/50 Testing: cuda.A.One
Output:
----------------------------------------------------------
[ RUN      ] A.One
/src/t.cpp:10: Skipped
no CUDA device: cudaErrorNoDevice
[  SKIPPED ] A.One (0 ms)
<end of output>
----------------------------------------------------------

13/50 Testing: cuda.A.Two
Output:
----------------------------------------------------------
/src/t.cpp:20: Skipped
no CUDA device: cudaErrorNoDevice
[  SKIPPED ] A.Two (0 ms)
<end of output>
----------------------------------------------------------

40/50 Testing: example.py
Output:
----------------------------------------------------------
loading
skipped: torch is not installed
<end of output>
"""
with tempfile.TemporaryDirectory() as d:
    a, b = os.path.join(d, "out.txt"), os.path.join(d, "LastTest.log")
    open(a, "w").write(ctest_output)
    open(b, "w").write(log)
    out = subprocess.run([sys.executable, os.path.join(root, "scripts", "skip_reasons.py"), a, b],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
expected = ["3 tests skipped:", "  no CUDA device: cudaErrorNoDevice",
            "      (2: cuda.A.One, cuda.A.Two)", "  skipped: torch is not installed",
            "      (1: example.py)"]
if out.splitlines() != expected:
    print("got:\n%s\nwant:\n%s" % (out, "\n".join(expected)))
    sys.exit(1)
print("1 passed, 0 failed")
