#!/usr/bin/env python3
"""Compiles every C and C++ code block of the given Markdown files, so that no recipe in the docs
can rot (CTest test docs_snippets).

A block is a fence whose info string starts with `c` or `cpp`. By default it must be a complete
translation unit. Words after the language mark the other kinds (docs/usage.md, "Code in these
docs", explains them to writers):

  fragment          statements: the block's #include lines are kept at file scope and the rest
                    (other preprocessor lines included) becomes the body of a function; nothing
                    else is added, so a missing include still fails.
  uses=a,b          names a fragment uses without defining them, from this table:
                      stream, other_stream   void*; cudaStream_t with needs=cuda, cccl or
                                             tensorrt
                      bytes                  std::size_t / size_t
                      alloc                  cachalot::allocator& (C++ only; declared, not
                                             defined: the block must include its header)
                      cfg                    const cachalot::config& (C++ only, likewise)
                      runtime                nvinfer1::IRuntime* (needs=tensorrt)
                      v                      thrust::device_vector<int>& (needs=cuda)
  needs=X           compiled only where X is available (cuda: nvcc and Thrust; cccl: the CCCL
                    headers; tensorrt: NvInfer.h); otherwise reported as skipped, with why.

C++ blocks compile as C++17 (the public headers' standard), C blocks as C99, with warnings shown
but not fatal. C fragments are also linked against libcachalot.so (complete C blocks, which
need not have a main, are compiled only). Exit status: 0 when every block
compiled or was skipped for a stated reason, 1 otherwise.

usage: check_doc_snippets.py --cxx CXX --cc CC --include DIR... --shared LIB
                             [--nvcc NVCC] [--cccl DIR] [--tensorrt DIR] FILE.md...
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\S*)(.*)$")

# name -> (C++ declaration, C declaration); FORWARD: what a C++ fragment gets before it.
PARAMS = {
    "stream": ("void* stream", "void* stream"),
    "other_stream": ("void* other_stream", "void* other_stream"),
    "bytes": ("std::size_t bytes", "size_t bytes"),
    "alloc": ("cachalot::allocator& alloc", None),
    "cfg": ("const cachalot::config& cfg", None),
    "runtime": ("nvinfer1::IRuntime* runtime", None),
    "v": ("thrust::device_vector<int>& v", None),
}
FORWARD = {
    "alloc": "namespace cachalot { class allocator; }",
    "cfg": "namespace cachalot { struct config; }",
    "runtime": "namespace nvinfer1 { class IRuntime; }",
    "v": "#include <thrust/device_vector.h>",
}


def blocks(path):
    """Yields (line, language, words, code) for each c/cpp fenced block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        lang, words, start = m.group(1), m.group(2).split(), i + 1
        j = start
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if lang in ("c", "cpp"):
            yield start, lang, words, "\n".join(lines[start:j])
        i = j + 1


def options(words):
    opts = {"fragment": False, "uses": [], "needs": None}
    for w in words:
        if w == "fragment":
            opts["fragment"] = True
        elif w.startswith("uses="):
            opts["uses"] = [u for u in w[5:].split(",") if u]
        elif w.startswith("needs="):
            opts["needs"] = w[6:]
        else:
            raise ValueError("unknown info-string word '%s'" % w)
    for u in opts["uses"]:
        if u not in PARAMS:
            raise ValueError("uses=%s: not one of %s" % (u, ", ".join(PARAMS)))
    if opts["uses"] and not opts["fragment"]:
        raise ValueError("uses= is for fragments")
    return opts


def wrap(lang, code, opts):
    """A translation unit for the block."""
    if not opts["fragment"]:
        return code + "\n"
    head, body = [], []
    for line in code.split("\n"):
        (head if line.lstrip().startswith("#include") else body).append(line)
    params = []
    device = opts["needs"] in ("cuda", "cccl", "tensorrt")
    for u in opts["uses"]:
        decl = PARAMS[u][0 if lang == "cpp" else 1]
        if decl is None:
            raise ValueError("uses=%s is C++ only" % u)
        if device and u in ("stream", "other_stream"):
            decl = "cudaStream_t " + u
            head.insert(0, "#include <cuda_runtime_api.h>")
        params.append(decl)
        if lang == "cpp" and u in FORWARD:
            head.append(FORWARD[u])
    pre = "#include <cstddef>\n" if lang == "cpp" else "#include <stddef.h>\n"
    sig = ", ".join(params) if params else "void"
    unused = "[[maybe_unused]] " if lang == "cpp" else ""
    return "%s%s\n%sstatic void doc_snippet(%s) {\n%s\n}\nint main(void) { return 0; }\n" % (
        pre, "\n".join(head), unused, sig, "\n".join(body))


def command(args, lang, opts, src, out):
    incs = ["-I" + d for d in args.include]
    needs = opts["needs"]
    if needs == "cuda":
        return [args.nvcc, "-std=c++17", "-x", "cu", "-c", src, "-o", out] + incs
    if lang == "c" and opts["fragment"]:
        return [args.cc, "-std=c99", "-Wall", "-Wextra", src, "-o", out, args.shared] + incs
    if lang == "c":
        return [args.cc, "-std=c99", "-Wall", "-Wextra", "-c", src, "-o", out] + incs
    cmd = [args.cxx, "-std=c++17", "-Wall", "-Wextra", "-fsyntax-only", src] + incs
    if needs == "cccl":
        cmd += ["-isystem", args.cccl] + ["-isystem" + d for d in args.cuda_include]
    if needs == "tensorrt":
        cmd += ["-isystem", args.tensorrt] + ["-isystem" + d for d in args.cuda_include]
    return cmd


def missing(args, needs):
    if needs is None:
        return None
    have = {"cuda": args.nvcc, "cccl": args.cccl, "tensorrt": args.tensorrt}
    if needs not in have:
        return "unknown needs=%s" % needs
    if not have[needs]:
        return {"cuda": "no nvcc", "cccl": "no CCCL headers (cuda/memory_resource)",
                "tensorrt": "no TensorRT headers (NvInfer.h)"}[needs]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--cuda-include", action="append", default=[])
    ap.add_argument("--shared", required=True)
    ap.add_argument("--nvcc", default="")
    ap.add_argument("--cccl", default="")
    ap.add_argument("--tensorrt", default="")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    passed, failed, skipped = 0, 0, []
    root = os.path.dirname(os.path.commonpath([os.path.abspath(f) for f in args.files]) + os.sep)
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            for line, lang, words, code in blocks(path):
                where = "%s:%d" % (os.path.relpath(os.path.abspath(path), root), line)
                try:
                    opts = options(words)
                    unit = wrap(lang, code, opts)
                except ValueError as e:
                    print("FAIL %s: %s" % (where, e))
                    failed += 1
                    continue
                why = missing(args, opts["needs"])
                if why:
                    skipped.append("%s (%s)" % (where, why))
                    continue
                src = os.path.join(tmp, "snippet%d.%s" % (passed + failed, "c" if lang == "c" else "cpp"))
                with open(src, "w") as f:
                    f.write(unit)
                cmd = command(args, lang, opts, src, os.path.join(tmp, "snippet.out"))
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode == 0:
                    passed += 1
                    print("ok   %s (%s%s)" % (where, lang, " fragment" if opts["fragment"] else ""))
                else:
                    failed += 1
                    print("FAIL %s: %s\n%s\n--- as compiled:\n%s" % (where, " ".join(cmd), r.stdout, unit))
    for s in skipped:
        print("skip %s" % s)
    print("%d passed, %d failed, %d skipped" % (passed, failed, len(skipped)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
