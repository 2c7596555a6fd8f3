"""scripts/gpu-check.sh on a stand-in bundle (shell scripts in place of the binaries, in a copy of
the scripts it needs): every step is a row whatever happens; a binary missing from the bundle is
NOT BUILT and fails the check; exit 77 and GoogleTest runs whose tests all skipped are SKIP with
their reason; a failure is FAIL; the choice between carried and rebuilt binaries follows the
MANIFEST's glibc floor and says why; a rebuild that fails to configure, or is stopped at its time
limit, makes every C++ step NOT BUILT with that reason and fails the check (stand-in cmake, ninja
and nvcc on PATH). Runs in a few seconds: nothing is built."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

root = sys.argv[1]
library = sys.argv[2]  # a built libcachalot.so: the cost line is parsed with it
failures = []

COST_LINE = ("cost-model config: " + ",".join(
    f"{k}:1us+2us/GiB" for k in ["cost_segment_alloc", "cost_segment_free", "cost_range_reserve",
                                 "cost_range_release", "cost_chunk_create", "cost_chunk_map",
                                 "cost_chunk_access", "cost_chunk_unmap", "cost_chunk_release"])
             + ",cost_event_create:1us,cost_event_record:1us,cost_event_query:1us,"
             "cost_event_sync:1us,cost_stream_sync:1us,cost_device_sync:1us,cost_copy:1us+0ns/GiB")

GTEST_ALL_SKIPPED = """[==========] Running 1 test from 1 test suite.
[ RUN      ] Gpu.Works
/src/t.cpp:10: Skipped
no CUDA device: cudaErrorInsufficientDriver
[  SKIPPED ] Gpu.Works (0 ms)
[==========] 1 test from 1 test suite ran. (0 ms total)
[  PASSED  ] 0 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Gpu.Works
"""


def script(path, body):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def make_tree(tmp, glibc_floor="2.0"):
    os.makedirs(os.path.join(tmp, "scripts"))
    for name in ["gpu-check.sh", "gpu-kit.sh", "check_cost_line.py"]:
        shutil.copy(os.path.join(root, "scripts", name), os.path.join(tmp, "scripts", name))
    kit = subprocess.run(["bash", "-c", "source scripts/gpu-kit.sh; echo ${GPU_KIT_TARGETS[*]}"],
                         cwd=root, stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    bundle = os.path.join(tmp, "build-gpu")
    for t in kit:
        script(os.path.join(bundle, "bin", t), "echo \"$0 $*: ok\"\n")
    script(os.path.join(bundle, "bin", "cachalot_device_costs"), f"echo '| call |'\necho '{COST_LINE}'\n")
    script(os.path.join(bundle, "bin", "cachalot_cuda_backend_test"),
           "cat <<'EOF'\n" + GTEST_ALL_SKIPPED + "EOF\n")
    script(os.path.join(bundle, "bin", "inference_engine"), "echo 'no GPU: skipped'\nexit 77\n")
    script(os.path.join(bundle, "bin", "cachalot_bench"),
           "echo 'cachalot_bench: GPU baselines skipped: no CUDA device' >&2\n")
    script(os.path.join(bundle, "bin", "gpu_hotpath"),
           "[ \"$1\" = --probe ] && { echo 'probe: 0 device(s)'; exit 77; }\necho hot\n")
    for lib in ["lib/libcachalot.so", "fake/libcachalot_fakecuda.so"]:
        os.makedirs(os.path.dirname(os.path.join(bundle, lib)), exist_ok=True)
        open(os.path.join(bundle, lib), "w").close()
    shutil.copy(library, os.path.join(bundle, "lib", "libcachalot.so"))
    with open(os.path.join(bundle, "MANIFEST"), "w", encoding="utf-8") as f:
        f.write(f"commit: abc\nglibc_floor: {glibc_floor}\nglibcxx_floor: 3.4.0\n")
    for py in ["python/tests/gpu_check.py", "examples/pytorch_pluggable.py",
               "examples/cupy_allocator.py"]:
        os.makedirs(os.path.dirname(os.path.join(tmp, py)), exist_ok=True)
        with open(os.path.join(tmp, py), "w", encoding="utf-8") as f:
            f.write("import sys\nprint('skipped: torch is not installed')\nsys.exit(77)\n")
    return bundle


def run(tmp, *args, env=None):
    e = dict(os.environ, OUT=os.path.join(tmp, "out"))
    e.pop("GPU_CHECK_MODE", None)
    e.update(env or {})
    return subprocess.run(["bash", os.path.join(tmp, "scripts", "gpu-check.sh"), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
                          check=False)


def rows(tmp):
    with open(os.path.join(tmp, "out", "gpu-results-block.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = lines.index("| step | result | seconds | notes |") + 2
    out = {}
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out[cells[0]] = cells[1]
    return out


def expect(cond, what):
    if not cond:
        failures.append(what)


steps = subprocess.run(["bash", os.path.join(root, "scripts", "gpu-check.sh"), "--list"],
                       stdout=subprocess.PIPE, text=True, check=True).stdout.splitlines()
expect(len(steps) == 19, f"{len(steps)} steps listed")

# A complete bundle: every row PASS or SKIP with its reason, exit 0.
with tempfile.TemporaryDirectory() as tmp:
    make_tree(tmp)
    r = run(tmp, env={"GPU_CHECK_MODE": "carried"})
    expect(r.returncode == 0, f"complete bundle: exit {r.returncode}\n{r.stdout[-3000:]}")
    got = rows(tmp)
    expect(list(got) == steps, f"rows {list(got)} are not the steps")
    expect(got.get("CUDA backend and allocator") ==
           "SKIP (no CUDA device: cudaErrorInsufficientDriver)", f"gtest skip: {got}")
    expect(got.get("example: inference_engine") == "SKIP (no GPU: skipped)", f"77: {got}")
    expect(got.get("Python package: PyTorch (gpu_check.py torch)") ==
           "SKIP (skipped: torch is not installed)", f"python skip: {got}")
    expect(got.get(steps[-1]) == "SKIP (cachalot_bench: GPU baselines skipped: no CUDA device)",
           f"baselines: {got.get(steps[-1])}")
    expect(got.get("device cost model: driver call latencies") == "PASS", f"costs: {got}")
    expect(got.get("ABI of libcachalot.so") == "PASS", f"pass: {got}")
    block = open(os.path.join(tmp, "out", "gpu-results-block.md"), encoding="utf-8").read()
    expect("`" + COST_LINE + "`" in block, "the cost line is in the block")

    # One binary missing: its row says NOT BUILT, the check fails; the others still run.
    os.remove(os.path.join(tmp, "build-gpu", "bin", "c_shim"))
    r = run(tmp, env={"GPU_CHECK_MODE": "carried"})
    got = rows(tmp)
    expect(r.returncode == 1, f"missing binary: exit {r.returncode}")
    expect(got.get("example: c_shim", "").startswith("NOT BUILT (c_shim is not in "),
           f"missing binary row: {got.get('example: c_shim')}")
    expect(list(got) == steps, "every row is still there")

    # A failing binary: FAIL (rc 3).
    script(os.path.join(tmp, "build-gpu", "bin", "c_api_tests"), "echo broken\nexit 3\n")
    run(tmp, env={"GPU_CHECK_MODE": "carried"})
    expect(rows(tmp).get("C API suite") == "FAIL (rc 3)", f"failure: {rows(tmp).get('C API suite')}")

    # The budget used up: NOT RUN, and the check fails.
    r = run(tmp, env={"GPU_CHECK_MODE": "carried", "GPU_CHECK_BUDGET_S": "10"})
    expect(r.returncode == 1 and rows(tmp).get(steps[0], "").startswith("NOT RUN ("),
           f"budget: exit {r.returncode}, {rows(tmp).get(steps[0])}")

# Carried or rebuilt, from the glibc floor.
with tempfile.TemporaryDirectory() as tmp:
    make_tree(tmp, glibc_floor="2.0")
    r = run(tmp, "--decide")
    expect("mode: carried, because glibc" in r.stdout and ">= floor 2.0" in r.stdout,
           f"old floor: {r.stdout}")
with tempfile.TemporaryDirectory() as tmp:
    make_tree(tmp, glibc_floor="99.1")
    r = run(tmp, "--decide")
    expect("mode: rebuild, because the carried binaries need glibc >= 99.1, this machine has 2."
           in r.stdout, f"new floor: {r.stdout}")
with tempfile.TemporaryDirectory() as tmp:
    bundle = make_tree(tmp)
    os.remove(os.path.join(bundle, "MANIFEST"))
    r = run(tmp, "--decide")
    expect("mode: rebuild, because no carried build-gpu/" in r.stdout, f"no bundle: {r.stdout}")

# A rebuild that cannot configure, then one stopped at its time limit (stand-in build tools).
KIT_TARGETS = subprocess.run(
    ["bash", "-c", "source scripts/gpu-kit.sh; echo ${GPU_KIT_TARGETS[*]} ${GPU_KIT_LIBRARIES[*]}"],
    cwd=root, stdout=subprocess.PIPE, text=True, check=True).stdout.split()


def rebuild_rows(tmp, cmake_body, ninja_body):
    tools = os.path.join(tmp, "tools-bin")
    script(os.path.join(tools, "cmake"), cmake_body)
    script(os.path.join(tools, "ninja"), ninja_body)
    script(os.path.join(tools, "nvcc"), "echo 'nvcc: stand-in fails' >&2\nexit 1\n")
    env = {"GPU_CHECK_MODE": "rebuild", "GPU_CHECK_REBUILD_S": "2",
           "PATH": tools + os.pathsep + os.environ["PATH"]}
    return run(tmp, env=env), rows(tmp)


C_STEPS = ["ABI of libcachalot.so", "core suite (incl. conformance)", "example: c_shim",
           "hot path vs cudaMalloc / cudaMallocAsync"]
with tempfile.TemporaryDirectory() as tmp:
    make_tree(tmp)
    r, got = rebuild_rows(
        tmp, "echo 'CMake Error at CMakeLists.txt:1 (project):'\necho '  no CUDA compiler'\n"
        "echo\nexit 1\n", "exit 1\n")
    expect(r.returncode == 1, f"failed configure: exit {r.returncode}")
    expect(list(got) == steps, "failed configure: every row is still there")
    for s in C_STEPS[:3]:
        expect(got.get(s, "").startswith("NOT BUILT (configure failed: CMake Error at"),
               f"failed configure, {s}: {got.get(s)}")
    expect(got.get(C_STEPS[3], "").startswith("NOT BUILT (nvcc could not build"),
           f"failed nvcc: {got.get(C_STEPS[3])}")
with tempfile.TemporaryDirectory() as tmp:
    make_tree(tmp)
    targets = "".join(f"echo '{t}: phony'\n" for t in KIT_TARGETS)
    r, got = rebuild_rows(
        tmp, "exit 0\n",
        f'case "$*" in *"-t targets"*) {targets} ;; *" -n "*) echo "[1/1] x" ;; '
        '*) sleep 30 ;; esac\n')
    expect(r.returncode == 1, f"stopped rebuild: exit {r.returncode}")
    for s in C_STEPS[:3]:
        expect(got.get(s, "").startswith("NOT BUILT (the rebuild was stopped at its time limit "
                                          "of 2 s"), f"stopped rebuild, {s}: {got.get(s)}")
    expect("Rebuilt on this machine in" in open(os.path.join(tmp, "out", "gpu-results-block.md"),
                                               encoding="utf-8").read(), "the rebuild is noted")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("gpu-check.sh: all cases as expected")
