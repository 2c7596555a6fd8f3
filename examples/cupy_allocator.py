#!/usr/bin/env python3
"""CuPy with cachalot as its memory allocator, through the cachalot package.

cachalot.cupy.enable() installs a cupy.cuda.memory.PythonFunctionAllocator that allocates on
CuPy's current stream and raises cupy.cuda.memory.OutOfMemoryError (with cachalot's message)
when cachalot cannot allocate. This runs a few array operations, shows the out-of-memory error,
and prints cachalot's statistics and summary. Needs the package importable (see
pytorch_pluggable.py). Exits 77 (skipped) without cupy or a GPU.
"""
import sys

SKIP = 77


def main():
    try:
        import cupy
    except ImportError:
        print("skipped: cupy is not installed")
        return SKIP
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no device")
    except Exception as e:  # cupy raises CUDARuntimeError without a driver
        print(f"skipped: no CUDA device visible to cupy ({e})")
        return SKIP
    import cachalot
    import cachalot.cupy

    cachalot.cupy.enable()
    a = cupy.random.rand(2048, 2048, dtype=cupy.float32)
    for _ in range(5):
        b = a @ a.T
        a = b / cupy.linalg.norm(b)
    total = float(a.sum())
    cupy.cuda.Device().synchronize()
    print(f"result {total:.6f}")
    try:
        cupy.empty(1 << 50, dtype=cupy.uint8)  # 1 PiB
    except cupy.cuda.memory.OutOfMemoryError as e:
        print("out of memory, as expected:", str(e)[:160])

    device = cupy.cuda.Device().id
    stats = cachalot.memory_stats(device)
    print(f"cachalot: {stats['cachalot.num_allocs']} allocations, "
          f"{stats['allocated_bytes.all.current']} B allocated, "
          f"{stats['reserved_bytes.all.current']} B reserved, "
          f"{stats['num_device_alloc']} cudaMalloc calls, {stats['num_ooms']} out-of-memory")
    print(cachalot.memory_summary(device))
    del a, b
    if stats["cachalot.num_allocs"] == 0 or stats["num_ooms"] != 1:
        print("error: CuPy did not allocate through cachalot as expected")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
