/*
 * base.c: a base (a structure and who may touch it) made and freed, the
 * inbox's push, and what whoever holds a base runs: tidying its stacks,
 * filing, handing what is due soon to the timer thread, evicting a ring
 * slot's arm into it.
 */
#ifndef TMO_LF_BASE_H
#define TMO_LF_BASE_H

#include "lf.h"

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

#endif /* TMO_LF_BASE_H */
