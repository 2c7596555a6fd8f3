/* Allocator hooks for deep-learning frameworks (C99; needs no CUDA header). Every hook works
 * on the process-wide default allocator of a device (see "Default allocators" in cachalot.h):
 * created on first use from cachalot_default_configure() or CACHALOT_CONF, CUDA unless the
 * config asks for the simulated device explicitly, never destroyed. A `void* stream` is a
 * cudaStream_t (a pointer, so the ABI is identical); NULL is the legacy default stream.
 *
 * No C++ exception crosses these functions. A failing hook stores a message that
 * cachalot_last_error() returns on the same thread and prints it on stderr (an out-of-memory
 * error as one warn line, its memory summary at CACHALOT_LOG=info; a config or driver error
 * once). The malloc hooks then return
 * NULL. Neither PyTorch's CUDAPluggableAllocator nor CuPy's CFunctionAllocator checks the
 * pointer (torch/csrc/cuda/CUDAPluggableAllocator.cpp wraps it in a DataPtr as it is;
 * cupy/cuda/memory.pyx, CFunctionAllocatorMemory, stores it as the array's pointer): a NULL
 * becomes a tensor or array at address 0 and the next kernel faults. From Python use the
 * package instead (python/cachalot: cachalot.torch.enable(), cachalot.cupy.enable()), which
 * raises torch.OutOfMemoryError / cupy.cuda.memory.OutOfMemoryError. From C++ wrap the malloc
 * hook so that a NULL for a nonzero size raises your framework's error.
 *
 * PyTorch (C++ torch::cuda::CUDAPluggableAllocator): alloc cachalot_torch_malloc, free
 * cachalot_torch_free, set_record_stream_fn cachalot_torch_record_stream, set_reset_fn
 * cachalot_torch_empty_cache, set_memory_fraction_fn cachalot_torch_set_memory_fraction, and
 * the graph-pool setters through the cachalot_torch_*_pool functions (below).
 *
 * cudaStreamPerThread (0x2) is a different stream on every thread: every hook serves it on the
 * first thread that passes it and refuses allocation and record_stream on it from others
 * (CACHALOT_ERROR_NOT_SUPPORTED, logged); a free on it from another thread waits for that
 * thread's stream, then frees the block on its own stream.
 *
 * CuPy (cupy.cuda.memory.CFunctionAllocator): CuPy passes no stream, so the CuPy hooks
 * allocate and free on the legacy default (NULL) stream. That is safe for work on the default
 * stream and on blocking streams (which synchronize with it); with non-blocking streams, free
 * memory only after that work completed. cachalot.cupy.enable() uses CuPy's current stream. */
#ifndef CACHALOT_HOOKS_H
#define CACHALOT_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "cachalot/cachalot.h"

#ifdef __cplusplus
extern "C" {
#endif

/** PyTorch alloc hook: `size` bytes on `device` for work on `stream`; NULL on failure (out of
 *  memory included, logged on stderr) or for size 0. See the file comment: PyTorch does not
 *  check for NULL. */
CACHALOT_API void* cachalot_torch_malloc(size_t size, int device, void* stream);
/** PyTorch free hook: frees `ptr` last used on `stream`. The pointer identifies the block;
 *  `size` (the size PyTorch allocated; 0 if unknown) is checked only in checked mode
 *  (`debug:1`). `device` selects the allocator, and if it does not own `ptr` every other
 *  default allocator is tried. NULL is a no-op. */
CACHALOT_API void cachalot_torch_free(void* ptr, size_t size, int device, void* stream);
/** PyTorch record-stream hook: marks the live allocation `ptr` as used by work on `stream`
 *  (a pointer no default allocator owns is logged on stderr). */
CACHALOT_API void cachalot_torch_record_stream(void* ptr, void* stream);
/** PyTorch reset hook (torch.cuda.empty_cache): returns the cached memory of every default
 *  allocator to the device. */
CACHALOT_API void cachalot_torch_empty_cache(void);

/** CuPy malloc hook: `size` bytes on `device`, on the default stream (see the file comment).
 *  `param` is unused. NULL on failure or for size 0. */
CACHALOT_API void* cachalot_cupy_malloc(void* param, size_t size, int device);
/** CuPy free hook: frees `ptr` on the default stream. `param` is unused; NULL is a no-op. */
CACHALOT_API void cachalot_cupy_free(void* param, void* ptr, int device);

/** PyTorch memory-fraction hook (torch.cuda.set_per_process_memory_fraction): as
 *  cachalot_default_set_memory_fraction(device, fraction); a failure is logged on stderr. */
CACHALOT_API void cachalot_torch_set_memory_fraction(double fraction, int device);

/* PyTorch graph-pool hooks (C++ torch::cuda::CUDAPluggableAllocator's
 * set_begin_allocate_to_pool_fn, set_end_allocate_to_pool_fn and set_release_pool; PyTorch's
 * MempoolId_t is the pair (pool_id0, pool_id1)). Each PyTorch pool id is one graph pool of the
 * default allocator of `device` (cachalot/pool.hpp): allocations routed to it come from its
 * segments, blocks freed during the capture return to it, eager work never gets them, and it
 * may grow during the capture. */

/** beginAllocateToPool (torch.cuda.graph capture_begin): creates the pool on first use, or
 *  adds a reference to it (graphs sharing a pool), then routes allocations on `device` from
 *  every stream `filter` accepts (NULL: every stream) to it until the matching end. While the
 *  route is active cachalot makes no call a global-mode capture forbids, on any stream. */
CACHALOT_API cachalot_status cachalot_torch_begin_allocate_to_pool(int device, uint64_t pool_id0,
                                                                   uint64_t pool_id1,
                                                                   cachalot_stream_filter filter,
                                                                   void* context);
/** endAllocateToPool (capture_end): ends the most recent route into the pool. */
CACHALOT_API cachalot_status cachalot_torch_end_allocate_to_pool(int device, uint64_t pool_id0,
                                                                 uint64_t pool_id1);
/** releasePool (graph reset or destruction): drops one reference; the last one releases the
 *  pool, whose memory goes back once PyTorch has freed its blocks. */
CACHALOT_API cachalot_status cachalot_torch_release_pool(int device, uint64_t pool_id0,
                                                         uint64_t pool_id1);

#ifdef __cplusplus
}
#endif

#endif /* CACHALOT_HOOKS_H */
