/*
 * base.c: a base (a structure and who may touch it) made and freed, the
 * inbox's push, and what whoever holds a base runs: tidying its stacks,
 * filing, handing what is due soon to the timer thread, evicting a ring
 * slot's arm into it.
 */
#ifndef TMO_LF_BASE_H
#define TMO_LF_BASE_H

#include "lf.h"
#include "clock.h"

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
/* A per-thread base's lock, biased to its owner: the owner takes it on
 * every spill into the base and every cancel of a timer filed there, the
 * timer thread only to collect what is due and the owner did not hand
 * over, or to tidy its stacks.  Two flags in the SB (Dekker) shape of the
 * wake-up (memory-order.md): each party stores its own flag, then reads
 * the other's; the StoreLoad barrier is paid by the timer thread
 * (tmo__lf_heavy_barrier: membarrier), the owner's is a compiler barrier
 * (an sc fence where arms fence, LF_TW_FENCE).  So the owner's lock and
 * unlock are plain stores and loads, no locked instruction; the timer
 * thread's costs a system call (fire.c base_lock_other).  Trylock only:
 * a busy base is never waited for, but for the timer thread's short
 * spin on an owner inside. */
static inline int lf_base_own_trylock(struct tmo *e, struct lf_base *b)
{
	atomic_store_explicit(&b->owner_in, 1, memory_order_relaxed);
	lf_light_barrier(atomic_load_explicit(&e->tickw, memory_order_relaxed));
	/* acquire: what the timer thread did under the lock */
	if (LF_LIKELY(atomic_load_explicit(&b->other_in, memory_order_acquire) == 0))
		return 1;
	atomic_store_explicit(&b->owner_in, 0, memory_order_release);
	return 0;
}
static inline void lf_base_own_unlock(struct lf_base *b)
{
	atomic_store_explicit(&b->owner_in, 0, memory_order_release);
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

#endif /* TMO_LF_BASE_H */
