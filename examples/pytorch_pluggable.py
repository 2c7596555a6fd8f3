#!/usr/bin/env python3
"""PyTorch with cachalot as its CUDA allocator (torch.cuda.memory.CUDAPluggableAllocator).

Loads libcachalot.so (CACHALOT_LIBRARY, or a build folder of this repository), makes it the
current allocator before any CUDA memory is allocated, trains a small MLP for a few steps and
prints cachalot's own counters and summary (PyTorch's memory_stats are not available for a
pluggable allocator, so they are read through ctypes). The allocator is configured by
CACHALOT_CONF, e.g. CACHALOT_CONF=memory_limit:90% python pytorch_pluggable.py
Exits 77 (skipped) without torch, without a GPU, or without the library.
"""
import sys

from _cachalot_lib import SKIP, find_library, load, stats, summary


def main():
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return SKIP
    if not torch.cuda.is_available():
        print("skipped: no CUDA device visible to torch")
        return SKIP
    path = find_library()
    if path is None:
        print("skipped: libcachalot.so not found (set CACHALOT_LIBRARY)")
        return SKIP

    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        path, "cachalot_torch_malloc", "cachalot_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    lib = load(path)  # same path: the same loaded library, the same default allocators

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(10):
        x = torch.randn(256, 1024, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 3 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    torch.cuda.synchronize()

    device = torch.cuda.current_device()
    s = stats(lib, device)
    print(f"cachalot: {s.num_allocs} allocations, {s.allocated_bytes} B allocated, "
          f"{s.reserved_bytes} B reserved (peak {s.reserved_bytes_peak} B), "
          f"{s.num_segment_allocs} cudaMalloc calls")
    print(summary(lib, device))
    if s.num_allocs == 0:
        print("error: PyTorch did not allocate through cachalot")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
