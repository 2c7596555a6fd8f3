#!/usr/bin/env python3
"""PyTorch with cachalot as its CUDA allocator, through the cachalot package.

cachalot.torch.enable() (before the first CUDA tensor) builds a small extension against the
installed torch once and installs cachalot as PyTorch's C++ CUDAPluggableAllocator with all its
hooks; then this trains a small MLP, shows that an allocation larger than the device raises
torch.cuda.OutOfMemoryError with cachalot's message while training goes on, and prints
cachalot's statistics (PyTorch's own torch.cuda.memory_stats() raise under a pluggable
allocator). The default allocators are configured by CACHALOT_CONF, e.g.
    CACHALOT_CONF=memory_limit:90% python examples/pytorch_pluggable.py
Needs the package importable (pip install --no-build-isolation ./python, or PYTHONPATH=python
with CACHALOT_LIBRARY=build/src/libcachalot.so). Exits 77 (skipped) without torch or a GPU.
"""
import sys

SKIP = 77


def main():
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return SKIP
    if not torch.cuda.is_available():
        print("skipped: no CUDA device visible to torch")
        return SKIP
    import cachalot.torch

    cachalot.torch.enable()
    print("cachalot hooks:", " ".join(cachalot.torch.wired_hooks()))

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
        if step == 4:
            try:
                torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # 1 PiB
            except torch.cuda.OutOfMemoryError as e:
                print("out of memory, as expected:", str(e).splitlines()[0][:160])
    torch.cuda.synchronize()

    stats = cachalot.torch.memory_stats()
    print(f"cachalot: {stats['cachalot.num_allocs']} allocations, "
          f"{stats['allocated_bytes.all.current']} B allocated, "
          f"{stats['reserved_bytes.all.current']} B reserved "
          f"(peak {stats['reserved_bytes.all.peak']} B), "
          f"{stats['num_device_alloc']} cudaMalloc calls, {stats['num_ooms']} out-of-memory")
    print(cachalot.torch.memory_summary())
    if stats["cachalot.num_allocs"] == 0 or stats["num_ooms"] != 1:
        print("error: PyTorch did not allocate through cachalot as expected")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
