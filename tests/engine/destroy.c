/*
 * Destroy with a million pending timers: `test_engine_destroy ENGINE [N]`.
 *
 * Arms N timers (default 1,000,000; 100,000 for an engine with
 * THREAD_PER_TIMER, whose every timer is an OS thread), one in a thousand due
 * within 50 ms so callbacks run while arming and while destroying, the rest
 * due in 100 s or more; then destroys the engine with them pending and times
 * it.  Checks: no callback runs or is still running after destroy returned,
 * no long timer ever fired, the library's live allocations and the process's
 * threads are back to where they were before create.
 *
 * An engine bounded by the kernel (threads, kernel timers) may refuse arms
 * with TMO_EAGAIN (or TMO_ENOMEM): the test then destroys what was accepted
 * and says how many that was.  Any other arm error is a failure.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC

static atomic_int destroyed, late, inflight;
static atomic_llong fires, long_fires;

#define LONG_ARG ((void *)1)

static void cb(struct tmo_timer *t, void *arg)
{
	atomic_fetch_add(&inflight, 1);
	if (atomic_load(&destroyed))
		atomic_fetch_add(&late, 1);
	if (arg == LONG_ARG)
		atomic_fetch_add(&long_fires, 1);
	atomic_fetch_add(&fires, 1);
	atomic_fetch_sub(&inflight, 1);
}

int main(int argc, char **argv)
{
	et_init(argc, argv, "engine_destroy");
	long want = et_thread_per_timer() ? 100000 : 1000000;
	if (argc > 2)
		want = strtol(argv[2], NULL, 0);
	want = et_scaled(want, 1000);
	/* A thread under a sanitizer costs megabytes of shadow memory: scale a
	 * thread-per-timer engine twice (10,000 threads exhausted TSan). */
	if (et_thread_per_timer())
		want = et_scaled(want, 1000);
	if (et_thread_per_timer())
		printf("THREAD_PER_TIMER engine: %ld timers (one OS thread each), not 1M\n", want);

	CHECK_EQ(et_warm_up(), 0);
	struct tmo_timer *t = calloc((size_t)want, sizeof *t);
	CHECK(t != NULL);
	if (t == NULL)
		return TEST_EXIT();
	int64_t live0 = tmo_testing_live_allocs();
	int threads0 = et_thread_count();
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create_ops(et_ops, NULL, &e), 0);
	if (e == NULL)
		return TEST_EXIT();

	long accepted = 0, shorts = 0;
	int refused = 0;
	int64_t t0 = tmo_now_ns();
	for (long i = 0; i < want; i++) {
		int is_short = i % 1000 == 0;
		int64_t to = is_short ? (i / 1000 % 50) * MS
		                      : 100 * TMO_NSEC_PER_SEC + (i * 7919) % TMO_NSEC_PER_SEC;
		int rc = tmo_arm(e, &t[i], to, cb, is_short ? NULL : LONG_ARG);
		if (rc == TMO_EAGAIN || rc == TMO_ENOMEM) {
			refused = rc;
			break;
		}
		CHECK_EQ(rc, 0);
		if (rc != 0)
			break;
		accepted++;
		shorts += is_short;
	}
	int64_t t_arm = tmo_now_ns() - t0;
	if (refused)
		printf("arm refused with %s after %ld of %ld timers: the engine's limit "
		       "(kernel timers or threads); destroying what was accepted\n",
		       tmo_errname(refused), accepted, want);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	long long fired_before = atomic_load(&fires);

	t0 = tmo_now_ns();
	CHECK_EQ(tmo_destroy(&e), 0);
	int64_t t_destroy = tmo_now_ns() - t0;
	atomic_store(&destroyed, 1);
	int inflight_at_return = atomic_load(&inflight);
	long long fired_at_return = atomic_load(&fires);

	et_sleep_ns(100 * MS); /* a callback that escaped destroy shows now */
	int threads1 = et_wait_thread_count(threads0, 5 * TMO_NSEC_PER_SEC);
	int64_t live1 = tmo_testing_live_allocs();

	printf("engine %s: %ld timers armed in %.1f ms (%.0f ns/arm), %llu pending at destroy "
	       "(held %.1f MiB), destroy took %.1f ms (%.0f ns/timer)\n",
	       et_name, accepted, t_arm / 1e6, accepted ? (double)t_arm / accepted : 0.0,
	       (unsigned long long)st.pending, st.held_bytes / 1048576.0, t_destroy / 1e6,
	       st.pending ? (double)t_destroy / (double)st.pending : 0.0);
	printf("  fired: %lld before destroy, %lld by its return (%ld short timers); "
	       "long timers fired %lld; after return: late %d, in flight %d; threads %d -> %d, "
	       "live allocs %lld -> %lld\n",
	       fired_before, fired_at_return, shorts, (long long)atomic_load(&long_fires),
	       atomic_load(&late), inflight_at_return, threads0, threads1, (long long)live0,
	       (long long)live1);

	CHECK(accepted >= (refused ? 1 : want));
	/* every long timer is pending until destroy */
	CHECK(st.pending >= (uint64_t)(accepted - shorts));
	CHECK_EQ(atomic_load(&late), 0);
	CHECK_EQ(inflight_at_return, 0);
	CHECK_EQ(atomic_load(&long_fires), 0);
	CHECK(atomic_load(&fires) <= shorts);
	CHECK_EQ(live1, live0);
	CHECK_EQ(threads1, threads0);
	free(t);
	return TEST_EXIT();
}
