/*
 * sustain — sustained load: does what the engine holds plateau?
 *
 * --threads workers (default 2) arm and cancel flat out for 60 s per engine
 * (5 s with --quick; times TMO_TEST_SCALE, at least 1 s).  Each worker owns a window of W timers and cycles
 * through it: cancel the slot's previous arm, arm it again.  Timeouts are
 * drawn per arm: 7 in 8 are long (1..120 s: always cancelled first), 1 in 8
 * short (0..100 us: often fired before the worker comes back to cancel), so
 * the fire path, the cancel path and the cancel-meets-fire path all run.
 *
 * Meanwhile the harness thread samples tmo_stats (held_bytes, held_nodes,
 * pending, threads) and the process RSS every SAMPLE period and reports
 * every sample as a row (param t_ms=...), then the max.
 *
 * Violations (a correctness scenario):
 *  - held_bytes above HELD_BASE + threads x HELD_PER_THREAD (512 KiB +
 *    192 KiB a worker: 896 KiB at the default 2) at any sample: the
 *    engine-held memory must plateau low under a steady population of
 *    threads x W timers, whatever it retains for cancelled ones.  A worker's
 *    share covers its W timers at up to 128 bytes each (an engine's record
 *    per armed timer) and 64 KiB of per-thread structures (node caches, a
 *    per-thread wheel); the base, what an engine keeps whatever the threads
 *    (pools, heap arrays, its timer thread's caches);
 *  - still growing: the max over the last third of the run above 1.5 times
 *    the max over the first third plus GROWTH_SLACK (a leak, or a timer
 *    thread that falls behind, shows as a ramp even under the limit);
 *  - exactly once, per arm: cancel returned PREVENTED yet the callback ran,
 *    or FIRED/WAITED and the callback had not run exactly once;
 *  - any arm error other than a capacity refusal (TMO_EAGAIN, TMO_ENOMEM:
 *    counted and reported, as retention does), any cancel error, pending
 *    != 0 once every arm was resolved.
 * RSS is reported, not checked (allocator caches and sanitizer shadow
 * memory are not the engine's).
 *
 * The thread engine (one OS thread per armed timer) gets a window of
 * W_THREAD instead of W: its figure is its own — threads (max) and RSS are
 * reported beside held_bytes, which counts its records, not its stacks.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "kit/util.h"

/* Every figure this scenario reports (sk.h: struct sk_metric). */
static const struct sk_metric sustain_metrics[] = {
	{"held_bytes", "bytes"}, {"held_nodes", "nodes"}, {"rss_delta_bytes", "bytes"},
	{"held_bytes_max", "bytes"}, {"held_nodes_max", "nodes"}, {"threads_max", "threads"},
	{"rss_delta_max_bytes", "bytes"}, {"arms_refused", "count"}, {"pairs_per_s", "ops/s"},
	{"held_limit_bytes", "bytes"}, {"violations", "count"}, {NULL, NULL},
};

static int sustain_run(const struct sk_run *run);

const struct sk_scenario sk_scenario_sustain = {
	.name = "sustain",
	.summary = "threads arm+cancel flat out for 60 s (5 s --quick): held bytes/nodes and RSS "
	           "sampled; held must plateau <= 512 KiB + 192 KiB a thread, exactly once per arm",
	.correctness = 1,
	.run = sustain_run,
	.params = "--threads workers (at most 256) each cycle through 1,024 timers (thread "
	          "engine: 8) for 60 s (--quick: 5 s): cancel, arm again, 7 in 8 timeouts 1..120 "
	          "s, 1 in 8 0..100 us; engine-held bytes and nodes and RSS sampled every 250 ms "
	          "(--quick: 100 ms). --seed draws the timeouts.",
	.fails_when = "engine-held memory is above 512 KiB + 192 KiB per worker (896 KiB at 2) at "
	              "any sample, or still growing (the last "
	              "third's peak above 1.5 x the first third's plus 64 KiB); a timer fired other "
	              "than exactly once per arm; an arm error other than a capacity refusal; a "
	              "cancel error; timers pending once every arm was resolved.",
	.metrics = sustain_metrics,
};

#define DURATION_FULL (60 * TMO_NSEC_PER_SEC)
#define DURATION_QUICK (5 * TMO_NSEC_PER_SEC)
#define SAMPLE_FULL (250 * TMO_NSEC_PER_MSEC)
#define SAMPLE_QUICK (100 * TMO_NSEC_PER_MSEC)
#define PRINT_EVERY_NS TMO_NSEC_PER_SEC /* stdout: one line a second */
#define W 1024
#define W_THREAD 8
#define HELD_BASE (UINT64_C(512) << 10)
#define HELD_PER_THREAD (UINT64_C(192) << 10)
#define HELD_LIMIT(threads) (HELD_BASE + (uint64_t)(threads)*HELD_PER_THREAD)
#define GROWTH_SLACK (UINT64_C(64) << 10)
#define SETTLE (200 * TMO_NSEC_PER_MSEC)
#define MAX_WORKERS 256

struct sus_slot {
	struct tmo_timer t;
	atomic_int cb_runs; /* callbacks for the slot's current arm */
	int armed;
};

struct sus_worker {
	const struct sk_run *run;
	struct tmo *e;
	struct sus_slot *slots;
	size_t w;
	uint64_t seed;
	atomic_int *stop;
	pthread_t th;
	/* results, read after join */
	uint64_t arms, prevented, fired, refused, violations;
};

static void sus_fired(struct tmo_timer *t, void *arg)
{
	struct sus_slot *s = tmo_container_of(t, struct sus_slot, t);
	atomic_fetch_add_explicit(&s->cb_runs, 1, memory_order_relaxed);
	(void)arg;
}

/* Resolve the slot's current arm with a cancel and check exactly-once. */
static void sus_resolve(struct sus_worker *w, struct sus_slot *s, size_t i)
{
	int rc = tmo_cancel(w->e, &s->t);
	/* cancel has returned: a callback that ran for this arm has returned. */
	int runs = atomic_load_explicit(&s->cb_runs, memory_order_relaxed);
	if (rc == TMO_CANCEL_PREVENTED) {
		w->prevented++;
		if (runs != 0 && w->violations++ < 5)
			sk_violation(w->run, "slot %zu: cancel returned TMO_CANCEL_PREVENTED but the "
			              "callback ran %d time(s)", i, runs);
	} else if (rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED) {
		w->fired++;
		if (runs != 1 && w->violations++ < 5)
			sk_violation(w->run, "slot %zu: cancel returned %s but the callback ran %d time(s)",
			              i, rc == TMO_CANCEL_FIRED ? "TMO_CANCEL_FIRED" : "TMO_CANCEL_WAITED",
			              runs);
	} else if (w->violations++ < 5) {
		sk_violation(w->run, "slot %zu: cancel of an armed timer returned %s (%d)", i,
		              rc < 0 ? tmo_errname(rc) : "an unexpected result", rc);
	}
	s->armed = 0;
}

static void *sus_worker_main(void *arg)
{
	struct sus_worker *w = arg;
	struct sk_rng rng = {w->seed};
	size_t i = 0;

	while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
		struct sus_slot *s = &w->slots[i];
		if (s->armed)
			sus_resolve(w, s, i);
		uint64_t r = sk_rand(&rng);
		int64_t timeout = (r & 7) == 0 ? (int64_t)((r >> 3) % (100 * TMO_NSEC_PER_USEC))
		                               : TMO_NSEC_PER_SEC +
		                                     (int64_t)((r >> 3) % (119 * TMO_NSEC_PER_SEC));
		atomic_store_explicit(&s->cb_runs, 0, memory_order_relaxed);
		int rc = tmo_arm(w->e, &s->t, timeout, sus_fired, NULL);
		if (rc == 0) {
			s->armed = 1;
			w->arms++;
		} else if (rc == TMO_EAGAIN || rc == TMO_ENOMEM) {
			/* a named capacity refusal (kernel timers, threads, memory;
			 * limits shared with other processes): reported, not a
			 * broken contract */
			if (w->refused++ < 3)
				printf("  [%s] slot %zu: arm refused with %s (capacity; counted)\n",
				       w->run->ops->name, i, tmo_errname(rc));
		} else if (w->violations++ < 5) {
			sk_violation(w->run, "slot %zu: arm of %lld ns returned %s", i, (long long)timeout,
			              tmo_errname(rc));
		}
		if (++i == w->w)
			i = 0;
	}
	for (size_t j = 0; j < w->w; j++)
		if (w->slots[j].armed)
			sus_resolve(w, &w->slots[j], j);
	return NULL;
}

struct sus_sample {
	int64_t t_ns;
	struct tmo_stats s;
	int64_t rss;
};

static void sus_take(struct tmo *e, int64_t t0, uint64_t rss0, struct sus_sample *out)
{
	out->t_ns = sk_now_ns() - t0;
	tmo_stats(e, &out->s);
	out->rss = (int64_t)sk_rss_bytes() - (int64_t)rss0;
}

static void sus_print(const char *when, const struct sus_sample *x)
{
	printf("  %-7s %7.2f s  held %9llu bytes %7llu nodes  pending %6llu  threads %4llu  RSS "
	       "%+8.2f MiB\n",
	       when, (double)x->t_ns / 1e9, (unsigned long long)x->s.held_bytes,
	       (unsigned long long)x->s.held_nodes, (unsigned long long)x->s.pending,
	       (unsigned long long)x->s.threads, (double)x->rss / (1024.0 * 1024.0));
}

static int sustain_run(const struct sk_run *run)
{
	int nworkers = run->threads < MAX_WORKERS ? run->threads : MAX_WORKERS;
	size_t w = sk_thread_per_timer(run) ? W_THREAD : W;
	/* TMO_TEST_SCALE (sanitizer runs) shortens the run, to 1 s at least. */
	int64_t duration = (int64_t)((double)(run->quick ? DURATION_QUICK : DURATION_FULL) * sk_scale());
	if (duration < TMO_NSEC_PER_SEC)
		duration = TMO_NSEC_PER_SEC;
	int64_t period = run->quick ? SAMPLE_QUICK : SAMPLE_FULL;
	size_t nsamples_max = (size_t)(duration / period) + 2;
	int v = 0;

	struct sus_worker *ws = calloc((size_t)nworkers, sizeof *ws);
	struct sus_slot *slots = calloc((size_t)nworkers * w, sizeof *slots);
	struct sus_sample *smp = calloc(nsamples_max, sizeof *smp);
	if (ws == NULL || slots == NULL || smp == NULL) {
		free(ws), free(slots), free(smp);
		return TMO_ENOMEM;
	}
	/* The callers' timers are in the RSS baseline (touch every page). */
	for (size_t off = 0; off < (size_t)nworkers * w * sizeof *slots; off += 4096)
		((volatile char *)slots)[off] = 0;

	uint64_t rss0 = sk_rss_bytes();
	struct tmo *e = NULL;
	int rc = tmo_create_ops(run->ops, NULL, &e);
	if (rc != 0) {
		free(ws), free(slots), free(smp);
		return rc;
	}
	printf("sustain: %d threads arm+cancel flat out for %.0f s, %zu timers each (1 in 8 short, "
	       "0..100 us; the rest 1..120 s); limit %llu bytes held\n",
	       nworkers, (double)duration / 1e9, w, (unsigned long long)HELD_LIMIT(nworkers));

	atomic_int stop;
	atomic_init(&stop, 0);
	int started = 0;
	for (int k = 0; k < nworkers; k++) {
		ws[k] = (struct sus_worker){.run = run,
		                           .e = e,
		                           .slots = slots + (size_t)k * w,
		                           .w = w,
		                           .seed = run->seed * 0x100000001b3ull + (uint64_t)k + 1,
		                           .stop = &stop};
		if (pthread_create(&ws[k].th, NULL, sus_worker_main, &ws[k]) != 0) {
			sk_violation(run, "could not start worker thread %d", k);
			v++;
			break;
		}
		started++;
	}

	int64_t t0 = sk_now_ns(), next_print = 0;
	size_t ns = 0;
	while (ns < nsamples_max) {
		sk_wait_until(t0 + (int64_t)(ns + 1) * period);
		sus_take(e, t0, rss0, &smp[ns]);
		if (smp[ns].t_ns >= next_print) {
			sus_print("load", &smp[ns]);
			next_print += PRINT_EVERY_NS;
		}
		ns++;
		sk_progress(run, "sustained arm+cancel", (double)(sk_now_ns() - t0) / (double)duration);
		if (sk_now_ns() - t0 >= duration)
			break;
	}
	atomic_store(&stop, 1);
	uint64_t arms = 0, prevented = 0, fired = 0, refused = 0, wv = 0;
	for (int k = 0; k < started; k++) {
		pthread_join(ws[k].th, NULL);
		arms += ws[k].arms;
		prevented += ws[k].prevented;
		fired += ws[k].fired;
		refused += ws[k].refused;
		wv += ws[k].violations;
	}
	double secs = (double)(sk_now_ns() - t0) / 1e9;
	struct sus_sample after;
	sus_take(e, t0, rss0, &after);
	sus_print("after", &after);
	/* Idle for SETTLE: what a lazily-freeing engine still holds then tells
	 * a lag (released once it catches up) from a leak or a pool that keeps
	 * its high-water mark.  Reported, not checked. */
	struct sus_sample settled;
	sk_sleep_ns(SETTLE);
	sus_take(e, t0, rss0, &settled);
	sus_print("settled", &settled);
	v += (int)(wv < 1000000 ? wv : 1000000);

	/* every sample, then the max; limit and growth checks */
	struct sus_sample mx = {0};
	uint64_t first_third = 0, last_third = 0;
	for (size_t i = 0; i < ns; i++) {
		const struct sus_sample *x = &smp[i];
		sk_report_fmt(run, "held_bytes", (double)x->s.held_bytes, "bytes", "t_ms=%lld",
		          (long long)(x->t_ns / TMO_NSEC_PER_MSEC));
		sk_report_fmt(run, "held_nodes", (double)x->s.held_nodes, "nodes", "t_ms=%lld",
		          (long long)(x->t_ns / TMO_NSEC_PER_MSEC));
		sk_report_fmt(run, "rss_delta_bytes", (double)x->rss, "bytes", "t_ms=%lld",
		          (long long)(x->t_ns / TMO_NSEC_PER_MSEC));
		if (x->s.held_bytes > mx.s.held_bytes)
			mx.s.held_bytes = x->s.held_bytes;
		if (x->s.held_nodes > mx.s.held_nodes)
			mx.s.held_nodes = x->s.held_nodes;
		if (x->s.threads > mx.s.threads)
			mx.s.threads = x->s.threads;
		if (x->rss > mx.rss)
			mx.rss = x->rss;
		if (i < ns / 3 && x->s.held_bytes > first_third)
			first_third = x->s.held_bytes;
		if (i >= ns - ns / 3 && x->s.held_bytes > last_third)
			last_third = x->s.held_bytes;
	}
	sk_report_fmt(run, "held_bytes_max", (double)mx.s.held_bytes, "bytes", "samples=%zu", ns);
	sk_report_fmt(run, "held_nodes_max", (double)mx.s.held_nodes, "nodes", "samples=%zu", ns);
	sk_report_fmt(run, "threads_max", (double)mx.s.threads, "threads", "samples=%zu", ns);
	sk_report_fmt(run, "rss_delta_max_bytes", (double)mx.rss, "bytes", "samples=%zu", ns);
	sk_report_fmt(run, "held_bytes", (double)after.s.held_bytes, "bytes", "%s", "when=after");
	sk_report_fmt(run, "held_nodes", (double)after.s.held_nodes, "nodes", "%s", "when=after");
	sk_report_fmt(run, "held_bytes", (double)settled.s.held_bytes, "bytes", "%s", "when=settled");
	sk_report_fmt(run, "held_nodes", (double)settled.s.held_nodes, "nodes", "%s", "when=settled");
	sk_report_fmt(run, "arms_refused", (double)refused, "count", "%s", "error=TMO_EAGAIN|TMO_ENOMEM");
	sk_report_fmt(run, "pairs_per_s", (double)arms / secs, "ops/s", "threads=%d,window=%zu", started,
	          w);
	printf("  max     held %llu bytes (limit %llu), %llu nodes, %llu threads, RSS %+.2f MiB; "
	       "%llu samples\n",
	       (unsigned long long)mx.s.held_bytes, (unsigned long long)HELD_LIMIT(started),
	       (unsigned long long)mx.s.held_nodes, (unsigned long long)mx.s.threads,
	       (double)mx.rss / (1024.0 * 1024.0), (unsigned long long)ns);
	printf("  %llu arms in %.1f s (%.0f pairs/s): %llu prevented, %llu fired; %llu arms refused "
	       "(TMO_EAGAIN/TMO_ENOMEM)\n",
	       (unsigned long long)arms, secs, (double)arms / secs, (unsigned long long)prevented,
	       (unsigned long long)fired, (unsigned long long)refused);

	sk_report_fmt(run, "held_limit_bytes", (double)HELD_LIMIT(started), "bytes", "threads=%d",
	          started);
	if (mx.s.held_bytes > HELD_LIMIT(started)) {
		sk_violation(run, "the engine held %llu bytes at its peak, above the %llu-byte limit "
		              "for %d threads (512 KiB + 192 KiB a thread)",
		              (unsigned long long)mx.s.held_bytes,
		              (unsigned long long)HELD_LIMIT(started), started);
		v++;
	}
	if (ns >= 3 && last_third > first_third + first_third / 2 + GROWTH_SLACK) {
		sk_violation(run, "held bytes still growing: max %llu in the first third of the run, "
		              "%llu in the last",
		              (unsigned long long)first_third, (unsigned long long)last_third);
		v++;
	}
	if (arms != prevented + fired) {
		sk_violation(run, "%llu arms but %llu resolved (%llu prevented + %llu fired)",
		              (unsigned long long)arms, (unsigned long long)(prevented + fired),
		              (unsigned long long)prevented, (unsigned long long)fired);
		v++;
	}
	if (after.s.pending != 0) {
		sk_violation(run, "every arm was resolved, yet the engine reports %llu pending",
		              (unsigned long long)after.s.pending);
		v++;
	}
	tmo_destroy(&e);
	free(ws), free(slots), free(smp);
	sk_report(run, "violations", "", v, "count");
	return v;
}
