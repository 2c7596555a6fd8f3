// Segment marks (detail/thread_cache.hpp, detail/segment.hpp): a segment whose live blocks all
// lie in thread-cache lanes is counted wholly free, as a drain would leave it. With a stream
// state and its lanes locked under the stats mutex (all_streams_lock, ceiling_lock, a peak-ledger
// pull: lane_marks), settle_state_marks marks each such segment of the state (on one of its lane
// blocks, stream_stats::add_whole) and gives a segment that one lane holds whole to that lane. An
// owner counts its segments' marks itself on its hot path (tc_lane::put and take); its stream
// counts them here, under the owner's lock, when it allocates or frees in the segment. A mark
// without an owner is consumed by the first allocation in the segment, a lane's take or the
// stream's, through an exchange.
#include <algorithm>
#include <functional>

#include "detail/engine.hpp"

namespace cachalot::detail {

namespace {

constexpr std::uint8_t mark_owned = tc_lane::mark_owned, mark_shared = tc_lane::mark_shared;

/// The lane that owns `seg`, locked (unless every lock is held, `all`, or the caller holds
/// it, `held`), or nullptr. The owner changes only under its segment's stream lock, which the
/// caller holds.
tc_lane* lock_owner(const segment* seg, bool all, const tc_lane* held) {
  tc_lane* l = seg->lane_owner.load(std::memory_order_acquire);
  if (l != nullptr && !all && l != held) l->lock.lock();  // (lane locks come after stream locks)
  return l;
}

void unlock_owner(tc_lane* l, bool all, const tc_lane* held) {
  if (l == nullptr || all || l == held) return;
  l->sync();  // (a mark lowers its count: its slack is listed with the peak ledger)
  l->lock.unlock();
}

}  // namespace

void settle_marks(const std::vector<stream_state*>& list, std::vector<tc_held>& v) noexcept {
  for (stream_state* ss : list) settle_state_marks(*ss, v);
}

void settle_state_marks(stream_state& ss, std::vector<tc_held>& v) noexcept {
  // The state and its lanes locked. A segment qualifies when its lane blocks are all its live
  // blocks, it is not marked yet and no span of it is being mapped or unmapped (whose bytes no
  // count holds). (`v` has room for every lane slot of a stream state: no allocation.)
  const auto by_segment = [](const tc_held& a, const tc_held& b) {
    return std::less<const segment*>()(a.seg, b.seg);
  };
  if (!ss.tcache) return;
  v.clear();
  for (tc_lane& l : ss.tcache->lanes) {
    if (!l.seized) continue;  // (an unused lane holds nothing)
    for (std::uint32_t i = 0; i < l.count; ++i) v.push_back(tc_held{l.segs[i], &l, i});
  }
  std::sort(v.begin(), v.end(), by_segment);
  for (auto a = v.begin(); a != v.end();) {
    segment* seg = a->seg;
    const auto e = std::find_if(a, v.end(), [seg](const tc_held& h) { return h.seg != seg; });
    if (static_cast<std::size_t>(e - a) == seg->live && seg->busy == 0 &&
        !seg->lane_whole.load(std::memory_order_relaxed)) {
      // One lane holds it whole: that lane owns it from now on (counting its marks on its
      // hot path). Several: nobody does.
      tc_lane* owner = seg->lane_owner.load(std::memory_order_relaxed);
      const bool one = std::all_of(a, e, [l = a->lane](const tc_held& h) { return h.lane == l; });
      if (owner != nullptr && (!one || owner != a->lane)) owner->disown(seg);
      if (one && owner != a->lane) a->lane->own(seg);
      for (auto h = a; h != e; ++h) h->lane->marks[h->slot] = one ? mark_owned : mark_shared;
      a->lane->mark_whole(seg);
    }
    a = e;
  }
}

block* engine::claim_marked(stream_state& ss, block* b, pool_kind pool, std::size_t split_at,
                            std::size_t requested, bool forced, bool* over_ceiling) {
  // An allocation in a marked segment splits it again: counted as taking its whole bytes, as
  // without lanes. The owner's lock guards an owned segment's mark; one without an owner goes
  // to the first to exchange it (if a lane's take was first, this is a plain allocation).
  segment* seg = b->seg;
  const std::size_t size = split_at != 0 ? split_at : b->size;
  tc_lane* owner = lock_owner(seg, forced, nullptr);
  const bool marked = seg->lane_whole.load(std::memory_order_relaxed);
  const std::size_t whole = marked || seg->live == 0 ? seg->size : 0;
  block* r = nullptr;
  if (ss.stats.try_alloc(pool, size, requested, whole, !forced)) {
    if (marked && owner != nullptr) {
      seg->lane_whole.store(false, std::memory_order_relaxed);
    } else if (marked && !seg->lane_whole.exchange(false, std::memory_order_relaxed)) {
      ss.stats.drop_whole_alloc(pool, size, whole);
    }
    r = hand_out(ss, b, split_at, requested);
    // The stream uses the segment again: its owner gives it up (until a stats read finds it
    // held whole again), so that later operations here need not take the owner's lock.
    if (owner != nullptr) owner->disown(seg);
  } else {
    *over_ceiling = true;
  }
  unlock_owner(owner, forced, nullptr);
  return r;
}

bool engine::free_owned(stream_state& ss, block* b, bool forced, const tc_lane* held) {
  // A free in an owned segment: under the owner's lock, so that the owner's view of `live`
  // stays exact; if the owner now holds every live block, the segment is marked (and stays
  // owned), else disowned.
  segment* seg = b->seg;
  tc_lane* owner = lock_owner(seg, forced, held);
  const bool done =
      ss.stats.try_free(seg->pool, b->size, b->requested, whole_after_free(b), !forced);
  if (done) {
    ss.sync();
    ++ss.stats.num_frees;
    release_block(ss, b);
    owner->after_free(seg);
  }
  unlock_owner(owner, forced, held);
  return done;
}

void lane_marks::lock_lanes(stats_holder& state, std::vector<stats_holder*>& out) noexcept {
  auto& ss = static_cast<stream_state&>(state);
  if (!ss.tcache) return;
  for (tc_lane& l : ss.tcache->lanes) {  // (every lane: an unused one is quickly had)
    if (l.seized) continue;
    l.lock.lock();
    l.seized = true;
    out.push_back(&l);
  }
}

void lane_marks::settle_marks(stats_holder& state) noexcept {
  auto& ss = static_cast<stream_state&>(state);
  if (!ss.tcache) return;
  settle_state_marks(ss, scratch_);
  ss.sync();
  for (tc_lane& l : ss.tcache->lanes) l.sync();  // (every one is seized)
}

}  // namespace cachalot::detail
