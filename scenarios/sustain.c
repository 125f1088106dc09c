/*
 * sustain — sustained load: does what the engine holds plateau?
 *
 * --threads workers (default 2) arm and cancel flat out for `duration` per
 * engine (times TMO_TEST_SCALE, at least 1 s).  Each worker owns a window of
 * W timers and cycles through it: cancel the slot's previous arm, arm
 * it again.  Timeouts are drawn per arm: 7 in 8 are long (1..120 s: always
 * cancelled first), 1 in 8 short (0..100 us: often fired before the worker
 * comes back to cancel), so the fire path, the cancel path and the
 * cancel-meets-fire path all run.
 *
 * Meanwhile the harness thread samples tmo_stats (held_bytes, held_nodes,
 * pending, threads) and the process RSS every `sample` period and reports
 * every sample as a row (param t_ms=...), then the max.
 *
 * Violations (a correctness scenario):
 *  - held_bytes above HELD_BASE + threads x HELD_PER_THREAD (512 KiB +
 *    192 KiB a worker: 896 KiB at the default 2) at any sample: the
 *    engine-held memory must plateau low under a steady population of
 *    threads x W timers, whatever it retains for cancelled ones.  A
 *    worker's share covers its W timers at up to 128 bytes each (an
 *    engine's record per armed timer) and 64 KiB of per-thread structures
 *    (node caches, a per-thread wheel); the base, what an engine keeps
 *    whatever the threads (pools, heap arrays, its timer thread's caches);
 *  - still growing: a ramp, even under the limit (a leak, or a timer thread
 *    that falls behind).  The run's samples in sixths: the peak of each of
 *    the last three sixths above every peak before it, and the last third's
 *    peak above 1.5 times the first third's plus GROWTH_SLACK.  A pool
 *    that grows in steps to its high-water mark is not a ramp, whenever its
 *    last step lands: a step raises the peak of one sixth, and the sixths
 *    after it stay level (a late step under load, the wheel's node pool
 *    from 5,632 to 8,704 nodes at 3.3 s of a 5 s run, failed a check of
 *    the thirds alone);
 *  - exactly once, per arm: cancel returned PREVENTED yet the callback ran,
 *    or FIRED/WAITED and the callback had not run exactly once;
 *  - any arm error other than a capacity refusal (TMO_EAGAIN, TMO_ENOMEM:
 *    counted and reported, as retention does), any cancel error, pending
 *    != 0 once every arm was resolved.
 * RSS is reported, not checked (allocator caches and sanitizer shadow
 * memory are not the engine's).
 *
 * The thread engine (one OS thread per armed timer) gets a window of
 * W_THREAD instead of W: its figure is its own — threads (max) and
 * RSS are reported beside held_bytes, which counts its records, not its
 * stacks.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "kit/util.h"

static const struct sk_metric sustain_metrics[] = {
	{"held_bytes", "bytes"}, {"held_nodes", "nodes"}, {"rss_delta_bytes", "bytes"},
	{"held_bytes_max", "bytes"}, {"held_nodes_max", "nodes"}, {"threads_max", "threads"},
	{"rss_delta_max_bytes", "bytes"}, {"arms_refused", "count"}, {"pairs_per_s", "ops/s"},
	{"held_limit_bytes", "bytes"}, {"violations", "count"}, {NULL, NULL},
};

static const struct sk_size sustain_sizes[] = {
	{"duration", 60, 5, "s"}, {"sample", 250, 100, "ms"}, {0},
};

#define PRINT_EVERY_NS TMO_NSEC_PER_SEC /* stdout: one line a second */
#define W 1024
#define W_THREAD 8
#define HELD_BASE (UINT64_C(512) << 10)
#define HELD_PER_THREAD (UINT64_C(192) << 10)
#define HELD_LIMIT(threads) (HELD_BASE + (uint64_t)(threads)*HELD_PER_THREAD)
#define GROWTH_SLACK (UINT64_C(64) << 10)
/* The fewest samples a run takes: two in each sixth (sus_ramp). */
#define SAMPLES_MIN 12
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
			              i, sk_cancel_name(rc), runs);
	} else if (w->violations++ < 5) {
		sk_violation(w->run, "slot %zu: cancel of an armed timer returned %s (%d)", i,
		              sk_cancel_name(rc), rc);
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

/* One run's state: its workers and their timers, the samples. */
struct sus_ctx {
	const struct sk_run *run;
	int nworkers, started;
	size_t w, nsamples_max, ns;
	int64_t duration, period, t0;
	struct sus_worker *ws;
	struct sus_slot *slots;
	struct sus_sample *smp, after, settled, mx;
	struct tmo *e;
	uint64_t rss0, first_third, last_third;
	uint64_t sixth[6]; /* the peak of each sixth of the samples */
	atomic_int stop;
	/* the workers' totals, after the join */
	uint64_t arms, prevented, fired, refused, wv;
	double secs;
};

static void sus_free(struct sus_ctx *c) { free(c->ws), free(c->slots), free(c->smp); }

/* Sizes from the run, the arrays, the engine.  Returns 0 or an error. */
static int sus_setup(const struct sk_run *run, struct sus_ctx *c)
{
	c->run = run;
	c->nworkers = run->threads < MAX_WORKERS ? run->threads : MAX_WORKERS;
	c->w = sk_thread_per_timer(run) ? W_THREAD : W;
	/* TMO_TEST_SCALE (sanitizer runs) shortens the run, to 1 s at least. */
	c->duration = (int64_t)((double)sk_size_ns(run, "duration") * sk_scale());
	if (c->duration < TMO_NSEC_PER_SEC)
		c->duration = TMO_NSEC_PER_SEC;
	c->period = sk_size_ns(run, "sample");
	c->nsamples_max = (size_t)(c->duration / c->period) + 2;
	if (c->nsamples_max < SAMPLES_MIN)
		c->nsamples_max = SAMPLES_MIN;
	c->ws = calloc((size_t)c->nworkers, sizeof *c->ws);
	c->slots = calloc((size_t)c->nworkers * c->w, sizeof *c->slots);
	c->smp = calloc(c->nsamples_max, sizeof *c->smp);
	if (c->ws == NULL || c->slots == NULL || c->smp == NULL) {
		sus_free(c);
		return TMO_ENOMEM;
	}
	/* The callers' timers are in the RSS baseline (touch every page). */
	for (size_t off = 0; off < (size_t)c->nworkers * c->w * sizeof *c->slots; off += 4096)
		((volatile char *)c->slots)[off] = 0;
	c->rss0 = sk_rss_bytes();
	int rc = sk_create_or_skip(run, &c->e);
	if (rc != 0)
		sus_free(c);
	return rc;
}

/* Start the workers; returns the violations (a worker that did not start). */
static int sus_start(struct sus_ctx *c)
{
	atomic_init(&c->stop, 0);
	for (int k = 0; k < c->nworkers; k++) {
		c->ws[k] = (struct sus_worker){.run = c->run,
		                               .e = c->e,
		                               .slots = c->slots + (size_t)k * c->w,
		                               .w = c->w,
		                               .seed = c->run->seed * 0x100000001b3ull + (uint64_t)k + 1,
		                               .stop = &c->stop};
		if (pthread_create(&c->ws[k].th, NULL, sus_worker_main, &c->ws[k]) != 0) {
			sk_violation(c->run, "could not start worker thread %d", k);
			return 1;
		}
		c->started++;
	}
	return 0;
}

/* Sample every period for the run's duration, and at least SAMPLES_MIN
 * times, each at least a period after the one before; then stop and join
 * the workers and take the after and settled samples.  On a starved
 * machine the sampler fell behind and caught up back to back, or ran out
 * of the duration with too few samples to judge a ramp (5 in 1 s beside
 * four CPU hogs, and the ramp check needs six): the run goes on until it
 * has them, spaced in time, instead. */
static void sus_sample_and_stop(struct sus_ctx *c)
{
	int64_t next_print = 0;
	c->t0 = sk_now_ns();
	while (c->ns < c->nsamples_max) {
		int64_t at = (int64_t)(c->ns + 1) * c->period; /* from t0 */
		if (c->ns > 0 && at < c->smp[c->ns - 1].t_ns + c->period)
			at = c->smp[c->ns - 1].t_ns + c->period;
		sk_wait_until(c->t0 + at);
		sus_take(c->e, c->t0, c->rss0, &c->smp[c->ns]);
		if (c->smp[c->ns].t_ns >= next_print) {
			sus_print("load", &c->smp[c->ns]);
			next_print += PRINT_EVERY_NS;
		}
		c->ns++;
		sk_progress(c->run, "sustained arm+cancel",
		            (double)(sk_now_ns() - c->t0) / (double)c->duration);
		if (sk_now_ns() - c->t0 >= c->duration && c->ns >= SAMPLES_MIN)
			break;
	}
	atomic_store(&c->stop, 1);
	for (int k = 0; k < c->started; k++) {
		pthread_join(c->ws[k].th, NULL);
		c->arms += c->ws[k].arms;
		c->prevented += c->ws[k].prevented;
		c->fired += c->ws[k].fired;
		c->refused += c->ws[k].refused;
		c->wv += c->ws[k].violations;
	}
	c->secs = (double)(sk_now_ns() - c->t0) / 1e9;
	sus_take(c->e, c->t0, c->rss0, &c->after);
	sus_print("after", &c->after);
	/* Idle for SETTLE: what a lazily-freeing engine still holds then tells
	 * a lag (released once it catches up) from a leak or a pool that keeps
	 * its high-water mark.  Reported, not checked. */
	sk_sleep_ns(SETTLE);
	sus_take(c->e, c->t0, c->rss0, &c->settled);
	sus_print("settled", &c->settled);
}

/* Every sample as rows; the max, the max of the first and last thirds and
 * of each sixth. */
static void sus_report_samples(struct sus_ctx *c)
{
	struct sus_sample *mx = &c->mx;
	for (size_t i = 0; i < c->ns; i++) {
		const struct sus_sample *x = &c->smp[i];
		long long t_ms = (long long)(x->t_ns / TMO_NSEC_PER_MSEC);
		sk_report_fmt(c->run, "held_bytes", (double)x->s.held_bytes, "bytes", "t_ms=%lld", t_ms);
		sk_report_fmt(c->run, "held_nodes", (double)x->s.held_nodes, "nodes", "t_ms=%lld", t_ms);
		sk_report_fmt(c->run, "rss_delta_bytes", (double)x->rss, "bytes", "t_ms=%lld", t_ms);
		if (x->s.held_bytes > mx->s.held_bytes)
			mx->s.held_bytes = x->s.held_bytes;
		if (x->s.held_nodes > mx->s.held_nodes)
			mx->s.held_nodes = x->s.held_nodes;
		if (x->s.threads > mx->s.threads)
			mx->s.threads = x->s.threads;
		if (x->rss > mx->rss)
			mx->rss = x->rss;
		if (i < c->ns / 3 && x->s.held_bytes > c->first_third)
			c->first_third = x->s.held_bytes;
		if (i >= c->ns - c->ns / 3 && x->s.held_bytes > c->last_third)
			c->last_third = x->s.held_bytes;
		if (x->s.held_bytes > c->sixth[i * 6 / c->ns])
			c->sixth[i * 6 / c->ns] = x->s.held_bytes;
	}
}

/* The summary rows and lines. */
static void sus_report(struct sus_ctx *c)
{
	const struct sk_run *run = c->run;
	const struct sus_sample *mx = &c->mx;
	size_t ns = c->ns;
	sk_report_fmt(run, "held_bytes_max", (double)mx->s.held_bytes, "bytes", "samples=%zu", ns);
	sk_report_fmt(run, "held_nodes_max", (double)mx->s.held_nodes, "nodes", "samples=%zu", ns);
	sk_report_fmt(run, "threads_max", (double)mx->s.threads, "threads", "samples=%zu", ns);
	sk_report_fmt(run, "rss_delta_max_bytes", (double)mx->rss, "bytes", "samples=%zu", ns);
	sk_report_fmt(run, "held_bytes", (double)c->after.s.held_bytes, "bytes", "%s", "when=after");
	sk_report_fmt(run, "held_nodes", (double)c->after.s.held_nodes, "nodes", "%s", "when=after");
	sk_report_fmt(run, "held_bytes", (double)c->settled.s.held_bytes, "bytes", "%s",
	              "when=settled");
	sk_report_fmt(run, "held_nodes", (double)c->settled.s.held_nodes, "nodes", "%s",
	              "when=settled");
	sk_report_fmt(run, "arms_refused", (double)c->refused, "count", "%s",
	              "error=TMO_EAGAIN|TMO_ENOMEM");
	sk_report_fmt(run, "pairs_per_s", (double)c->arms / c->secs, "ops/s", "threads=%d,window=%zu",
	              c->started, c->w);
	printf("  max     held %llu bytes (limit %llu), %llu nodes, %llu threads, RSS %+.2f MiB; "
	       "%llu samples\n",
	       (unsigned long long)mx->s.held_bytes, (unsigned long long)HELD_LIMIT(c->started),
	       (unsigned long long)mx->s.held_nodes, (unsigned long long)mx->s.threads,
	       (double)mx->rss / (1024.0 * 1024.0), (unsigned long long)ns);
	printf("  %llu arms in %.1f s (%.0f pairs/s): %llu prevented, %llu fired; %llu arms refused "
	       "(TMO_EAGAIN/TMO_ENOMEM)\n",
	       (unsigned long long)c->arms, c->secs, (double)c->arms / c->secs,
	       (unsigned long long)c->prevented, (unsigned long long)c->fired,
	       (unsigned long long)c->refused);
	sk_report_fmt(run, "held_limit_bytes", (double)HELD_LIMIT(c->started), "bytes", "threads=%d",
	              c->started);
}

/* A ramp: each of the last three sixths peaks above every sixth before it,
 * and the last third's peak is above 1.5 times the first third's plus
 * GROWTH_SLACK. */
static int sus_ramp(const struct sus_ctx *c)
{
	if (c->ns < 6)
		return 0;
	uint64_t before = c->sixth[0];
	for (int k = 1; k < 6; k++) {
		if (k >= 3 && c->sixth[k] <= before)
			return 0;
		if (c->sixth[k] > before)
			before = c->sixth[k];
	}
	return c->last_third > c->first_third + c->first_third / 2 + GROWTH_SLACK;
}

/* The limit, the plateau, exactly once, nothing pending: the violations. */
static int sus_check(const struct sus_ctx *c)
{
	const struct sk_run *run = c->run;
	int v = 0;
	if (c->mx.s.held_bytes > HELD_LIMIT(c->started)) {
		sk_violation(run, "the engine held %llu bytes at its peak, above the %llu-byte limit "
		                  "for %d threads (512 KiB + 192 KiB a thread)",
		             (unsigned long long)c->mx.s.held_bytes,
		             (unsigned long long)HELD_LIMIT(c->started), c->started);
		v++;
	}
	if (sus_ramp(c)) {
		sk_violation(run, "held bytes still growing: a new peak in each of the last three "
		                  "sixths of the run (%llu, %llu, %llu bytes); max %llu in the first "
		                  "third, %llu in the last",
		             (unsigned long long)c->sixth[3], (unsigned long long)c->sixth[4],
		             (unsigned long long)c->sixth[5], (unsigned long long)c->first_third,
		             (unsigned long long)c->last_third);
		v++;
	}
	if (c->arms != c->prevented + c->fired) {
		sk_violation(run, "%llu arms but %llu resolved (%llu prevented + %llu fired)",
		             (unsigned long long)c->arms, (unsigned long long)(c->prevented + c->fired),
		             (unsigned long long)c->prevented, (unsigned long long)c->fired);
		v++;
	}
	if (c->after.s.pending != 0) {
		sk_violation(run, "every arm was resolved, yet the engine reports %llu pending",
		             (unsigned long long)c->after.s.pending);
		v++;
	}
	return v;
}

static int sustain_run(const struct sk_run *run)
{
	struct sus_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return TMO_ENOMEM;
	int rc = sus_setup(run, c);
	if (rc != 0) {
		free(c);
		return rc;
	}
	printf("sustain: %d threads arm+cancel flat out for %.0f s, %zu timers each (1 in 8 short, "
	       "0..100 us; the rest 1..120 s); limit %llu bytes held\n",
	       c->nworkers, (double)c->duration / 1e9, c->w,
	       (unsigned long long)HELD_LIMIT(c->nworkers));
	int v = sus_start(c);
	sus_sample_and_stop(c);
	v += (int)(c->wv < 1000000 ? c->wv : 1000000);
	sus_report_samples(c);
	sus_report(c);
	v += sus_check(c);
	tmo_destroy(&c->e);
	sus_free(c);
	free(c);
	return v;
}

const struct sk_scenario sk_scenario_sustain = {
	.name = "sustain",
	.summary = "threads arm+cancel flat out for 60 s: held bytes/nodes and RSS "
	           "sampled; held must plateau <= 512 KiB + 192 KiB a thread, exactly once per arm",
	.correctness = 1,
	.run = sustain_run,
	.params = "--threads workers (at most 256) each cycle through 1,024 timers (thread "
	          "engine: 8) for `duration`: cancel, arm again, 7 in 8 timeouts 1..120 s, 1 in 8 "
	          "0..100 us; engine-held bytes and nodes and RSS sampled every `sample`. --seed "
	          "draws the timeouts.",
	.fails_when = "engine-held memory is above 512 KiB + 192 KiB per worker (896 KiB at 2) at "
	              "any sample, or still growing (a new peak in each of the run's last three "
	              "sixths, the last third's peak above 1.5 x the first third's plus 64 KiB); a "
	              "timer fired other than exactly once per arm; an arm error other than a "
	              "capacity refusal; a cancel error; timers pending once every arm was resolved.",
	.metrics = sustain_metrics,
	.sizes = sustain_sizes,
};
