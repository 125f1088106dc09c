/*
 * mpsc: lock-free arm and cancel (src/lf/), one timer thread owning a 4-ary
 * min-heap (src/ds/heap.h) of what comes due within about a millisecond,
 * over a wheel of 1 ms ticks for the rest (src/lf/schedule.c, near/far),
 * fed through a Concurrency Kit inbox.
 *
 * An arm is held in its thread's ring, where the same thread's cancel takes
 * it back with one CAS (the seed's arm+cancel never leaves its core); the
 * timer thread steals what could come due before it looks again, and a ring
 * slot needed while its arm is still pending sends that arm through the
 * inbox.  Every arm is dated by the TSC (precise: no tick), and the heap
 * fires exact deadlines (the wheel only holds the far ones until they come
 * near); the resolution is the timer thread's wake-up latency, about 50 us
 * on a shared 2-core machine, plus the time callbacks ahead of it take.
 * While arms due soon keep coming the timer thread polls every 50 us
 * instead of being woken; far ones alone do not keep it up
 * (src/lf/timer.c, Lazy).
 */
#include "lf/engine.h"

#define MPSC_RESOLUTION_NS (50 * TMO_NSEC_PER_USEC)

static int mpsc_create(const struct tmo_config *cfg, struct tmo **out);

const struct tmo_engine_ops tmo__engine_mpsc = {
	.name = "mpsc",
	.summary = "lock-free arm/cancel (per-thread rings: a thread's cancel takes its own arm "
	           "back with one CAS), arms dated by the TSC, a CK inbox to one timer thread "
	           "owning a 4-ary heap of what is due within ~1 ms, over a wheel of 1 ms ticks for "
	           "the rest; resolution = thread wake-up latency (~50 us)",
	.caps = TMO_CAP_LOCKFREE_ARM | TMO_CAP_NO_SYSCALL | TMO_CAP_NO_ALLOC | TMO_CAP_PARK,
	.resolution_ns = MPSC_RESOLUTION_NS,
	.create = mpsc_create,
	LF_ENGINE_OPS,
};

static int mpsc_create(const struct tmo_config *cfg, struct tmo **out)
{
	static const struct lf_params params = {
		.ops = &tmo__engine_mpsc,
		.sched = &tmo__lf_sched_near_far,
		.resolution_ns = MPSC_RESOLUTION_NS,
		.tick_ns = 0, /* looks every resolution_ns while near arms come */
		.thread_bases = 0,
	};
	return tmo__lf_create(&params, cfg, out);
}
