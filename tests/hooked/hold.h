/*
 * What the tests of tests/hooked/ share: a thread held at a hook of the
 * lock-free core (src/lf/hook.h), and the timer thread's round count.
 *
 * While `hold` names a point, the first thread that comes to that point's
 * hook stays there until `release` is set, after setting `held`; then
 * `hold` is HOLD_NONE again, so later comers pass.  At the transit,
 * owner_in and refill hooks only a thread that set owner_thread is held (the case's
 * owner, not the test's other threads).  One test a process: the state is the file's.
 */
#ifndef TMO_TEST_HOOKED_HOLD_H
#define TMO_TEST_HOOKED_HOLD_H

#include <stdatomic.h>
#include <stdint.h>

#include "engine_test.h"
#include "lf/lf.h"
#include "lf/pool.h"

enum { HOLD_NONE, HOLD_TRANSIT, HOLD_ROUND, HOLD_OWNER_IN, HOLD_MEM, HOLD_TRIM, HOLD_REFILL,
       HOLD_WOKE };
static atomic_int hold, held, release;
static _Thread_local int owner_thread = 0;

static inline void hold_at(int point)
{
	int want = point;
	if (atomic_load(&hold) != point || !atomic_compare_exchange_strong(&hold, &want, HOLD_NONE))
		return;
	atomic_store(&held, 1);
	while (!atomic_load(&release))
		et_sleep_ns(100 * TMO_NSEC_PER_USEC);
}
/* The hooks (tmo__lf_hook_transit, tmo__lf_hook_owner_in, tmo__lf_hook_round,
 * tmo__lf_hook_mem, tmo__lf_hook_trim, tmo__lf_hook_refill, tmo__lf_hook_woke). */
static inline void hold_transit(struct tmo *e)
{
	(void)e;
	if (owner_thread)
		hold_at(HOLD_TRANSIT);
}
static inline void hold_owner_in(struct tmo *e)
{
	(void)e;
	if (owner_thread)
		hold_at(HOLD_OWNER_IN);
}
static inline void hold_refill(struct tmo *e)
{
	(void)e;
	if (owner_thread)
		hold_at(HOLD_REFILL);
}
static inline void hold_round(struct tmo *e)
{
	(void)e;
	hold_at(HOLD_ROUND);
}
static inline void hold_woke(struct tmo *e)
{
	(void)e;
	hold_at(HOLD_WOKE);
}
static inline void hold_mem(struct tmo *e)
{
	(void)e;
	hold_at(HOLD_MEM);
}
static inline void hold_trim(struct tmo *e)
{
	(void)e;
	hold_at(HOLD_TRIM);
}
static inline void hold_reset(void)
{
	atomic_store(&hold, HOLD_NONE);
	atomic_store(&held, 0);
	atomic_store(&release, 0);
}

/* The calling thread's next arm on any other lock-free engine takes the
 * general path: an arm and its cancel on `away` make away's record the
 * thread's hot one.  That path spills a ring slot's live arm (a CAS, the
 * transit these tests hold); the fast path files its own arm at once and
 * leaves the slot's arm where it is (src/lf/arm.c, arm_spill).  Returns
 * tmo_arm's or tmo_cancel's error, or 0. */
static void away_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}
static inline int go_general(struct tmo *away)
{
	struct tmo_timer t;
	tmo_timer_init(&t);
	int rc = tmo_arm(away, &t, 60 * TMO_NSEC_PER_SEC, away_cb, NULL);
	if (rc != 0)
		return rc;
	rc = tmo_cancel(away, &t);
	return rc == TMO_CANCEL_PREVENTED ? 0 : rc;
}

/* How many rounds the timer thread has begun (its tick count). */
static inline uint64_t rounds(struct tmo *e) { return atomic_load(&e->tickw) >> LF_TW_SHIFT; }

/* Wait until a round of the timer thread that began at `at` or later has
 * ended (the next one has begun), or *stop is set (stop may be NULL).
 * Returns 0 when neither came in 30 s. */
static inline int round_after(struct tmo *e, int64_t at, atomic_int *stop)
{
	const int64_t wait = 30 * TMO_NSEC_PER_SEC;
	if (!ET_WAIT_UNTIL((stop != NULL && atomic_load(stop) != 0) ||
	                       atomic_load(&e->tick_at) >= at,
	                   wait))
		return 0;
	/* that tick's round, or a later one */
	uint64_t k = rounds(e);
	return ET_WAIT_UNTIL((stop != NULL && atomic_load(stop) != 0) || rounds(e) > k, wait);
}

/* The order the case's callbacks started in: seq_cb with arg i sets
 * seq_of[i] (from 1; 0: not yet run). */
static atomic_int next_seq, seq_of[2];
static inline void seq_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_store(&seq_of[(intptr_t)arg], atomic_fetch_add(&next_seq, 1) + 1);
}
static inline void seq_reset(void)
{
	atomic_store(&next_seq, 0);
	atomic_store(&seq_of[0], 0);
	atomic_store(&seq_of[1], 0);
}

/* A timer's node, from its word (a cancelled word keeps the index). */
static inline struct lf_node *node_of(struct tmo *e, struct tmo_timer *t)
{
	return lf_node_at(e, lf_word_idx(atomic_load(lf_timer_word(t))));
}

#endif
