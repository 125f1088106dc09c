/*
 * ec: the futex-backed event counts the lock-free core sleeps and wakes on
 * (CK's ck_ec32): the timer thread's sleep (clock.c's wake-up protocol),
 * and a cancel's wait for a running callback.
 */
#include <limits.h>
#include <stdatomic.h>
#include <linux/futex.h>
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
