/*
 * wheel: lock-free arm and cancel (src/lf/), hierarchical timing wheels
 * (src/ds/wheel.h): one per thread that arms, and one of the timer thread's.
 *
 * An arm is held in its thread's ring, where the same thread's cancel takes
 * it back with one CAS; it is dated by the TSC (no clock read).  A ring
 * slot needed while its arm is still pending files that arm in the
 * thread's own wheel (a trylock nobody else
 * holds but for a moment), so threads whose timers live long enough to be
 * filed never meet in one structure; the timer thread collects due timers
 * from every wheel and runs them in deadline order.  Deadlines are rounded
 * UP to the tick: lateness is bounded by one tick plus the thread's
 * wake-up.  While arms keep coming the timer thread ticks (and polls) every
 * quarter tick; then it sleeps until the next expiry.
 */
#include "lf/engine.h"

/* Default tick, chosen by measurement on the 2-core dev machine (2000
 * timers of 1..200 ms; a producer paced at ~9k arm+cancel pairs/s):
 *   1 ms:   lateness p50 601 us, p99 3.0 ms; timer thread 44 ms CPU/s busy
 *   256 us: lateness p50 217 us, p99 0.4 ms; timer thread 92 ms CPU/s busy
 * (idle with 1000 long timers: ~0.1 ms CPU/s either way).  1 ms halves the
 * background cost; config.resolution_ns picks a finer tick. */
#define WHEEL_TICK_NS TMO_NSEC_PER_MSEC

static int wheel_create(const struct tmo_config *cfg, struct tmo **out);

const struct tmo_engine_ops tmo__engine_wheel = {
	.name = "wheel",
	.summary = "lock-free arm/cancel (per-thread rings: a thread's cancel takes its own arm "
	           "back with one CAS), arms dated by the TSC, hierarchical wheels "
	           "per thread plus the timer thread's, 1 ms tick (config.resolution_ns)",
	.caps = TMO_CAP_LOCKFREE_ARM | TMO_CAP_NO_SYSCALL | TMO_CAP_NO_ALLOC | TMO_CAP_PARK,
	.resolution_ns = WHEEL_TICK_NS,
	.create = wheel_create,
	LF_ENGINE_OPS,
};

static int wheel_create(const struct tmo_config *cfg, struct tmo **out)
{
	static const struct lf_params params = {
		.ops = &tmo__engine_wheel,
		.sched = &tmo__lf_sched_wheel,
		.resolution_ns = WHEEL_TICK_NS,
		.tick_ns = WHEEL_TICK_NS / 4,
		.thread_bases = 1,
	};
	return tmo__lf_create(&params, cfg, out);
}
