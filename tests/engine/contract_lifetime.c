/*
 * The engine contract (include/tmo/tmo.h), letting go of timers and of the
 * engine, checked on one engine: `test_engine_contract_lifetime ENGINE
 * [CASE]`.  A timer may be freed as soon as its cancel returns, or by its
 * own callback, and the engine never touches it again; destroy with timers
 * pending cancels them (none fires), waits for the running callback, runs
 * none after it returns, and gives back every thread and allocation.  How
 * every case is built: tests/kit/contract_test.h.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract_test.h"
#include "engine_test.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HR_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(HR_ASAN)
#include <sanitizer/asan_interface.h>
#define HR_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define HR_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define HR_POISON(p, n) ((void)(p), (void)(n))
#define HR_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ---- freeing timers: right after cancel, and inside the callback --------- */

/* Heap-allocated timers.  Where the caller may free one, the case buries it
 * instead (hr_bury): fills it with a pattern and keeps it, poisoned under
 * AddressSanitizer, until the engine is destroyed; then hr_exhume finds
 * every buried timer whose bytes changed.  So an engine that writes to a
 * timer it was told it may forget fails the case in every build, and one
 * that reads it fails under AddressSanitizer. */
struct heap_rec {
	struct tmo_timer t;
	int id;
	int payload;
};
static int hr_n;                 /* timers in the case */
static struct heap_rec **hr_grave; /* [id]: buried, or NULL */
static atomic_int *hr_fires;
static atomic_llong hr_total;
static atomic_int hr_bad_arg;

static void hr_bury(struct heap_rec *r, unsigned char pattern)
{
	memset(r, pattern, sizeof *r);
	HR_POISON(r, sizeof *r);
}

/* Free the buried timers; returns how many no longer hold their pattern. */
static int hr_exhume(unsigned char pattern)
{
	int changed = 0;
	for (int i = 0; i < hr_n; i++) {
		struct heap_rec *r = hr_grave[i];
		if (r == NULL)
			continue;
		HR_UNPOISON(r, sizeof *r);
		const unsigned char *b = (const unsigned char *)r;
		size_t k = 0;
		while (k < sizeof *r && b[k] == pattern)
			k++;
		changed += k < sizeof *r;
		free(r);
	}
	free(hr_grave);
	hr_grave = NULL;
	return changed;
}

static void hr_cb(struct tmo_timer *t, void *arg)
{
	struct heap_rec *r = tmo_container_of(t, struct heap_rec, t);
	if (arg != r || r->id < 0 || r->id >= hr_n) { /* not a timer it armed: buried */
		atomic_fetch_add(&hr_bad_arg, 1);
		return;
	}
	r->payload++;
	atomic_fetch_add(&hr_fires[r->id], 1);
	atomic_fetch_add(&hr_total, 1);
}

static void hr_free_cb(struct tmo_timer *t, void *arg)
{
	struct heap_rec *r = tmo_container_of(t, struct heap_rec, t);
	int id = r->id;
	hr_grave[id] = r; /* each callback its own slot: no race */
	hr_bury(r, 0xdb);
	atomic_fetch_add(&hr_fires[id], 1);
	atomic_fetch_add(&hr_total, 1);
}

/* A case's start: n fire counters at 0, an empty grave, its random stream,
 * a fresh engine (NULL: the check failed). */
static struct tmo *hr_start(int n, struct sk_rng *rng, uint64_t stream)
{
	hr_n = n;
	hr_fires = calloc((size_t)n, sizeof *hr_fires);
	hr_grave = calloc((size_t)n, sizeof *hr_grave);
	atomic_store(&hr_total, 0);
	atomic_store(&hr_bad_arg, 0);
	et_rng_seed(rng, stream);
	return ct_new_engine();
}

/* Timer number i, on the heap. */
static struct heap_rec *hr_new(int i)
{
	struct heap_rec *r = malloc(sizeof *r);
	tmo_timer_init(&r->t);
	r->id = i;
	r->payload = 0;
	return r;
}

static void test_free_after_cancel(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 300 : 1000, 50);
	char *prevented = calloc((size_t)n, 1);
	struct sk_rng rng;
	struct tmo *e = hr_start(n, &rng, 11);
	if (!e)
		return;
	int bad = 0;
	for (int i = 0; i < n; i++) {
		struct heap_rec *r = hr_new(i);
		static const int64_t choice[] = {0, 20 * US, 300 * US, 100 * MS};
		CHECK_EQ(ct_arm(e, &r->t, choice[sk_below(&rng, 4)], hr_cb, r), 0);
		if (sk_below(&rng, 4) == 0)
			et_sleep_ns((int64_t)sk_below(&rng, 500 * US));
		int rc = tmo_cancel(e, &r->t);
		if (rc == TMO_CANCEL_PREVENTED)
			prevented[i] = 1;
		else if (!ct_is_resolved(rc))
			bad++;
		hr_grave[i] = r;
		hr_bury(r, 0xa5);
	}
	et_sleep_ns(120 * MS);
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += atomic_load(&hr_fires[i]) + prevented[i] != 1;
	ct_destroy_engine(&e);
	int touched = hr_exhume(0xa5);
	printf("  free-after-cancel: %d timers freed on cancel's return, %lld fired, %d wrong, "
	       "%d written after\n",
	       n, (long long)atomic_load(&hr_total), wrong, touched);
	CHECK_EQ(bad, 0);
	CHECK_EQ(wrong, 0);
	CHECK_EQ(touched, 0);
	CHECK_EQ(atomic_load(&hr_bad_arg), 0);
	free(hr_fires);
	free(prevented);
}

static void test_callback_frees_timer(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 200 : 1000, 50);
	struct sk_rng rng;
	struct tmo *e = hr_start(n, &rng, 12);
	if (!e)
		return;
	for (int i = 0; i < n; i++) {
		struct heap_rec *r = hr_new(i);
		CHECK_EQ(ct_arm(e, &r->t, (int64_t)sk_below(&rng, 2 * MS), hr_free_cb, r), 0);
	}
	CHECK(et_wait_ge(&hr_total, n, LIVENESS));
	et_sleep_ns(10 * MS);
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += atomic_load(&hr_fires[i]) != 1;
	ct_destroy_engine(&e);
	int touched = hr_exhume(0xdb);
	printf("  callback-frees-timer: %d timers, %d wrong, %d written after\n", n, wrong, touched);
	CHECK_EQ(wrong, 0);
	CHECK_EQ(touched, 0);
	free(hr_fires);
}

/* ---- destroy with pending timers ----------------------------------------- */

static atomic_int dp_destroyed, dp_late, dp_inflight, dp_slow_started, dp_slow_returned;
static atomic_llong dp_fires, dp_long_fires;
/* arg of a timer due in 5 s or more: long after the arming (a thread each,
 * under a sanitizer, can take a second for all) and the destroy after it. */
#define DP_LONG ((void *)1)

static void dp_cb(struct tmo_timer *t, void *arg)
{
	atomic_fetch_add(&dp_inflight, 1);
	if (atomic_load(&dp_destroyed))
		atomic_fetch_add(&dp_late, 1);
	if (arg == DP_LONG)
		atomic_fetch_add(&dp_long_fires, 1); /* destroy must cancel, not fire */
	atomic_fetch_add(&dp_fires, 1);
	atomic_fetch_sub(&dp_inflight, 1);
}

/* The callback that runs when destroy is called: it holds its thread from
 * just before the destroy call (dp_destroying) for DP_HOLD, so a destroy
 * that does not wait for it returns while it still runs, whatever the
 * machine's speed: its end is never a race with the arming before. */
#define DP_HOLD (100 * MS)
static atomic_int dp_destroying, dp_slow_saw_destroy;

static void dp_slow_cb(struct tmo_timer *t, void *arg)
{
	atomic_fetch_add(&dp_inflight, 1);
	atomic_store(&dp_slow_started, 1);
	if (ET_WAIT_UNTIL(atomic_load(&dp_destroying), LIVENESS))
		atomic_store(&dp_slow_saw_destroy, 1);
	et_sleep_ns(DP_HOLD);
	atomic_store(&dp_slow_returned, 1);
	atomic_fetch_sub(&dp_inflight, 1);
}

static void test_destroy_pending(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 200 : 2000, 50);
	struct tmo_timer *t = calloc((size_t)n + 1, sizeof *t);
	int64_t live0 = tmo_testing_live_allocs();
	int threads0 = et_thread_count();
	atomic_store(&dp_destroyed, 0);
	atomic_store(&dp_late, 0);
	atomic_store(&dp_fires, 0);
	atomic_store(&dp_long_fires, 0);
	atomic_store(&dp_slow_started, 0);
	atomic_store(&dp_slow_returned, 0);
	atomic_store(&dp_destroying, 0);
	atomic_store(&dp_slow_saw_destroy, 0);
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	struct sk_rng rng;
	et_rng_seed(&rng, 13);
	/* a callback that is running when destroy is called */
	CHECK_EQ(ct_arm(e, &t[n], 0, dp_slow_cb, NULL), 0);
	for (int i = 0; i < n; i++) {
		/* a tenth may fire before destroy, the rest are pending */
		int64_t to = i % 10 == 0 ? (int64_t)sk_below(&rng, 2 * MS)
		                         : 5 * TMO_NSEC_PER_SEC + (int64_t)sk_below(&rng, 10 * TMO_NSEC_PER_SEC);
		CHECK_EQ(ct_arm(e, &t[i], to, dp_cb, i % 10 == 0 ? NULL : DP_LONG), 0);
	}
	CHECK(ET_WAIT_UNTIL(atomic_load(&dp_slow_started), LIVENESS));
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	long long fired_before = atomic_load(&dp_fires);
	atomic_store(&dp_destroying, 1);
	int64_t t0 = tmo_now_ns();
	ct_destroy_engine(&e);
	int64_t dt = tmo_now_ns() - t0;
	atomic_store(&dp_destroyed, 1);
	int inflight = atomic_load(&dp_inflight);
	int slow_done = atomic_load(&dp_slow_returned);
	et_sleep_ns(50 * MS);
	int threads1 = et_wait_thread_count(threads0, LIVENESS);
	printf("  destroy-pending: %llu pending destroyed in %lld us, %lld fired before, %lld "
	       "long ones fired; late %d, in flight at return %d, threads %d -> %d, live allocs "
	       "%lld -> %lld\n",
	       (unsigned long long)st.pending, (long long)(dt / US), fired_before,
	       (long long)atomic_load(&dp_long_fires), atomic_load(&dp_late), inflight, threads0,
	       threads1, (long long)live0, (long long)tmo_testing_live_allocs());
	CHECK_EQ(atomic_load(&dp_late), 0);
	CHECK_EQ(atomic_load(&dp_long_fires), 0);
	/* Not a check on the engine: that the callback ran on until destroy
	 * was called, so the case tried what it checks. */
	CHECK_EQ(atomic_load(&dp_slow_saw_destroy), 1);
	CHECK_EQ(inflight, 0);
	CHECK_EQ(slow_done, 1);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	CHECK_EQ(threads1, threads0);
	free(t);
}

int main(int argc, char **argv)
{
	ct_begin(argc, argv, "engine_contract_lifetime");
	RUN(test_free_after_cancel);
	RUN(test_callback_frees_timer);
	RUN(test_destroy_pending);
	return ct_end();
}
