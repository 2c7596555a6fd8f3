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
  CACHALOT_ERROR_NOT_SUPPORTED     /**< not available on this backend or build */
} cachalot_status;

/** Counters of an allocator (bytes unless named otherwise). */
typedef struct cachalot_stats {
  uint64_t requested_bytes;           /**< bytes callers asked for, live */
  uint64_t requested_bytes_peak;      /**< peak of requested_bytes */
  uint64_t allocated_bytes;           /**< bytes handed out (rounded), live */
  uint64_t allocated_bytes_peak;      /**< peak of allocated_bytes */
  uint64_t reserved_bytes;            /**< bytes held in device segments */
  uint64_t reserved_bytes_peak;       /**< peak of reserved_bytes */
  uint64_t active_bytes;              /**< allocated plus blocks awaiting events */
  uint64_t active_bytes_peak;         /**< peak of active_bytes */
  uint64_t inactive_split_bytes;      /**< free bytes inside split segments */
  uint64_t num_allocs;                /**< successful allocations */
  uint64_t num_frees;                 /**< successful frees */
  uint64_t num_segment_allocs;        /**< device segment allocations */
  uint64_t num_segment_frees;         /**< device segment frees */
  uint64_t num_ooms;                  /**< failed allocations for lack of memory */
  uint64_t num_alloc_retries;         /**< allocations retried after releasing the cache */
  uint64_t num_cache_flushes;         /**< releases of cached segments */
  uint64_t largest_free_block;        /**< the largest cached free block */
  uint64_t num_live_allocations;      /**< allocations not yet freed */
  uint64_t num_segments;              /**< segments held now */
  uint64_t num_use_after_free_writes; /**< checked mode: writes found in freed blocks */
} cachalot_stats;

/** Creates an allocator from a config string ("key:value,key:value"; NULL or "" for the
 *  defaults: backend auto, i.e. CUDA where a device exists, else the simulated device). */
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
/** Copies the counters into `*out`. */
CACHALOT_API cachalot_status cachalot_get_stats(cachalot_allocator* a, cachalot_stats* out);
/** Sets every peak to its current value. */
CACHALOT_API cachalot_status cachalot_reset_peak_stats(cachalot_allocator* a);
/** Writes the memory summary table, NUL-terminated and truncated to `capacity` bytes, into
 *  `buf`; `*needed` (if not NULL) receives the full length plus one. */
CACHALOT_API cachalot_status cachalot_memory_summary(cachalot_allocator* a, char* buf,
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

/** Options of cachalot_pool_create. Zero-initialize, set `size` to sizeof(cachalot_pool_options)
 *  (later versions append fields; fields beyond `size` take their defaults). */
typedef struct cachalot_pool_options {
  size_t size;                 /**< sizeof(cachalot_pool_options) */
  const char* name;            /**< name in messages and summaries (NULL: "pool <id>") */
  cachalot_pool_type type;     /**< tenant or graph pool */
  size_t limit;                /**< most bytes the pool may reserve; 0: no limit */
  size_t guarantee;            /**< bytes no other pool may take */
  int priority;                /**< higher is more important; the default pool has 0 */
  cachalot_reclaim_fn reclaim; /**< optional reclaim callback */
  void* reclaim_context;       /**< passed to `reclaim` */
  int never_captured;          /**< graph pools: nonzero if the pool is never captured
                                    (then its routes announce no capture; see pool.hpp) */
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
/** Copies the counters of one pool into `*out` (byte and count stats of its segments, its own
 *  peaks; flushes and syncs are the allocator's). */
CACHALOT_API cachalot_status cachalot_pool_get_stats(cachalot_allocator* a, cachalot_pool_id pool,
                                                     cachalot_stats* out);

/** Static name of a status. */
CACHALOT_API const char* cachalot_status_string(cachalot_status s);
/** This thread's message for its last failed call ("" if none). */
CACHALOT_API const char* cachalot_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CACHALOT_CACHALOT_H */
