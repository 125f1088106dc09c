/*
 * ec: the futex-backed event counts the lock-free core sleeps and wakes on
 * (CK's ck_ec32): the timer thread's sleep, and a cancel's wait for a
 * running callback; and the protocol that wakes the timer thread.
 *
 * Waking the timer thread.  Before it sleeps the timer thread sets
 * LF_TW_SLEEPING, then looks at every ring, base and the inbox; an arm
 * publishes its node, then reads the tick word again.  That is Dekker's
 * pattern, and needs a StoreLoad barrier on both sides: the timer thread
 * pays it for both with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) (a
 * barrier on every running thread of the process), so arm needs only a
 * compiler barrier.  Where membarrier is unavailable (or under TSan, which
 * does not model it, or with TMO_LF_FENCE=1 in the environment) the tick
 * word carries LF_TW_FENCE and arm fences.  The first waker clears
 * LF_TW_SLEEPING (tmo__lf_wake_for): the thread is woken, and the arms
 * after it treat it as polling, not as asleep, until its next sleep.
 */
#include <limits.h>
#include <stdatomic.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ec.h"

static int ec_gettime(const struct ck_ec_ops *ops, struct timespec *out)
{
	(void)ops;
	return clock_gettime(CLOCK_MONOTONIC, out);
}

/* ck_ec passes an ABSOLUTE CLOCK_MONOTONIC deadline: FUTEX_WAIT_BITSET takes
 * exactly that (plain FUTEX_WAIT would read it as relative). */
static void ec_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expect,
                      const struct timespec *deadline)
{
	(void)st;
	syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expect, deadline, NULL,
	        FUTEX_BITSET_MATCH_ANY);
}

static void ec_wake32(const struct ck_ec_ops *ops, const uint32_t *addr)
{
	(void)ops;
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static const struct ck_ec_ops ec_ops = {
	.gettime = ec_gettime,
	.wait32 = ec_wait32,
	.wake32 = ec_wake32,
};
static const struct ck_ec_mode ec_mode = {.ops = &ec_ops, .single_producer = false};
/* An event count one thread alone adds to: on x86 its add is a plain xadd,
 * no lock prefix (ck_ec.h: a waiter's flag a racing add overwrites is
 * harmless, the add changed the value the waiter sleeps on); elsewhere,
 * and under TSan (cmake/ck_tsan.cmake), the locked add. */
static const struct ck_ec_mode ec_mode_sp = {.ops = &ec_ops, .single_producer = true};

static int ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ck_ec32_wait sleeps in its own back-off steps (2 ms, then 16 ms, ...) and
 * looks at the caller's deadline only between them: clamp each step to our
 * deadline and end the wait once it has passed. */
static int clamp_to_deadline(const struct ck_ec_wait_state *st, struct timespec *step)
{
	const struct timespec *mine = st->data;
	if (!ts_before(&st->now, mine))
		return 1;
	if (ts_before(mine, step))
		*step = *mine;
	return 0;
}

void tmo__lf_ec_wait(struct ck_ec32 *ec, uint32_t v, int64_t deadline_ns)
{
	if (deadline_ns == INT64_MAX) {
		ck_ec32_wait(ec, &ec_mode, v, NULL);
	} else {
#ifdef TMO_LF_TEST_HOOKS /* a test's step (hook.h): the futex reads the real clock */
		extern _Atomic int64_t tmo__test_clock_skew;
		deadline_ns -= atomic_load_explicit(&tmo__test_clock_skew, memory_order_relaxed);
#endif
		struct timespec ts = tmo__ts_from_ns(deadline_ns);
		ck_ec32_wait_pred(ec, &ec_mode, v, clamp_to_deadline, &ts, &ts);
	}
}

void tmo__lf_ec_wake(struct ck_ec32 *ec) { ck_ec32_add(ec, &ec_mode, 1); }
void tmo__lf_ec_wake_sp(struct ck_ec32 *ec) { ck_ec32_add(ec, &ec_mode_sp, 1); }
uint32_t tmo__lf_ec_value(struct ck_ec32 *ec) { return ck_ec32_value(ec); }

/* ---- waking the timer thread ------------------------------------------------- */

void tmo__lf_heavy_barrier(struct tmo *e)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (!(tw & LF_TW_FENCE) &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
		/* Not registered (a child after fork, say): every arm fences from
		 * now on.  Arms that read the word before this did not; the caller
		 * sleeps at most one tick this time, and looks again. */
		atomic_fetch_or_explicit(&e->tickw, LF_TW_FENCE, memory_order_seq_cst);
	}
	atomic_thread_fence(memory_order_seq_cst);
}

void tmo__lf_wake_for(struct tmo *e, int64_t deadline_lower)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire); /* sleep_until is stored before SLEEPING */
	if (!(tw & LF_TW_SLEEPING))
		return; /* awake, or woken by an earlier caller (below) */
	int64_t until = atomic_load_explicit(&e->sleep_until, memory_order_relaxed);
	if (deadline_lower > 0 && deadline_lower >= until)
		return; /* it wakes by itself in time */
	tmo__lf_ec_wake(&e->wake_ec);
	/* One wake-up is enough: the callers after this one see it awake.
	 * Woken, the thread may not run for a while (its CPU busy), and every
	 * arm due before its wake-up would add to the event count meanwhile,
	 * a locked add each.  Cleared only if the word is still the one read
	 * above: the thread has not published a tick since, so the count it
	 * sleeps on was read before this add, and its wait returns (a new
	 * sleep's word has a new tick: the CAS fails and leaves it alone).
	 * Until its next round the thread counts as polling, and an arm that
	 * sees no SLEEPING counts on the look before its next sleep, as it
	 * does while it polls (Waking the timer thread, above). */
#ifndef TMO_LF_PLANT_WAKE_EACH /* tests/hooked/lf_woken.c must catch it */
	atomic_compare_exchange_strong_explicit(&e->tickw, &tw, tw & ~(uint64_t)LF_TW_SLEEPING,
	                                        memory_order_relaxed, memory_order_relaxed);
#endif
}
