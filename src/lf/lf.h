/*
 * The lock-free core shared by the `mpsc` and `wheel` engines.
 *
 * Overview
 * --------
 * An arm is held where its own thread can take it back.  Each thread that
 * uses an engine has a record (struct lf_rec, engine memory) with a ring of
 * LF_RING_SLOTS slots.  arm takes a node from the record's cache, fills it, and
 * stores it in the next slot with plain stores; a cancel by the same thread
 * before anyone else has looked takes it back with one CAS on the node's
 * state word and puts the node back in the cache ("local annihilation"): the
 * seed's arm+cancel pair never leaves the core it runs on.
 *
 * ONE timer thread per engine (timer.c) polls the rings while arms keep
 * coming and steals, with the same CAS, every ring node that could come due
 * before it looks again.  A ring slot needed again while its node is still
 * armed is spilled by its owner: to the engine's lock-free inbox (mpsc), or
 * into the owner's own base (wheel: a per-thread timing wheel, so threads
 * whose timers live long enough to be filed never meet in one structure).
 * The timer thread owns one base of its own (the heap, or a wheel) for what
 * it steals, what the inbox brings and what callbacks arm; it collects due
 * nodes from every base, sorts them by deadline and runs the callbacks.
 * A round fires only what was due when it began, and nothing due after a
 * node an owner holds in transit (lf_rec.transit): order holds however
 * late the timer thread runs (timer.c, Order).
 * An owner that spills an arm due within LF_SOON_NS hands it to the timer
 * thread instead (its base's soon list, taken without the lock), so a due
 * timer never waits behind a base lock held by a preempted owner.
 *
 * Exactly once: every arm has a node; the node's state word (generation <<
 * 26 | state) has exactly one winner among cancel, steal, spill and fire:
 *
 *   RING --steal/spill--> QUEUED --file--> IN_STRUCT --due--> FIRING --> FREE
 *    |                      |                  |
 *    cancel: CANCELLED      cancel: DROPPED    cancel: CANCEL_PENDING, then
 *    (its ring's owner      (its holder in     removed from its base by the
 *    frees it)              transit frees it)  canceller or the base's holder
 *
 * QUEUED is "in transit": held by whoever took it out of the ring (the
 * timer thread, or its owner spilling it: into the inbox or its own base).
 * Who frees a prevented node is decided by the state it was prevented in,
 * so every node is freed exactly once.
 *
 * The timer's private word 0 is the only state a timer keeps: the node's
 * index in the engine's arena, the arm's generation and its outcome (see
 * lf_word below), written by arm, by the winner of cancel vs fire and by
 * destroy.  A node is recognised by (index, generation): a stale reader
 * (a cancel racing a fire) can only lose a CAS.
 *
 * Time (clock.c): arm stamps the TSC (one instruction, no clock read) while
 * the timer thread's calibration is fresh, else reads the clock; the node's
 * filer converts a stamp, rounded up, from the calibration pair it was made
 * under, and adds the timeout: never early, and dated by the arm itself,
 * whenever the timer thread gets to run.
 *
 * Memory (pool.c): nodes live in one reserved arena, never unmapped while
 * the engine lives (type-stable: a stale reader never faults); free pages
 * are given back with madvise(MADV_DONTNEED) and come back with a
 * generation floor above every generation they used, so a stale (index,
 * generation) never matches again.
 *
 * Files, in the order each uses only those before it (scripts/shape):
 * schedule.c (the heap and wheel behind a base), clock.c (the time source
 * and the wake-up protocol), count.c (arms, cancels, fires summed),
 * pool.c, depot.c and trim.c (the arena, free nodes, giving memory back),
 * base.c (making a base, the inbox's push, filing by whoever holds a
 * base), rec.c (the threads' records), arm.c (arm, its fused filing of an evicted arm, the timer
 * thread's own arm), cancel.c, fire.c (collect, order, fire) and timer.c
 * (the timer thread's loop, stealing, draining), engine.c (create,
 * destroy, stats, park); node.h the node model.
 *
 * Synchronization: as in include/tmo/tmo.h.  arm and cancel never wait for
 * the timer thread or a callback (TMO_CAP_LOCKFREE_ARM): bases are taken
 * with trylock only (a busy base gets the node on its lock-free tofile
 * stack, filed by the lock's next holder; a cancel of a node filed in
 * another thread's base goes on that base's cancel stack); free nodes come
 * from the thread's cache or the lock-free depot; only a producer that
 * grows the pool takes a mutex, which no timer thread or callback holds.
 * Flow control without waiting: past a bound (pool.c, and mpsc's inbox
 * backlog, arm.c) arm answers TMO_EAGAIN at once.  The memory order of
 * every atomic here, and why: src/lf/memory-order.md (arm64-reviewed).
 */
#ifndef TMO_LF_H
#define TMO_LF_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <ck_ec.h>
#include <ck_stack.h>

#include "ds/heap.h"
#include "core/internal.h"
#include "core/park.h"
#include "tmo/testing.h"
#include "ds/wheel.h"
#include "cal.h"
#include "cpu.h"
#include "node.h"
#include "schedule.h"

#define LF_LIKELY(x) __builtin_expect(!!(x), 1)
#define LF_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* A base: a structure and who may touch it. */
struct lf_base {
	/* 0 free, 1 held; per-thread bases only (trylock, never waited on) */
	_Alignas(64) _Atomic int lock;
	/* a lower bound on its earliest deadline (INT64_MAX: empty) */
	_Atomic int64_t next;
	/* CANCEL_PENDING nodes whose canceller could not take the lock: the
	 * next holder removes and frees them */
	ck_stack_t cancels;
	/* QUEUED nodes its owner spilled while the base was busy: the next
	 * holder files them (tmo__lf_base_tidy) */
	ck_stack_t tofile;
	/* Nodes due within LF_SOON_NS that the owner handed to the timer
	 * thread, linked through s.soon.next: the timer thread takes them
	 * without the lock, so an owner preempted while holding it delays
	 * nothing due soon.  Handing over is a transit like a spill: the node
	 * goes IN_STRUCT -> QUEUED (a cancel then drops it, and the timer
	 * thread frees it). */
	struct lf_node *_Atomic soon;
	_Alignas(64) unsigned char sched[];
};

/* ---- records: one per thread that uses the engine -------------------------- */

#define LF_RING_SLOTS 8
/* Free nodes a record keeps; beyond, whole chains go to the depot. */
#define LF_CACHE_MAX 32
/* What a cache may hold at most: an own-ring cancel returns its node
 * unchecked (cancel.c), so LF_CACHE_MAX plus the ring's arms. */
#define LF_CACHE_BOUND (LF_CACHE_MAX + LF_RING_SLOTS)
#define LF_CHAIN 16

struct lf_rec {
	/* lf_word(index, generation, LF_PENDING) of the arm in each slot, 0 if
	 * none: the slot names the arm, not just the node, so a node that moved
	 * on (stolen, fired, reused) is never mistaken for the slot's arm.
	 * Written by its owner only; read by the timer thread. */
	_Alignas(64) _Atomic uint64_t ring[LF_RING_SLOTS];
	/* Owner-only (stats read the counters). */
	/* every arm made through this record: its next ring slot, and the
	 * arms counter stats read (relaxed; only the owner writes it) */
	_Alignas(64) _Atomic uint64_t head;
	/* While its owner holds a node it took out of the ring (from just
	 * before the CAS RING -> QUEUED until the node is in the inbox or a
	 * base): a lower bound on that node's deadline (1 if unknown), else 0.
	 * Read by the timer thread, which fires nothing due at or after it
	 * meanwhile (timer.c, Order). */
	_Atomic int64_t transit;
	uint32_t cache_n;
	struct lf_node *cache; /* free nodes, linked through free_next */
	_Atomic uint64_t prevented, spilled;
	struct lf_base *base; /* wheel: this thread's base; mpsc: NULL */
	/* Under the engine's rec_lock. */
	int attached;
	struct lf_rec *next_free;
	/* Append-only list of every record (the timer thread walks it). */
	struct lf_rec *_Atomic next;
	/* Timer thread only: `head` when it last looked. */
	uint64_t seen_head;
	/* Owner only: a clock reading and a TSC read just before it (clock.c,
	 * tmo__lf_node_deadline_own) */
	uint64_t cap_tsc;
	int64_t cap_ns;
};

/* ---- engine parameters and the engine -------------------------------------- */

struct lf_params {
	const struct tmo_engine_ops *ops;
	const struct lf_sched *sched;
	int64_t resolution_ns;
	/* How often the timer thread looks (and ticks) while arms keep
	 * coming; 0: every resolution_ns. */
	int64_t tick_ns;
	/* 1: spilled nodes go to their owner's base (wheel); 0: to the inbox */
	int thread_bases;
};

/* The tick word's low bits. */
#define LF_TW_SLEEPING 2u /* the timer thread sleeps: wake it if needed */
#define LF_TW_FENCE 4u /* no membarrier: arms fence before looking */
#define LF_TW_SHIFT 3
/* A stamp that says q.timeout already holds the deadline: an arm made when
 * the calibration was old, or a node its owner dated when it spilled it,
 * for another holder to file (clock.c, Dating). */
#define LF_STAMP_DEADLINE UINT64_MAX
/* The NTP slew a conversion allows for, in parts per million: CLOCK_MONOTONIC
 * may run this much faster than the measured rate between a pair and a
 * stamp (clock.c). */
#define LF_SLEW_PPM 1000

struct lf_run;
struct lf_pool {
	char *arena;           /* the reservation: node i at arena + 64 * i */
	size_t reserved_nodes; /* its capacity */
	size_t reserved_nodes_cap; /* what may be used (tmo_testing_set_node_cap) */
	/* growth: taken by producers only, never by the timer thread */
	pthread_mutex_t grow_lock;
	_Atomic uint32_t hwm_pages;       /* pages ever populated */
	struct lf_run *reuse;             /* released runs taken over (grow_lock) */
	_Atomic uint64_t populated_pages; /* resident now */
	ck_stack_t released;              /* runs the timer thread gave back */
	/* The depot: a lock-free stack of free chains (each at most LF_CHAIN
	 * nodes, linked through the head's aux); tag << 32 | top index + 1. */
	_Atomic uint64_t depot;
	_Atomic uint64_t depot_nodes; /* at least what it holds */
	/* single nodes freed by threads without a record: the timer thread
	 * moves them to the depot */
	ck_stack_t loose;
	_Atomic uint64_t trimmed_pages;
	/* 1: a producer woke the sleeping timer thread to trim (depot.c) */
	_Atomic int trim_asked;
};

struct tmo {
	struct tmo_base base;
	const struct lf_params *p;
	int64_t resolution_ns, tick_ns, margin_ns;
	int64_t origin_ns; /* every base's tick grid starts here */

	/* Read on every arm (and the calibration on every filing); written by
	 * the timer thread once per tick. */
	_Alignas(64) _Atomic uint64_t tickw;
	/* a TSC past this, lf_fresh_ns() after the latest calibration, dates
	 * an arm by the clock instead (clock.c, Dating) */
	_Atomic uint64_t fresh_until;
	struct lf_cal cal;
	_Alignas(64) struct lf_cal_prev cal_prev;
	_Atomic int64_t tick_at; /* the clock read just after the latest tick */
	_Atomic int64_t sleep_until; /* while SLEEPING: when it wakes itself */

	/* Producers -> timer thread: the inbox, and how many nodes were ever
	 * pushed onto it (the same line: a push has it exclusive anyway). */
	_Alignas(64) ck_stack_t inbox;
	_Atomic uint64_t inbox_in;
	/* nodes the timer thread has taken off it (timer thread writes) */
	_Alignas(64) _Atomic uint64_t inbox_out;
	_Alignas(64) struct ck_ec32 wake_ec;
	/* Timer thread -> cancels waiting for a callback. */
	_Alignas(64) struct ck_ec32 done_ec;
	_Atomic(struct tmo_timer *) running;
	/* The running callback's invocation (core/internal.h), stored with
	 * release before its node turns FIRING and before `running` names it:
	 * a cancel that saw either reads this one or a later one. */
	_Atomic uint64_t cb_ref;
	_Atomic uint64_t fired;

	/* Threads' records. */
	pthread_mutex_t rec_lock;
	struct lf_rec *_Atomic recs;
	struct lf_rec *free_recs;
	_Atomic uint64_t rec_bytes;
	/* arms and prevented cancels of threads without a record (their
	 * thread-exit destructors ran) */
	_Atomic uint64_t armed_bare, prevented_bare;

	struct lf_pool pool;

	/* The timer thread's own base and state (tt.h). */
	struct lf_base *tt_base;
	struct lf_rec *tt_rec; /* its node cache, for callbacks' arms */
	struct lf_tt *tt;
	pthread_t thread;
	_Atomic int stop;
	struct tmo__park park; /* the test hook (core/park.h) */
};

/* src/lf/'s files in their order (docs/lockfree.md; scripts/shape checks
 * it): each uses only those before it. */

/* ---- clock.c --------------------------------------------------------------- */

void tmo__lf_clock_init(struct tmo *e);
/* Timer thread: publish the next tick (flags: LF_TW_*); returns its clock
 * reading, taken after the tick is visible. */
int64_t tmo__lf_tick_publish(struct tmo *e, unsigned flags);
/* An arm's stamp: the TSC (cpu.h: arm64's virtual counter too), or
 * CLOCK_MONOTONIC where there is none that is invariant and cheap. */
extern int tmo__lf_use_tsc;
static inline uint64_t lf_stamp(void)
{
	if (LF_LIKELY(tmo__lf_use_tsc))
		return lf_tsc();
	return (uint64_t)tmo_now_ns();
}
/* How long a calibration dates arms: while the slew allowed for a stamp
 * after it stays within the margin's floor. */
static inline int64_t lf_fresh_ns(const struct tmo *e)
{
	return e->margin_ns * (1000000 / LF_SLEW_PPM);
}
/* 1 if an arm stamped `stamp` is dated by it: the calibration is at most
 * lf_fresh_ns() old, or there is no TSC (the stamp is the clock).  Else the
 * arm reads the clock and holds its deadline (LF_STAMP_DEADLINE). */
static inline int lf_stamp_fresh(struct tmo *e, uint64_t stamp)
{
	/* acquire: the pair behind the bound is then visible to this thread,
	 * which may file the arm itself (src/lf/memory-order.md) */
	return !tmo__lf_use_tsc || stamp <= atomic_load_explicit(&e->fresh_until, memory_order_acquire);
}
/* The deadline of a node in a ring or in transit (RING, QUEUED): the time
 * of its arm (its stamp converted, never early, no later than `later_ns`,
 * a clock reading after the arm, or one now if 0) plus its timeout, or
 * the deadline it holds (LF_STAMP_DEADLINE). */
int64_t tmo__lf_node_deadline(struct tmo *e, const struct lf_node *n, int64_t later_ns);
/* The same, by r's owner for a node of r's ring whose stamp
 * lf_cal_near (cal.h) did not convert (or that holds its deadline): a cap
 * it needs is r's last clock reading when that came after the arm. */
int64_t tmo__lf_node_deadline_far(struct tmo *e, struct lf_rec *r, const struct lf_node *n);
/* The deadline of a node of r's ring, by r's owner. */
static inline int64_t tmo__lf_node_deadline_own(struct tmo *e, struct lf_rec *r,
                                                const struct lf_node *n)
{
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t hi = stamp != LF_STAMP_DEADLINE && LF_LIKELY(tmo__lf_use_tsc)
	                     ? lf_cal_near(&e->cal, stamp, e->margin_ns)
	                     : 0;
	if (LF_UNLIKELY(hi == 0))
		return tmo__lf_node_deadline_far(e, r, n);
	return hi + atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
}
/* Lower bound on that deadline, for waking the timer thread; 0 if unknown. */
int64_t tmo__lf_node_deadline_lower(struct tmo *e, uint64_t stamp, int64_t timeout_ns);
/* Timer thread: refresh the TSC calibration. */
void tmo__lf_cal_update(struct tmo *e);
/* Sleep / wake (futex event counts through ck_ec). */
void tmo__lf_ec_wait(struct ck_ec32 *ec, uint32_t v, int64_t deadline_ns);
void tmo__lf_ec_wake(struct ck_ec32 *ec);
uint32_t tmo__lf_ec_value(struct ck_ec32 *ec);
/* The timer thread's side of the asymmetric Dekker with arm: after it set
 * LF_TW_SLEEPING and before it looks at rings, bases and the inbox. */
void tmo__lf_heavy_barrier(struct tmo *e);
/* Producers: after publishing work, before reading the tick word again. */
static inline void lf_light_barrier(uint64_t tw)
{
	if (LF_UNLIKELY(tw & LF_TW_FENCE))
		atomic_thread_fence(memory_order_seq_cst);
	else
		atomic_signal_fence(memory_order_seq_cst);
}
/* Producers: make sure the timer thread will look at work due no earlier
 * than `deadline_lower` (0: as soon as possible). */
void tmo__lf_wake_for(struct tmo *e, int64_t deadline_lower);

/* ---- count.c --------------------------------------------------------------- */

/* Arms, prevented cancels and fires summed over every counter (relaxed). */
void tmo__lf_counts(struct tmo *e, uint64_t *armed, uint64_t *prevented, uint64_t *fired);
/* Armed, neither fired nor prevented (a sum over every thread's counters). */
uint64_t tmo__lf_pending(struct tmo *e);

/* ---- pool.c, depot.c ------------------------------------------------------- */

int tmo__lf_pool_init(struct tmo *e);
void tmo__lf_pool_fini(struct tmo *e);
static inline struct lf_node *lf_node_at(const struct tmo *e, uint32_t idx)
{
	return (struct lf_node *)(void *)(e->pool.arena + ((size_t)idx << 6));
}
static inline uint32_t lf_idx_of(const struct tmo *e, const struct lf_node *n)
{
	return (uint32_t)((uint64_t)((const char *)n - e->pool.arena) >> 6);
}
/* A free node for r's cache: refills it from the depot or the arena.
 * Returns NULL with *err = TMO_ENOMEM or TMO_EAGAIN (the arena is full). */
struct lf_node *tmo__lf_cache_refill(struct tmo *e, struct lf_rec *r, int *err);
/* r's cache grew past LF_CACHE_MAX: a chain goes to the depot. */
void tmo__lf_cache_spill(struct tmo *e, struct lf_rec *r);
static inline void lf_cache_put(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	n->free_next = r->cache;
	r->cache = n;
	if (LF_UNLIKELY(++r->cache_n > LF_CACHE_MAX))
		tmo__lf_cache_spill(e, r);
}
/* A thread with no record frees one node / takes one. */
void tmo__lf_free_bare(struct tmo *e, struct lf_node *n);
struct lf_node *tmo__lf_alloc_bare(struct tmo *e, int *err);
/* A whole cache goes back (a record detaches). */
void tmo__lf_cache_return(struct tmo *e, struct lf_rec *r);
uint64_t tmo__lf_pool_bytes(const struct tmo *e);
uint64_t tmo__lf_pool_nodes(const struct tmo *e);
/* Every node in a populated page, for destroy. */
void tmo__lf_pool_each(struct tmo *e, void (*fn)(struct tmo *e, struct lf_node *n));

/* ---- trim.c ---------------------------------------------------------------- */

/* Timer thread: give back fully free pages (keeping `keep` free nodes). */
void tmo__lf_pool_trim(struct tmo *e);

/* ---- base.c: a base's holder ----------------------------------------------- */

/* Nodes the inbox may hold that its timer thread has not taken yet, before
 * an arm that would add one is refused (TMO_EAGAIN): tens of milliseconds
 * of its filing, the lateness (and, deadlines further apart than that,
 * the disorder) a flood of long timers may cause on mpsc. */
#define INBOX_MAX 65536u
/* A backlog at which a sleeping timer thread is woken whatever the
 * deadlines (a sixteenth of INBOX_MAX). */
#define INBOX_WAKE (INBOX_MAX / 16)

/* A base (its structure, empty) and its end. */
struct lf_base *tmo__lf_base_new(struct tmo *e);
void tmo__lf_base_free(struct tmo *e, struct lf_base *b);
static inline void *lf_sched_of(struct lf_base *b) { return b->sched; }
/* A per-thread base's wheel (lf_sched.wheel). */
static inline struct tmo_wheel *lf_own_wheel(struct lf_base *b) { return (void *)b->sched; }
/* Put a QUEUED node in the inbox and wake the timer thread if needed. */
void tmo__lf_inbox_post(struct tmo *e, struct lf_node *n);
/* Base lock (trylock only, except the owner of a dying record). */
static inline int lf_base_trylock(struct lf_base *b)
{
	int z = 0;
	return atomic_load_explicit(&b->lock, memory_order_relaxed) == 0 &&
	       atomic_compare_exchange_strong_explicit(&b->lock, &z, 1, memory_order_acquire,
	                                               memory_order_relaxed);
}
static inline void lf_base_unlock(struct lf_base *b)
{
	atomic_store_explicit(&b->lock, 0, memory_order_release);
}
/* How far ahead an owner hands its due timers to the timer thread. */
#define LF_SOON_NS TMO_NSEC_PER_MSEC
/* Holder of b, its owner r after a filing: tidy, hand what comes due soon
 * to the timer thread, unlock; returns when the base wants the timer
 * thread to look (0: at once). */
int64_t tmo__lf_base_release(struct tmo *e, struct lf_base *b, struct lf_rec *r);
/* Holder of b: remove and free what cancellers left on its cancel stack,
 * file what its owner left on its tofile stack (frees go to r's cache, or
 * the depot when r is NULL). */
void tmo__lf_base_tidy(struct tmo *e, struct lf_base *b, struct lf_rec *r);
/* The arm w in a slot of r's ring leaves it for its base or the inbox. */
void tmo__lf_ring_evict(struct tmo *e, struct lf_rec *r, uint64_t w);

/* ---- rec.c: the calling thread's record ------------------------------------ */

struct lf_tls_ent {
	uint64_t id; /* the engine's tmo_base.id; 0: empty */
	struct lf_rec *rec;
};
#define LF_TLS_IE __attribute__((tls_model("initial-exec"), visibility("hidden")))
/* The record of the engine this thread used last. */
extern _Thread_local struct lf_tls_ent tmo__lf_tls_hot LF_TLS_IE;
/* Any other engine's record: found, attached or made (NULL once this
 * thread's exit hook ran, or out of memory). */
struct lf_rec *tmo__lf_rec_slow(struct tmo *e);
static inline struct lf_rec *lf_rec_get(struct tmo *e)
{
	if (LF_LIKELY(tmo__lf_tls_hot.id == e->base.id))
		return tmo__lf_tls_hot.rec;
	return tmo__lf_rec_slow(e);
}
static inline void lf_bump(_Atomic uint64_t *c)
{
	/* one writer: a plain increment, atomic only so readers see no race */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}
void tmo__lf_recs_free(struct tmo *e);
void tmo__lf_engine_register(struct tmo *e);
void tmo__lf_engine_unregister(struct tmo *e);

/* ---- arm.c, cancel.c ------------------------------------------------------- */

int tmo__lf_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg);
/* The timer thread's own arm (from a callback): filed at once. */
int tmo__lf_arm_on_timer(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                         void *arg);
int tmo__lf_cancel(struct tmo *e, struct tmo_timer *t);

/* ---- engine.c (fire.c and timer.c: tt.h) ----------------------------------- */

int tmo__lf_create(const struct lf_params *p, const struct tmo_config *cfg, struct tmo **out);
void tmo__lf_destroy(struct tmo *e);
void tmo__lf_destroy_forked(struct tmo *e);
int tmo__lf_stats(struct tmo *e, struct tmo_stats *out);
/* What mpsc's and wheel's vtables share: every op but create. */
extern const struct tmo_testing_ops tmo__lf_testing_ops;
#define LF_ENGINE_OPS                                                                    \
	.arm = tmo__lf_arm, .destroy = tmo__lf_destroy, .cancel = tmo__lf_cancel, .stats = tmo__lf_stats,     \
	.destroy_forked = tmo__lf_destroy_forked, .testing = &tmo__lf_testing_ops

#endif
