/*
 * retention — the core.async document's web service (seed 003): every
 * request arms a 120 s timeout and cancels it about 1 ms later, because the
 * service answered.  N requests (its sizes table: 1M).  What does the
 * engine still hold?
 *
 *  cancelled  arm a batch of BATCH timeouts, cancel each batch 1 ms after its
 *             first arm; sample the engine's held nodes/bytes (tmo_stats)
 *             and RSS after every batch (peak), then right after the last
 *             cancel (after) and SETTLE later (settled: an engine may free
 *             lazily, but within a time that does not grow with the
 *             timeout).
 *  abandoned  the same arms never cancelled (what the document's users did
 *             first): held right after arming; the engine holds them for
 *             120 s, and destroy has to cancel them.
 *
 * RSS deltas are against the process before the engine existed, the
 * caller's timers already allocated and touched.  The thread engine's arms
 * are threads: it gets THREAD_N requests (printed).
 */
#include "kit/util.h"

static const struct sk_metric retention_metrics[] = {
	{"held_bytes", "bytes"}, {"held_nodes", "nodes"}, {"pending", "timers"},
	{"threads", "threads"}, {"rss_delta_bytes", "bytes"}, {"arm_eagain_retries", "count"},
	{"capacity", "timers"}, {"destroy_ms", "ms"}, {"requests", "count"},
	{"violations", "count"}, {NULL, NULL},
};

static const struct sk_target retention_targets[] = {
	{.label = "retention after cancels (settled): %s", .engines = "condvar,mpsc,wheel",
	 .metric = "held_bytes", .param = "variant=cancelled,when=settled", .scale = 1.0 / 1024,
	 .cmp = SK_AT_MOST, .bound = 64, .unit = " KiB"},
	{0},
};

static const struct sk_size retention_sizes[] = {
	{"requests", 1000000, 200000, ""}, {"thread_requests", 5000, 1000, ""}, {0},
};

#define BATCH 1000
#define TIMEOUT (120 * TMO_NSEC_PER_SEC)
#define SETTLE (100 * TMO_NSEC_PER_MSEC)

static void rt_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg; }

struct rt_sample {
	struct tmo_stats s;
	int64_t rss;
};

static void rt_sample(struct tmo *e, struct rt_sample *out, uint64_t rss0)
{
	tmo_stats(e, &out->s);
	out->rss = (int64_t)sk_rss_bytes() - (int64_t)rss0;
}

static void rt_row(const struct sk_run *run, const char *variant, const char *when,
                   const struct rt_sample *x)
{
	sk_report_fmt(run, "held_bytes", (double)x->s.held_bytes, "bytes", "variant=%s,when=%s", variant,
	          when);
	sk_report_fmt(run, "held_nodes", (double)x->s.held_nodes, "nodes", "variant=%s,when=%s", variant,
	          when);
	sk_report_fmt(run, "pending", (double)x->s.pending, "timers", "variant=%s,when=%s", variant,
	              when);
	sk_report_fmt(run, "threads", (double)x->s.threads, "threads", "variant=%s,when=%s", variant,
	              when);
	sk_report_fmt(run, "rss_delta_bytes", (double)x->rss, "bytes", "variant=%s,when=%s", variant,
	              when);
	printf("  %-9s %-8s held %10llu bytes %9llu nodes, %8llu pending, %5llu threads, RSS %+9.1f "
	       "MiB\n",
	       variant, when, (unsigned long long)x->s.held_bytes, (unsigned long long)x->s.held_nodes,
	       (unsigned long long)x->s.pending, (unsigned long long)x->s.threads,
	       (double)x->rss / (1024.0 * 1024.0));
}

/* Each request arms a 120 s timeout and cancels it ~1 ms later, in
 * batches: what the engine holds at the peak, after, and settled.  Adds the
 * violations to *v; returns 0 or the error that stopped it. */
static int rt_cancelled(const struct sk_run *run, struct tmo_timer *ts, size_t n, int *v)
{
	uint64_t rss0 = sk_rss_bytes();
	struct tmo *e = NULL;
	int rc = sk_create_or_skip(run, &e);
	if (rc != 0)
		return rc;
	struct rt_sample peak = {0}, x;
	size_t bad = 0, short_of = 0;
	uint64_t retries = 0;
	unsigned char refused[BATCH]; /* short of a shared limit: not armed */
	for (size_t b = 0; b < n; b += BATCH) {
		size_t end = b + BATCH < n ? b + BATCH : n;
		int64_t first = sk_now_ns();
		for (size_t i = b; i < end; i++) {
			rc = sk_arm_retry(e, &ts[i], TIMEOUT, rt_cb, NULL, &retries);
			refused[i - b] = rc == TMO_EAGAIN;
			short_of += rc == TMO_EAGAIN;
			if (rc != 0 && rc != TMO_EAGAIN && bad++ == 0)
				sk_violation(run, "request %zu: arm of a 120 s timeout returned %s", i,
				              tmo_errname(rc));
		}
		rt_sample(e, &x, rss0);
		if (x.s.held_bytes > peak.s.held_bytes)
			peak.s = x.s;
		if (x.rss > peak.rss)
			peak.rss = x.rss;
		sk_wait_until(first + TMO_NSEC_PER_MSEC);
		for (size_t i = b; i < end; i++) {
			if (refused[i - b])
				continue;
			rc = tmo_cancel(e, &ts[i]);
			if (rc != TMO_CANCEL_PREVENTED && bad++ == 0)
				sk_violation(run, "request %zu: cancel 1 ms into a 120 s timeout returned %s (%d)",
				              i, rc < 0 ? tmo_errname(rc) : "not TMO_CANCEL_PREVENTED", rc);
		}
		sk_progress(run, "cancelled variant", (double)end / (double)n / 2);
	}
	*v += bad > 0;
	if (retries > 0)
		printf("  note: %llu arms answered TMO_EAGAIN (a limit shared with other processes) "
		       "and were retried\n", (unsigned long long)retries);
	if (short_of > 0)
		printf("  note: %zu arms refused with TMO_EAGAIN for %lld s on end (a per-user limit "
		       "such as RLIMIT_SIGPENDING, which other processes share): left out\n",
		       short_of, (long long)(SK_ARM_PATIENCE_NS / TMO_NSEC_PER_SEC));
	sk_report_fmt(run, "arm_eagain_retries", (double)retries, "count", "variant=cancelled");
	rt_row(run, "cancelled", "peak", &peak);
	rt_sample(e, &x, rss0);
	rt_row(run, "cancelled", "after", &x);
	sk_sleep_ns(SETTLE);
	rt_sample(e, &x, rss0);
	rt_row(run, "cancelled", "settled", &x);
	if (x.s.pending != 0) {
		sk_violation(run, "after every timer was cancelled the engine reports %llu pending",
		              (unsigned long long)x.s.pending);
		(*v)++;
	}
	tmo_destroy(&e);

	return 0;
}

/* Every request arms a 120 s timeout and leaves it: what the engine holds,
 * and how long destroy takes with them pending. */
static int rt_abandoned(const struct sk_run *run, struct tmo_timer *ts, size_t n, int *v)
{
	memset(ts, 0, n * sizeof *ts);
	uint64_t rss0 = sk_rss_bytes();
	struct tmo *e = NULL;
	int rc = sk_create_or_skip(run, &e);
	if (rc != 0)
		return rc;
	struct rt_sample x;
	size_t armed = 0;
	for (size_t i = 0; i < n; i++) {
		rc = tmo_arm(e, &ts[i], TIMEOUT, rt_cb, NULL);
		if (rc == TMO_EAGAIN || rc == TMO_ENOMEM) {
			/* A named capacity limit (kernel timers, memory), not a broken
			 * contract: reported as the engine's capacity. */
			printf("  abandoned: the engine took %zu pending timers, then returned %s\n", i,
			       tmo_errname(rc));
			sk_report_fmt(run, "capacity", (double)i, "timers", "variant=abandoned,error=%s",
			          tmo_errname(rc));
			break;
		}
		if (rc != 0) {
			sk_violation(run, "abandoned: arm %zu of a 120 s timeout returned %s", i,
			              tmo_errname(rc));
			(*v)++;
			break;
		}
		armed++;
		if ((i & 0xfff) == 0)
			sk_progress(run, "abandoned variant", 0.5 + (double)i / (double)n / 2);
	}
	rt_sample(e, &x, rss0);
	rt_row(run, "abandoned", "armed", &x);
	int64_t t0 = sk_now_ns();
	tmo_destroy(&e);
	double destroy_ms = (double)(sk_now_ns() - t0) / 1e6;
	sk_report_fmt(run, "destroy_ms", destroy_ms, "ms", "variant=abandoned,timers=%zu", armed);
	printf("  abandoned: destroy with %zu pending took %.1f ms; without destroy they would be held "
	       "for 120 s\n",
	       armed, destroy_ms);
	return 0;
}

static int retention_run(const struct sk_run *run)
{
	size_t n = (size_t)sk_scaled(
	        (uint64_t)sk_size(run, sk_thread_per_timer(run) ? "thread_requests" : "requests"));
	struct tmo_timer *ts = calloc(n, sizeof *ts);
	if (ts == NULL)
		return TMO_ENOMEM;
	/* Touch every page so the caller's timers are in the RSS baseline
	 * (volatile: a compiler may turn malloc+memset into calloc, and calloc
	 * pages stay untouched until written). */
	for (size_t off = 0; off < n * sizeof *ts; off += 4096)
		((volatile char *)ts)[off] = 0;
	int v = 0;
	printf("retention: %zu requests, each arming a 120 s timeout%s\n", n,
	       sk_thread_per_timer(run) ? " (sized down: a thread per timer)" : "");
	int rc = rt_cancelled(run, ts, n, &v);
	if (rc == 0)
		rc = rt_abandoned(run, ts, n, &v);
	free(ts);
	if (rc != 0)
		return rc == SK_SKIPPED && v > 0 ? v : rc; /* violations still count */
	sk_report_fmt(run, "requests", (double)n, "count", "%s", "");
	return v;
}

const struct sk_scenario sk_scenario_retention = {
	.name = "retention",
	.summary = "1M requests arm a 120 s timeout and cancel it ~1 ms later: engine-held bytes/nodes and RSS "
	           "at peak, after, settled; and abandoned",
	.correctness = 1,
	.run = retention_run,
	.params = "`requests` requests (the thread engine: thread_requests) each arm a 120 s "
	          "timeout, cancelled in batches of 1,000 about 1 ms later; engine-held bytes and "
	          "nodes (tmo_stats) and RSS at the peak, after the last cancel and 100 ms later; "
	          "then the same arms abandoned (never cancelled) and destroy. Held memory is "
	          "reported (targets table), not failed.",
	.fails_when = "an arm fails (a TMO_EAGAIN is retried for up to 10 s first, then left out as "
	              "a shortage of a shared limit, said), a cancel does not "
	              "prevent its pending timer, or timers are still pending after every one was "
	              "cancelled.",
	.metrics = retention_metrics,
	.sizes = retention_sizes,
	.targets = retention_targets,
};
