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
 * before it looks again.  An arm whose ring slot still holds a live arm is
 * filed at once by its owner (its node unpublished: a store, no CAS), and
 * off the fast path the slot's arm is spilled instead (a CAS): to the
 * engine's lock-free inbox (mpsc), or into the owner's own base (wheel: a
 * per-thread timing wheel, so threads whose timers live long enough to be
 * filed never meet in one structure).
 * The timer thread owns one base of its own (mpsc's heap over a wheel, or
 * a wheel) for what it steals, what the inbox brings and what callbacks
 * arm; it collects due nodes from every base, sorts them by deadline and
 * runs the callbacks.
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
 * An arm filed at once starts QUEUED (mpsc) or IN_STRUCT (wheel), never RING.
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
 * schedule.c (the heap and wheel behind a base), ec.c (the futex-backed
 * event counts threads sleep on), clock.c (the time source and the
 * wake-up protocol), count.c (arms, cancels, fires summed),
 * pool.c, depot.c and trim.c (the arena, free nodes, giving memory back),
 * base.c (making a base, the inbox's push, filing by whoever holds a
 * base), rec.c (the threads' records), arm.c (arm, its fused filing of an
 * evicted arm, the timer thread's own arm), cancel.c, fire.c (collect,
 * order, fire), take.c (stealing, draining), timer.c (the timer thread's
 * loop), engine.c (create, destroy, stats, park).  Each has a header of its
 * own name that declares what the files after it may use (fire.c, take.c
 * and timer.c share tt.h, the timer thread's state), and includes only the headers of
 * the files before it: scripts/shape checks both.  This header is the data
 * model they all share (a base, a record, the engine); node.h the node,
 * cal.h the calibration pair, cpu.h the TSC, schedule.h a base's
 * structure.
 *
 * Synchronization: as in include/tmo/tmo.h.  arm and cancel never wait for
 * the timer thread or a callback (TMO_CAP_LOCKFREE_ARM): bases are taken
 * with trylock only (the owner's without a locked instruction, base.h; a
 * busy base gets the node on its lock-free tofile stack, filed by the
 * lock's next holder; a cancel of a node filed in another thread's base
 * goes on that base's cancel stack); free nodes come from the thread's
 * cache, its spare or the lock-free depot (depot.c); only a producer that
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

/* A counter with one writer: a plain increment, atomic only so readers
 * (stats) see no race. */
static inline void lf_bump(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

/* A base: a structure and who may touch it. */
struct lf_base {
	/* The lock of a per-thread base, biased to its owner (base.h):
	 * owner_in is 1 while its owner holds it or tries to, other_in
	 * while the timer thread does */
	_Alignas(64) _Atomic int owner_in;
	_Atomic int other_in;
	/* the record whose base it is (for life: records are reused, not
	 * freed, while the engine lives) */
	struct lf_rec *owner;
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
/* Free nodes a record's cache keeps; beyond, whole chains go to its spare. */
#define LF_CACHE_MAX 32
/* What a cache may hold at most: an own-ring cancel returns its node
 * unchecked (cancel.c), so LF_CACHE_MAX plus the ring's arms. */
#define LF_CACHE_BOUND (LF_CACHE_MAX + LF_RING_SLOTS)
#define LF_CHAIN 16
/* Free nodes a record keeps beside its cache, in chains (depot.c,
 * Spares): what a burst of cancels frees comes back to the thread that
 * made it, and a thread's nodes stay in pages of its own. */
#define LF_SPARE_MAX 65536

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
	 * base), or an arm (from before its stamp until it is in its slot or
	 * filed, arm.c arm_announce): a lower bound on that node's deadline
	 * (1 if unknown), else 0.  Read by the timer thread, before and after
	 * it looks at the ring, which fires nothing due at or after it
	 * meanwhile (timer.c, Order). */
	_Atomic int64_t transit;
	uint32_t cache_n;
	struct lf_node *cache; /* free nodes, linked through free_next */
	/* Free chains beyond the cache, linked as the depot's (depot.c,
	 * Spares): its owner pushes and pops them, anyone else only takes
	 * them all; spare_n counts their nodes. */
	struct lf_node *_Atomic spare;
	_Atomic uint32_t spare_n;
	uint32_t grow_pages; /* its next growth step (pool.h), 0: the first */
	_Atomic uint64_t prevented, spilled;
	/* arms filed at once, their ring slot's arm still live (arm.c) */
	_Atomic uint64_t direct;
	struct lf_base *base; /* wheel: this thread's base; mpsc: NULL */
	/* Under the engine's rec_lock. */
	int attached;
	struct lf_rec *next_free;
	/* Append-only list of every record (the timer thread walks it). */
	struct lf_rec *_Atomic next;
	/* Timer thread only: `head` when it last looked. */
	uint64_t seen_head;
	/* Nodes of this thread's arms that the timer thread freed after their
	 * cancel (stolen from the ring, or left on a base's cancel stack),
	 * linked by free_next: pushed by the timer thread, taken whole by
	 * anyone (depot.c, Homes); home_n counts them. */
	_Alignas(64) struct lf_node *_Atomic home;
	_Atomic uint32_t home_n;
	/* Owner only, on a line of their own (the timer thread writes
	 * seen_head every round): a clock reading and a TSC read just before
	 * it (clock.c, tmo__lf_node_deadline_far), and the calibration pair
	 * that dates this owner's stamps near it (cal.h, lf_own_near): a copy
	 * of the published one, or the owner's own (clock.c, own_pair) */
	_Alignas(64) uint64_t cap_tsc;
	int64_t cap_ns;
	struct lf_cal_snap cal;
	/* Owner only: the time its latest arm filed at once was dated at
	 * (arm.c, file_own), where the wheel looks first for the next one's
	 * place; 0 before the first. */
	int64_t held_at;
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
#define LF_TW_SLEEPING 2u /* the timer thread sleeps: wake it if needed (the
                          * first waker clears it: tmo__lf_wake_for) */
#define LF_TW_FENCE 4u /* no membarrier: arms fence before looking */
#define LF_TW_SHIFT 3
/* A stamp that says q.timeout already holds the deadline: an arm made when
 * the calibration was old, or a node its owner dated when it spilled it,
 * for another holder to file (clock.c, Dating). */
#define LF_STAMP_DEADLINE UINT64_MAX
#ifdef TMO_LF_PLANT_STEAL_DATE
/* tests/hooked/lf_order.c must catch it: a ring arm reads no TSC (its
 * stamp LF_STAMP_NOW), and whoever files it dates it by a clock read of
 * its own, after the arm: never early (arm.c, arm_fast; clock.c); its
 * lower bound, for a wake-up, is the latest tick's clock read. */
#define LF_STAMP_NOW (UINT64_MAX - 1)
#define LF_PLANT_STEAL(stamp, deadline)                                                            \
	do {                                                                                       \
		if ((stamp) == LF_STAMP_NOW)                                                       \
			return (deadline);                                                         \
	} while (0)
#else
#define LF_PLANT_STEAL(stamp, deadline) ((void)0)
#endif
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
	_Atomic uint64_t trim_runs; /* the timer thread's alone (debug) */
	/* 1: a producer woke the sleeping timer thread to trim (depot.c); the
	 * trim clears it */
	_Atomic int trim_asked;
	/* pages refills may still grow past the soft bound while a trim
	 * holds the depot's nodes of pages it may give back (trim.c; pool.c,
	 * may_grow); 0 otherwise */
	_Atomic uint32_t trim_grow;
	/* the most arms found pending at once by a growth (pool.c, may_grow) */
	_Atomic uint64_t pending_peak;
	/* 1: a refill was refused growth (past the soft bound, or the
	 * reservation used up: pool.c, pressed) since the timer thread last
	 * looked at a trim; it then waits TRIM_DEFER instead (timer.c,
	 * announce_sleep) */
	_Atomic int pressed;
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
	_Atomic uint64_t fired; /* written by the timer thread only (fire.c) */

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
	/* The pair the rate is measured from (clock.c, tmo__lf_cal_update):
	 * the engine's first, taken again at each step.  The timer thread's
	 * (the creating thread's before it runs). */
	struct {
		uint64_t tsc, width;
		int64_t ns;
	} anchor;
	struct lf_tt *tt;
	/* Held by the timer thread across each of its windows between an
	 * allocation and its publication, or a free and its unlinking (trim.c,
	 * fire.c's due arrays): a fork copies none of them half done, so a
	 * child's destroy frees exactly what the engine holds (rec.c, Fork). */
	pthread_mutex_t mem_lock;
	pthread_t thread;
	_Atomic int stop;
	struct tmo__park park; /* the test hook (core/park.h) */
};

#endif
