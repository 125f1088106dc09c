/*
 * ec.c: the futex-backed event counts the lock-free core sleeps and wakes
 * on (CK's ck_ec32, waits bounded by an absolute CLOCK_MONOTONIC deadline),
 * and waking the timer thread on them.
 */
#ifndef TMO_LF_EC_H
#define TMO_LF_EC_H

#include "lf.h"

/* Sleep until *ec differs from v or deadline_ns (INT64_MAX: none) passes. */
void tmo__lf_ec_wait(struct ck_ec32 *ec, uint32_t v, int64_t deadline_ns);
/* Add one to *ec and wake its waiters. */
void tmo__lf_ec_wake(struct ck_ec32 *ec);
/* The same for an event count only the calling thread adds to (the timer
 * thread's done_ec): no locked instruction on x86. */
void tmo__lf_ec_wake_sp(struct ck_ec32 *ec);
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

#endif /* TMO_LF_EC_H */
