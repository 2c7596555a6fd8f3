/* The C interface of cachalot (C99; needs no CUDA header). Streams are `void*` handles (a
 * cudaStream_t on a GPU); NULL is the default stream. Every call returns a status; on failure
 * cachalot_last_error() gives this thread's message. No C++ exception crosses this boundary.
 *
 * Contract: size 0 succeeds with *out = NULL; freeing NULL succeeds; freeing a pointer not
 * allocated here, an interior pointer, or a pointer freed already gives
 * CACHALOT_ERROR_INVALID_POINTER and changes nothing; a size the device can never hold gives
 * CACHALOT_ERROR_OUT_OF_MEMORY with the byte stats unchanged; a bad config gives
 * CACHALOT_ERROR_INVALID_ARGUMENT naming the key or value; a NULL allocator gives
 * CACHALOT_ERROR_INVALID_ARGUMENT. */
#ifndef CACHALOT_CACHALOT_H
#define CACHALOT_CACHALOT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_WIN32)
#define CACHALOT_API
#else
#define CACHALOT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** An allocator for one device (opaque). */
typedef struct cachalot_allocator cachalot_allocator;

/** Result of every C call. */
typedef enum {
  CACHALOT_SUCCESS = 0,            /**< the call succeeded */
  CACHALOT_ERROR_OUT_OF_MEMORY,    /**< the device or the memory limit cannot satisfy it */
  CACHALOT_ERROR_INVALID_ARGUMENT, /**< a bad argument or config string */
  CACHALOT_ERROR_INVALID_POINTER,  /**< not a live allocation of this allocator */
  CACHALOT_ERROR_BACKEND,          /**< a device call failed */
  CACHALOT_ERROR_NOT_SUPPORTED,    /**< not available on this backend or build */
  CACHALOT_ERROR_POOL_ASLEEP       /**< the memory pool is asleep (cachalot_pool_sleep) */
} cachalot_status;

/** One quantity tracked over time (the four values of a torch.cuda.memory_stats() entry). */
typedef struct cachalot_stat {
  uint64_t current;   /**< value now */
  uint64_t peak;      /**< highest value since creation or the last peak reset */
  uint64_t allocated; /**< cumulative increases */
  uint64_t freed;     /**< cumulative decreases */
} cachalot_stat;

/** A quantity for both pools together and for each pool. */
typedef struct cachalot_pool_stats {
  cachalot_stat all;        /**< both pools */
  cachalot_stat small_pool; /**< the small pool (requests up to config key small_size) */
  cachalot_stat large_pool; /**< the large pool */
} cachalot_pool_stats;

/** The calls of one kind made to the device, with their time (cachalot_stats.call_*). */
typedef struct cachalot_device_call {
  uint64_t calls; /**< calls made (failed ones included) */
  uint64_t ns;    /**< their time in nanoseconds (see cachalot_stats.device_timing) */
} cachalot_device_call;

/** cachalot_stats.device_timing: no device time (config cost_model:off on the simulated
 *  device, or a backend that keeps no figures): the call counts are still kept. */
#define CACHALOT_DEVICE_TIMING_NONE 0
/** cachalot_stats.device_timing: time priced by the simulated device's cost model. */
#define CACHALOT_DEVICE_TIMING_MODELED 1
/** cachalot_stats.device_timing: measured wall time of each CUDA driver call. */
#define CACHALOT_DEVICE_TIMING_MEASURED 2

/** Counters of an allocator (bytes unless named otherwise), filled by cachalot_get_stats().
 *
 *  Where torch.cuda.memory_stats() names a counter otherwise: its "allocation" is
 *  `allocations`, "segment" is `segments`, "num_device_alloc" is `num_segment_allocs` and
 *  "num_device_free" is `num_segment_frees` (C++'s memory_stats has accessors by PyTorch's
 *  names; C has none, since a second name would be a second field and the struct only grows).
 *
 *  Extensible: the caller sets `size` to sizeof(cachalot_stats) of the header it was built
 *  with (cachalot_stats_init() does it); the library writes only the fields that fit in `size`
 *  bytes and that it knows, leaves every byte past them untouched, and sets `size` to the
 *  number of bytes it wrote. A caller built with an older, shorter struct therefore keeps
 *  working with a newer library, and a caller built with a newer, longer struct learns from
 *  `size` which fields an older library filled. Fields are only ever appended at the end, never
 *  reordered or removed; all are uint64_t or structs of them (`size` must be a multiple of 8,
 *  at least 8). */
typedef struct cachalot_stats {
  uint64_t size; /**< in: the caller's sizeof(cachalot_stats); out: bytes the library wrote */
  cachalot_pool_stats requested_bytes;      /**< bytes callers asked for, live allocations */
  cachalot_pool_stats allocated_bytes;      /**< bytes handed out (rounded sizes) */
  cachalot_pool_stats reserved_bytes;       /**< fixed segments plus mapped expandable chunks */
  cachalot_pool_stats active_bytes;         /**< allocated plus freed blocks awaiting events */
  cachalot_pool_stats inactive_split_bytes; /**< free bytes in segments holding a live block */
  cachalot_pool_stats allocations;          /**< live allocation count */
  cachalot_pool_stats segments;             /**< segment count */
  uint64_t num_allocs;                      /**< successful allocations */
  uint64_t num_frees;                       /**< successful frees */
  uint64_t num_segment_allocs;              /**< segments made (device allocations, ranges) */
  uint64_t num_segment_frees;               /**< segments returned (device frees, ranges) */
  uint64_t num_ooms;                        /**< failed allocations for lack of memory */
  uint64_t num_alloc_retries;               /**< allocations retried after releasing the cache */
  uint64_t num_cache_flushes;               /**< releases of cached segments */
  uint64_t num_device_syncs;                /**< events or device synchronized by the allocator */
  uint64_t num_oversize_allocs;             /**< allocations of at least max_split_size */
  uint64_t num_deferred_frees;              /**< frees that waited for events on other streams */
  uint64_t num_pending_blocks;              /**< blocks awaiting events now */
  uint64_t num_streams;                     /**< streams the allocator has seen */
  uint64_t num_free_blocks;                 /**< cached free blocks now */
  uint64_t largest_free_block;              /**< the largest cached free block */
  uint64_t num_use_after_free_writes;       /**< checked mode: writes found in freed blocks */
  uint64_t max_split_size;                  /**< config max_split_size; UINT64_MAX when none */
  uint64_t num_chunk_maps;                  /**< chunks mapped into expandable segments */
  uint64_t num_chunk_unmaps;                /**< chunks unmapped from expandable segments */
  /* The device calls of the allocator's backend (every caller of that device), by kind, with
   * their time: modeled on the simulated device (config keys cost_model, cost_*), measured on
   * CUDA. Never reset by cachalot_reset_peak_stats. */
  uint64_t device_timing;          /**< CACHALOT_DEVICE_TIMING_NONE, _MODELED or _MEASURED */
  uint64_t device_ns;              /**< all device time: every call plus implied syncs */
  uint64_t device_calls;           /**< every device call, all kinds */
  uint64_t device_syncs;           /**< synchronizations: event, stream, device and implied */
  uint64_t device_implied_syncs;   /**< device synchronizations implied by segment frees */
  uint64_t device_implied_sync_ns; /**< their time (0 when measured: inside the frees') */
  cachalot_device_call call_segment_alloc; /**< cuMemAlloc */
  cachalot_device_call call_segment_free;  /**< cuMemFree */
  cachalot_device_call call_range_reserve; /**< cuMemAddressReserve */
  cachalot_device_call call_range_release; /**< cuMemAddressFree */
  cachalot_device_call call_chunk_create;  /**< cuMemCreate */
  cachalot_device_call call_chunk_map;     /**< cuMemMap */
  cachalot_device_call call_chunk_access;  /**< cuMemSetAccess */
  cachalot_device_call call_chunk_unmap;   /**< cuMemUnmap */
  cachalot_device_call call_chunk_release; /**< cuMemRelease */
  cachalot_device_call call_event_create;  /**< cuEventCreate */
  cachalot_device_call call_event_record;  /**< cuEventRecord */
  cachalot_device_call call_event_query;   /**< cuEventQuery */
  cachalot_device_call call_event_sync;    /**< cuEventSynchronize */
  cachalot_device_call call_stream_sync;   /**< cuStreamSynchronize */
  cachalot_device_call call_device_sync;   /**< cuCtxSynchronize */
  cachalot_device_call call_copy;          /**< pinned host <-> device copies */
  cachalot_device_call call_host_alloc;    /**< cuMemHostAlloc (pinned host memory) */
  cachalot_device_call call_host_free;     /**< cuMemFreeHost */
  /** device synchronizations made by releases before a growth (gc_threshold, the expandable
   *  release mark), outside any out-of-memory retry, empty_cache or trim */
  uint64_t num_gc_syncs;
  /* The sleep and wake of memory pools (cachalot_pool_sleep, cachalot_pool_wake): the sums over
   * the allocator's pools, or one pool's own (cachalot_pool_get_stats). Times are device time,
   * modeled or measured as device_timing says. */
  uint64_t sleep_pools_asleep;        /**< pools asleep now */
  uint64_t sleep_bytes_asleep;        /**< device bytes a wake would map now */
  uint64_t sleep_bytes_offloaded;     /**< live bytes of sleeping pools kept in pinned memory */
  uint64_t sleep_bytes_held;          /**< device bytes sleeping pools still hold (failed unmaps) */
  uint64_t sleep_num_sleeps;          /**< sleeps that completed */
  uint64_t sleep_num_pressure_sleeps; /**< of them, decided by the allocator under pressure */
  uint64_t sleep_num_wakes;           /**< wakes that completed */
  uint64_t sleep_num_failed_sleeps;   /**< sleeps that failed (the pool stayed awake) */
  uint64_t sleep_num_failed_wakes;    /**< wakes that failed (the pool stayed asleep) */
  uint64_t sleep_ns;                  /**< device time of every sleep */
  uint64_t wake_ns;                   /**< device time of every wake */
  uint64_t sleep_bytes_slept;         /**< cumulative device bytes unmapped by sleeps */
  uint64_t sleep_bytes_woken;         /**< cumulative device bytes mapped by wakes */
  uint64_t sleep_bytes_copied_out;    /**< cumulative bytes copied to the host by sleeps */
  uint64_t sleep_bytes_copied_in;     /**< cumulative bytes copied back by wakes */
} cachalot_stats;

/** Zeroes `*s` and sets its `size` (a header-only helper, not a library symbol). */
static inline void cachalot_stats_init(cachalot_stats* s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
}

/** The device argument of cachalot_default_empty_cache() meaning every default allocator. */
#define CACHALOT_ALL_DEVICES (-1)

/** Creates an allocator from a config string ("key:value,key:value"; NULL or "" for the
 *  defaults: backend auto, i.e. CUDA where a device exists, else the simulated device; the
 *  default allocators below never fall back that way). */
CACHALOT_API cachalot_status cachalot_create(const char* config, cachalot_allocator** out);
/** Destroys an allocator and returns all its memory to the device. NULL is a no-op. */
CACHALOT_API void cachalot_destroy(cachalot_allocator* a);
/** Allocates `size` bytes for use on `stream`. */
CACHALOT_API cachalot_status cachalot_malloc(cachalot_allocator* a, void** out, size_t size,
                                             void* stream);
/** Frees `ptr`, last used on `stream` (a stream other than the allocation's own defers reuse
 *  until the work queued there so far has completed). */
CACHALOT_API cachalot_status cachalot_free(cachalot_allocator* a, void* ptr, void* stream);
/** Frees `ptr` as cachalot_free does, stating its size: in checked mode (config debug:1) a
 *  size other than the one allocated is CACHALOT_ERROR_INVALID_POINTER and frees nothing. */
CACHALOT_API cachalot_status cachalot_free_sized(cachalot_allocator* a, void* ptr, size_t size,
                                                 void* stream);
/** Marks a live allocation as used by work on `stream`. */
CACHALOT_API cachalot_status cachalot_record_stream(cachalot_allocator* a, void* ptr, void* stream);
/** Returns every unused cached segment to the device. */
CACHALOT_API cachalot_status cachalot_empty_cache(cachalot_allocator* a);
/** Returns unused cached segments until at most `target_bytes` stay reserved. */
CACHALOT_API cachalot_status cachalot_trim(cachalot_allocator* a, size_t target_bytes);
/** Copies the counters into `*out`, whose `size` the caller has set (see cachalot_stats).
 *  A `size` below 8 or not a multiple of 8 is CACHALOT_ERROR_INVALID_ARGUMENT and writes
 *  nothing. */
CACHALOT_API cachalot_status cachalot_get_stats(cachalot_allocator* a, cachalot_stats* out);
/** Sets every peak to its current value. */
CACHALOT_API cachalot_status cachalot_reset_peak_stats(cachalot_allocator* a);
/** Writes the memory summary table, NUL-terminated and truncated to `capacity` bytes, into
 *  `buf`; `*needed` (if not NULL) receives the full length plus one. */
CACHALOT_API cachalot_status cachalot_memory_summary(cachalot_allocator* a, char* buf,
                                                     size_t capacity, size_t* needed);
/** Writes a snapshot of every segment and block as JSON text, with the buffer semantics of
 *  cachalot_memory_summary (retry with a larger buffer when `*needed` exceeds `capacity`):
 *  {"device": 0, "backend": "cuda", "segments": [{"address": 139..., "size": 2097152,
 *   "stream": 0, "pool": "small", "blocks": [{"address": 139..., "size": 512,
 *   "requested": 500, "state": "allocated"}, ...]}, ...]}
 *  Addresses and streams are unsigned integers; segments are sorted by address and their
 *  blocks cover them in address order; a block's state is "allocated", "pending" (freed,
 *  awaiting events on other streams), "free" (cached) or "unmapped" (a hole of an expandable
 *  segment); "requested" is 0 for free blocks. Each segment also has "memory_pool" (the id of
 *  its pool) and "asleep" (true while its pool sleeps: its allocated blocks have no memory
 *  behind them, "size" is what it still holds). After "segments", "sleeping_pools" lists the
 *  pools asleep: [{"pool": 3, "mode": "offload" or "discard", "bytes_asleep": N,
 *  "bytes_offloaded": N, "bytes_held": N}, ...] (cachalot_stats.sleep_*).
 *  After "segments", "device_calls" gives the device calls of the allocator's backend:
 *  {"timing": "modeled", "total_ns": N, "calls": N, "syncs": N, "implied_syncs": N,
 *   "implied_sync_ns": N, "by_kind": {"segment_alloc": {"calls": N, "ns": N}, ...}} (the
 *  fields of cachalot_stats.device_* and call_*; timing "none", "modeled" or "measured"). */
CACHALOT_API cachalot_status cachalot_memory_snapshot(cachalot_allocator* a, char* buf,
                                                      size_t capacity, size_t* needed);

/* --- Default allocators -----------------------------------------------------------------
 * One process-wide allocator per device (also behind the framework hooks of hooks.h), created
 * on first use and never destroyed. Its config is the one given to cachalot_default_configure
 * or else the CACHALOT_CONF environment variable, with `device` set to the device. With
 * backend auto (the default), a default allocator uses CUDA and never the simulated device:
 * where CUDA cannot serve (no driver, no device, a build without CUDA), creating it fails with
 * a message naming the cause, also printed once on stderr. `backend:simulated` must be asked
 * for explicitly (it is logged). A bad config fails every call, naming the key, and is
 * printed once on stderr. Calls on a device outside [0, 64) give CACHALOT_ERROR_INVALID_ARGUMENT.
 */

/** Sets the config of the default allocators created from now on ("key:value,..."; NULL: go
 *  back to CACHALOT_CONF, which is checked now). Validated at once: a bad config is
 *  CACHALOT_ERROR_INVALID_ARGUMENT naming the key and changes nothing. If a default allocator
 *  exists already with another config, the call fails (CACHALOT_ERROR_INVALID_ARGUMENT) and
 *  changes nothing: configure before the first allocation. The same config again succeeds. */
CACHALOT_API cachalot_status cachalot_default_configure(const char* config);
/** Limits the default allocator of `device` to `fraction` (in [0, 1]; 0: no limit) of the
 *  device's memory, as config key memory_fraction. Only before that allocator exists (or with
 *  the fraction it has): else CACHALOT_ERROR_NOT_SUPPORTED, nothing changed. */
CACHALOT_API cachalot_status cachalot_default_set_memory_fraction(int device, double fraction);
/** `*out` = a handle on the default allocator of `device` (created if needed), for every
 *  function that takes a cachalot_allocator: its memory pools (cachalot_pool_create,
 *  cachalot_pool_begin_allocate, cachalot_pool_sleep, cachalot_pool_wake, ...), stats and
 *  summary. The same handle on every call for a device; cachalot_destroy on it does nothing
 *  (default allocators are never destroyed). Fails as cachalot_default_malloc would create the
 *  allocator (bad device, bad config, no CUDA). */
CACHALOT_API cachalot_status cachalot_default_handle(int device, cachalot_allocator** out);
/** 1 if the default allocator of `device` exists, else 0 (never creates one). */
CACHALOT_API int cachalot_default_exists(int device);
/** Allocates `size` bytes on `device` for work on `stream` (the default allocator of `device`,
 *  created if needed). Size 0 succeeds with *out = NULL. */
CACHALOT_API cachalot_status cachalot_default_malloc(int device, void** out, size_t size,
                                                     void* stream);
/** Frees `ptr`, last used on `stream`, as cachalot_free_sized does (`size` 0: unknown, not
 *  checked). If the allocator of `device` does not own `ptr`, the default allocator that owns
 *  it frees it; none: CACHALOT_ERROR_INVALID_POINTER. NULL succeeds. */
CACHALOT_API cachalot_status cachalot_default_free(int device, void* ptr, size_t size,
                                                   void* stream);
/** Marks the live allocation `ptr` of any default allocator as used by work on `stream`. */
CACHALOT_API cachalot_status cachalot_default_record_stream(void* ptr, void* stream);
/** Returns the cached segments of the default allocator of `device` to the device (only if it
 *  exists; CACHALOT_ALL_DEVICES: of every existing one). */
CACHALOT_API cachalot_status cachalot_default_empty_cache(int device);
/** Sets every peak of the default allocator of `device` to its current value. */
CACHALOT_API cachalot_status cachalot_default_reset_peak_stats(int device);
/** Copies the counters of the default allocator of `device`, with the semantics of
 *  cachalot_get_stats. Before its first use they are zeros (max_split_size that of the config
 *  it would be created with) and nothing is created, so configuring stays open; a bad config
 *  is still an error (CACHALOT_ERROR_INVALID_ARGUMENT). */
CACHALOT_API cachalot_status cachalot_default_get_stats(int device, cachalot_stats* out);
/** Writes the memory summary of the default allocator of `device`, with the semantics of
 *  cachalot_memory_summary. `buf` may be NULL when `capacity` is 0. Before its first use: a
 *  table of zeros saying so, and nothing is created. */
CACHALOT_API cachalot_status cachalot_default_memory_summary(int device, char* buf, size_t capacity,
                                                             size_t* needed);
/** Writes the snapshot of the default allocator of `device` as cachalot_memory_snapshot does
 *  (before its first use: no segments, and nothing is created). */
CACHALOT_API cachalot_status cachalot_default_memory_snapshot(int device, char* buf,
                                                              size_t capacity, size_t* needed);
/* --- Memory pools (see cachalot/pool.hpp for the model) ---------------------------------- */

/** Identifies a memory pool of one allocator; 0 (CACHALOT_DEFAULT_POOL) is the default pool. */
typedef uint64_t cachalot_pool_id;
/** The default pool, where every allocation goes unless routed elsewhere. */
#define CACHALOT_DEFAULT_POOL ((cachalot_pool_id)0)

/** What a pool is for. */
typedef enum {
  CACHALOT_POOL_TENANT = 0, /**< cached memory is released by empty_cache, trim and pressure */
  CACHALOT_POOL_GRAPH = 1   /**< segments are kept until the pool is released (CUDA graphs) */
} cachalot_pool_type;

/** Stream filter of a route: nonzero if an allocation on `stream` goes to the pool. Called on
 *  every allocation while the route is active; must not call the pool functions. */
typedef int (*cachalot_stream_filter)(void* context, void* stream);

/** Reclaim callback of a pool: asked, under memory pressure from a higher-priority pool, to
 *  free live memory of `pool` (`bytes` is what the request needs). Returns the bytes it freed
 *  (advisory). May be called from any thread, concurrently, with no allocator lock held. */
typedef size_t (*cachalot_reclaim_fn)(void* context, cachalot_pool_id pool, size_t bytes);

/** What a sleep keeps of a pool's live blocks (cachalot_pool_sleep). */
typedef enum {
  CACHALOT_SLEEP_OFFLOAD = 0, /**< copied to pinned host memory, copied back by the wake */
  CACHALOT_SLEEP_DISCARD = 1  /**< not kept: unspecified bytes after the wake */
} cachalot_sleep_mode;

/** cachalot_sleep_fn's `notice`: the allocator is about to put the pool to sleep (a
 *  higher-priority pool needs `bytes`). Stop queuing work on the pool's memory and return
 *  nonzero; 0 keeps the pool awake. */
#define CACHALOT_SLEEP_REQUESTED 0
/** cachalot_sleep_fn's `notice`: the pool is asleep (`bytes`: the device memory it gave back);
 *  wake it (cachalot_pool_wake) once the pressure has passed. The return value is ignored. */
#define CACHALOT_SLEEP_ASLEEP 1
/** cachalot_sleep_fn's `notice`: the sleep CACHALOT_SLEEP_REQUESTED announced did not happen
 *  (the pool stays awake): resume. The return value is ignored. */
#define CACHALOT_SLEEP_CANCELLED 2

/** Sleep callback of a sleepable pool (see CACHALOT_SLEEP_REQUESTED, CACHALOT_SLEEP_ASLEEP).
 *  Called from the thread whose allocation is under pressure, with no allocator lock held; it
 *  must not allocate from, sleep or wake `pool` itself. */
typedef int (*cachalot_sleep_fn)(void* context, cachalot_pool_id pool, int notice, size_t bytes);

/** Options of cachalot_pool_create. Zero-initialize, set `size` to sizeof(cachalot_pool_options)
 *  (later versions append fields; fields beyond `size` take their defaults). */
typedef struct cachalot_pool_options {
  size_t size;                    /**< sizeof(cachalot_pool_options) */
  const char* name;               /**< name in messages and summaries (NULL: "pool <id>") */
  cachalot_pool_type type;        /**< tenant or graph pool */
  size_t limit;                   /**< most bytes the pool may reserve; 0: no limit */
  size_t guarantee;               /**< bytes no other pool may take */
  int priority;                   /**< higher is more important; the default pool has 0 */
  cachalot_reclaim_fn reclaim;    /**< optional reclaim callback */
  void* reclaim_context;          /**< passed to `reclaim` */
  int never_captured;             /**< graph pools: nonzero if the pool is never captured
                                       (then its routes announce no capture; see pool.hpp) */
  int sleepable;                  /**< tenant pools on expandable segments: nonzero lets the
                                       allocator put the pool to sleep when a higher-priority pool
                                       would run out of memory (see pool.hpp) */
  cachalot_sleep_mode sleep_mode; /**< the mode of those sleeps */
  cachalot_sleep_fn on_sleep;     /**< optional: asked before such a sleep, told after */
  void* sleep_context;            /**< passed to `on_sleep` */
} cachalot_pool_options;

/** Creates a pool with one reference; `*out` receives its id. */
CACHALOT_API cachalot_status cachalot_pool_create(cachalot_allocator* a,
                                                  const cachalot_pool_options* options,
                                                  cachalot_pool_id* out);
/** Adds a reference to a live pool. */
CACHALOT_API cachalot_status cachalot_pool_retain(cachalot_allocator* a, cachalot_pool_id pool);
/** Drops a reference; at zero the pool is released (its memory goes back once its blocks are
 *  freed). */
CACHALOT_API cachalot_status cachalot_pool_release(cachalot_allocator* a, cachalot_pool_id pool);
/** Routes allocations on `stream` to `pool` until cachalot_pool_end_allocate. */
CACHALOT_API cachalot_status cachalot_pool_begin_allocate(cachalot_allocator* a,
                                                          cachalot_pool_id pool, void* stream);
/** Routes allocations on every stream `filter` accepts to `pool` until
 *  cachalot_pool_end_allocate (PyTorch's beginAllocateToPool). */
CACHALOT_API cachalot_status cachalot_pool_begin_allocate_filtered(cachalot_allocator* a,
                                                                   cachalot_pool_id pool,
                                                                   cachalot_stream_filter filter,
                                                                   void* context);
/** Ends the most recent route into `pool`. */
CACHALOT_API cachalot_status cachalot_pool_end_allocate(cachalot_allocator* a,
                                                        cachalot_pool_id pool);
/** Allocates `size` bytes from `pool` for use on `stream`, whatever the routes say. */
CACHALOT_API cachalot_status cachalot_pool_malloc(cachalot_allocator* a, cachalot_pool_id pool,
                                                  void** out, size_t size, void* stream);
/** The pool a live allocation came from. */
CACHALOT_API cachalot_status cachalot_pool_of(cachalot_allocator* a, const void* ptr,
                                              cachalot_pool_id* out);
/** Puts tenant pool `pool` (on expandable segments) to sleep: waits for the work queued on its
 *  memory (events, no device-wide synchronization), with CACHALOT_SLEEP_OFFLOAD copies its live
 *  bytes to pinned host memory, and gives all its device memory back; its blocks stay
 *  allocated at the same addresses. While it sleeps, cachalot_pool_malloc (or a routed
 *  cachalot_malloc) and cachalot_record_stream on its blocks fail with
 *  CACHALOT_ERROR_POOL_ASLEEP; cachalot_free of its blocks is allowed. `*slept` (if not NULL) is
 *  1 if this call put it to sleep, 0 if it was asleep already. The default pool, graph pools and
 *  pools on fixed segments are refused (CACHALOT_ERROR_INVALID_ARGUMENT or _NOT_SUPPORTED, with
 *  the reason). A failure leaves the pool awake, except a failed unmap, after which it is asleep
 *  and the message says how much memory it still holds. */
CACHALOT_API cachalot_status cachalot_pool_sleep(cachalot_allocator* a, cachalot_pool_id pool,
                                                 cachalot_sleep_mode mode, int* slept);
/** Wakes a sleeping pool: maps new device memory at the same addresses (releasing other pools'
 *  cached memory under pressure, as a growth would) and copies the offloaded bytes back.
 *  `*woke` (if not NULL) is 1 if this call woke it, 0 if it was awake. Out of memory gives
 *  CACHALOT_ERROR_OUT_OF_MEMORY naming the pool; any failure leaves the pool asleep. */
CACHALOT_API cachalot_status cachalot_pool_wake(cachalot_allocator* a, cachalot_pool_id pool,
                                                int* woke);
/** `*asleep` = 1 if `pool` is asleep (or going to sleep, or waking), else 0. */
CACHALOT_API cachalot_status cachalot_pool_is_asleep(cachalot_allocator* a, cachalot_pool_id pool,
                                                     int* asleep);
/** Copies the counters of one pool into `*out` (byte and count stats of its segments, its own
 *  peaks, its sleep figures; flushes and syncs are the allocator's). */
CACHALOT_API cachalot_status cachalot_pool_get_stats(cachalot_allocator* a, cachalot_pool_id pool,
                                                     cachalot_stats* out);

/** Static name of a status. */
CACHALOT_API const char* cachalot_status_string(cachalot_status s);
/** This thread's message for its last failed call ("" if none). */
CACHALOT_API const char* cachalot_last_error(void);

/** The version of the loaded library, "MAJOR.MINOR.PATCH" (static storage). Compare with
 *  CACHALOT_VERSION_STRING of cachalot/version.h, the version compiled against. */
CACHALOT_API const char* cachalot_version(void);

/** An out-of-memory callback: `bytes` asked for on `stream` could not be served even after the
 *  allocator released its own cache. Return nonzero to retry the allocation (after freeing
 *  memory elsewhere), 0 to let it fail with CACHALOT_ERROR_OUT_OF_MEMORY. */
typedef int (*cachalot_oom_callback)(size_t bytes, void* stream, void* user_data);

/** Installs `callback` (NULL removes it), called with `user_data` when an allocation of `a`
 *  runs out of memory; each allocation is retried at most `max_retries` times. The callback
 *  runs on the allocating thread with no lock of `a` held and may call cachalot_free,
 *  cachalot_empty_cache or cachalot_malloc on `a` (an allocation it makes never calls it
 *  again). A size no device or limit could ever hold fails without calling it. */
CACHALOT_API cachalot_status cachalot_set_oom_callback(cachalot_allocator* a,
                                                       cachalot_oom_callback callback,
                                                       void* user_data, unsigned max_retries);

#ifdef __cplusplus
}
#endif

#endif /* CACHALOT_CACHALOT_H */
