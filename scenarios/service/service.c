/*
 * service — the shape real services run (core.async's seed: timeouts held
 * for the length of a request, cancelled when the reply comes).
 *
 * --threads workers (and first one worker alone, when --threads > 1) each
 * serve requests for `duration`: a request arms 1-4 timeouts (each drawn
 * from 100 ms, 1 s, 30 s, 120 s), holds them for a service time drawn from
 * a log-normal (median 1 ms, p99 50 ms, capped at 1 s; --seed draws), and
 * cancels them when it completes.  A drawn 1 % of requests outlive their
 * shortest timeout by 1-10 ms (a shortest timeout of 30 s or more is made
 * 100 ms for them, to keep the run bounded), and those timeouts fire (with
 * the few the log-normal's tail outlives).  A worker keeps up to `inflight`
 * requests in flight (sv.h: an event-driven server), so it serves as fast
 * as it and the engine can: requests/s is the engine's figure.  After
 * `duration` no request starts, and those in flight complete (the drain).
 *
 * Reported per worker count (param threads=T): requests/s and timer
 * pairs/s (timeouts armed per second, each resolved by a cancel or a
 * fire); CPU per request: the process's (getrusage) over the requests
 * started; the harness's own (one worker serving the same requests with no
 * engine, arm and cancel skipped, for BASELINE: its draws and
 * bookkeeping) and the engine's, the difference; and the part not on the
 * workers' threads (the engine's own threads: process CPU minus every
 * worker's and the harness thread's thread CPU time); what the engine holds (tmo_stats, sampled every
 * `sample`: the peak; settled, 100 ms after the last cancel, as retention
 * measures it); lateness p50/p99/max of the timeouts that fired (callback
 * start - (clock read before the arm + timeout)).
 *
 * Violations (a correctness scenario): every armed timeout is fired or
 * cancelled exactly once, never early: a cancel that says PREVENTED after
 * the callback ran, FIRED/WAITED with no callback run, a callback on a
 * timeout not armed (twice, or after its cancel), callbacks that do not
 * add up to the cancels that saw them, a fire before its deadline; any arm
 * error but a capacity refusal (TMO_EAGAIN, TMO_ENOMEM: the request waits
 * and retries, counted), any cancel error.  A refusal that lasts 1 s with
 * nothing in flight is a limit other processes hold: skipped, with why.
 * The thread engine (an OS thread per armed timeout) keeps at most
 * thread_inflight requests in flight per worker.
 */
#include <sys/resource.h>

#include "sv.h"

static const struct sk_metric service_metrics[] = {
	{"requests_per_s", "requests/s"}, {"pairs_per_s", "pairs/s"},
	{"cpu_ns_per_request", "ns"}, {"harness_cpu_ns_per_request", "ns"},
	{"engine_cpu_ns_per_request", "ns"}, {"engine_threads_cpu_ns_per_request", "ns"},
	{"held_bytes", "bytes"}, {"held_nodes", "nodes"}, {"lateness_ns", "ns"},
	{"requests", "count"}, {"outlived", "count"}, {"fired", "count"}, {"cancelled", "count"}, {"early", "count"},
	{"arms_refused", "count"}, {"inflight_full", "count"}, {"violations", "count"},
	{NULL, NULL},
};

static const struct sk_target service_targets[] = {
	{.label = "service, 1 thread: wheel requests/s / condvar", .engines = "wheel",
	 .metric = "requests_per_s", .param = "threads=1", .per_engine = "condvar",
	 .cmp = SK_AT_LEAST, .bound = 3, .unit = "x"},
	{.label = "service, 2 threads: wheel requests/s / condvar", .engines = "wheel",
	 .metric = "requests_per_s", .param = "threads=2", .per_engine = "condvar",
	 .cmp = SK_AT_LEAST, .bound = 3, .unit = "x",
	 .missing = "not measured (wheel or condvar not run, or --threads<2)"},
	/* resolution (1 ms tick) + 1 ms */
	{.label = "service, 1 thread: wheel lateness p99 of fired timeouts", .engines = "wheel",
	 .metric = "lateness_ns", .param = "threads=1,q=p99", .scale = 1e-6, .cmp = SK_AT_MOST,
	 .bound = 2, .unit = " ms"},
	{0},
};

static const struct sk_size service_sizes[] = {
	{"duration", 5, 1, "s"}, {"inflight", 65536, 16384, "requests"},
	{"thread_inflight", 16, 16, "requests"}, {"sample", 10, 10, "ms"}, {0},
};

#define SETTLE (100 * TMO_NSEC_PER_MSEC)
#define BASELINE TMO_NSEC_PER_SEC /* the no-engine run, times TMO_TEST_SCALE */
#define STRAY (20 * TMO_NSEC_PER_MSEC) /* let a callback after its cancel show */

static void sv_worker_free(struct sv_worker *w)
{
	free(w->reqs), free(w->bucket), free(w->late);
}

/* A worker with up to `inflight` requests in flight (`thread_inflight`
 * when capped: the thread engine's). */
static int sv_worker_init(const struct sk_run *run, struct sv_shared *sh, struct sv_worker *w,
                          int index, int threads, int capped)
{
	memset(w, 0, sizeof *w);
	w->sh = sh;
	w->index = index;
	w->rng.s = run->seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)(threads * 1000 + index);
	w->inflight_max = (size_t)sk_size(run, capped ? "thread_inflight" : "inflight");
	w->reqs = calloc(w->inflight_max, sizeof *w->reqs);
	w->bucket = calloc(BUCKETS, sizeof *w->bucket);
	if (w->reqs == NULL || w->bucket == NULL) {
		sv_worker_free(w);
		return TMO_ENOMEM;
	}
	for (size_t i = 0; i < w->inflight_max; i++)
		w->reqs[i].next = i + 1 < w->inflight_max ? &w->reqs[i + 1] : NULL;
	w->free = &w->reqs[0];
	return 0;
}

/* The peak of what the engine holds while the workers serve. */
static void sv_sample_until(const struct sk_run *run, struct sv_shared *sh, int64_t end,
                            struct tmo_stats *peak, int64_t start, int64_t total)
{
	int64_t period = sk_size_ns(run, "sample");
	for (int64_t now = sk_now_ns(); now < end; now = sk_now_ns()) {
		struct tmo_stats s;
		tmo_stats(sh->e, &s);
		if (s.held_bytes > peak->held_bytes)
			peak->held_bytes = s.held_bytes;
		if (s.held_nodes > peak->held_nodes)
			peak->held_nodes = s.held_nodes;
		sk_progress(run, "serving", (double)(now - start) / (double)total);
		sk_sleep_ns(end - now < period ? end - now : period);
	}
}

/* The workers' tallies, summed. */
struct sv_sum {
	uint64_t requests, arms, full, fired, cancelled, refused, early, outlived;
	uint64_t v_both, v_none, v_arm, v_cancel;
	int64_t cpu_ns;
	int starved, first_arm_error, first_cancel_error;
	int64_t *late;
	size_t nlate;
};

static int sv_sum(struct sv_worker *ws, int n, struct sv_sum *s)
{
	memset(s, 0, sizeof *s);
	size_t nlate = 0;
	for (int i = 0; i < n; i++)
		nlate += ws[i].nlate;
	s->late = malloc((nlate ? nlate : 1) * sizeof *s->late);
	if (s->late == NULL)
		return TMO_ENOMEM;
	for (int i = 0; i < n; i++) {
		struct sv_worker *w = &ws[i];
		s->requests += w->requests, s->arms += w->arms, s->full += w->full;
		s->fired += w->fired, s->cancelled += w->cancelled, s->refused += w->refused;
		s->early += w->early, s->outlived += w->outlived, s->v_both += w->v_both, s->v_none += w->v_none;
		s->v_arm += w->v_arm, s->v_cancel += w->v_cancel, s->cpu_ns += w->cpu_ns;
		s->starved |= w->starved;
		if (s->first_arm_error == 0)
			s->first_arm_error = w->first_arm_error;
		if (s->first_cancel_error == 0)
			s->first_cancel_error = w->first_cancel_error;
		if (w->nlate > 0)
			memcpy(s->late + s->nlate, w->late, w->nlate * sizeof *w->late);
		s->nlate += w->nlate;
	}
	return 0;
}

/* Count and name the violations of one phase. */
static int sv_violations(const struct sk_run *run, int threads, const struct sv_sum *s,
                         long long callbacks, long long bad_fires)
{
	int v = 0;
#define SV_CHECK(cond, ...)                           \
	do {                                          \
		if (cond) {                           \
			sk_violation(run, __VA_ARGS__); \
			v++;                          \
		}                                     \
	} while (0)
	SV_CHECK(s->v_both, "threads=%d: %llu cancels said PREVENTED after the callback ran",
	         threads, (unsigned long long)s->v_both);
	SV_CHECK(s->v_none, "threads=%d: %llu cancels said FIRED/WAITED, yet no callback ran",
	         threads, (unsigned long long)s->v_none);
	SV_CHECK(bad_fires, "threads=%d: %lld callbacks ran on a timeout that was not armed (a "
	         "second fire, or a fire after its cancel)", threads, bad_fires);
	/* Each callback is seen once: by a cancel (fired, or PREVENTED too:
	 * v_both) or as a bad fire. */
	SV_CHECK(callbacks != (long long)(s->fired + s->v_both) + bad_fires,
	         "threads=%d: %lld callbacks ran, but cancels saw %llu", threads, callbacks,
	         (unsigned long long)(s->fired + s->v_both));
	SV_CHECK(s->early, "threads=%d: %llu timeouts fired before their deadline", threads,
	         (unsigned long long)s->early);
	SV_CHECK(s->v_arm, "threads=%d: %llu arms failed (first: %s)", threads,
	         (unsigned long long)s->v_arm, tmo_errname(s->first_arm_error));
	SV_CHECK(s->v_cancel, "threads=%d: %llu cancels returned an error (first: %s)", threads,
	         (unsigned long long)s->v_cancel, tmo_errname(s->first_cancel_error));
#undef SV_CHECK
	return v;
}

static void sv_report(const struct sk_run *run, int threads, const struct sv_sum *s,
                      double secs, int64_t cpu_other, const struct tmo_stats *peak,
                      const struct tmo_stats *settled, double harness)
{
	double req = (double)s->requests;
	sk_report_fmt(run, "requests_per_s", req / secs, "requests/s", "threads=%d", threads);
	sk_report_fmt(run, "pairs_per_s", (double)s->arms / secs, "pairs/s", "threads=%d", threads);
	double cpu = (double)(s->cpu_ns + cpu_other) / req, engine = (double)cpu_other / req;
	sk_report_fmt(run, "cpu_ns_per_request", cpu, "ns", "threads=%d", threads);
	sk_report_fmt(run, "engine_threads_cpu_ns_per_request", engine, "ns", "threads=%d", threads);
	sk_report_fmt(run, "engine_cpu_ns_per_request", cpu - harness, "ns", "threads=%d", threads);
	sk_report_fmt(run, "held_bytes", (double)peak->held_bytes, "bytes", "threads=%d,when=peak",
	              threads);
	sk_report_fmt(run, "held_bytes", (double)settled->held_bytes, "bytes",
	              "threads=%d,when=settled", threads);
	sk_report_fmt(run, "held_nodes", (double)peak->held_nodes, "nodes", "threads=%d,when=peak",
	              threads);
	sk_report_fmt(run, "held_nodes", (double)settled->held_nodes, "nodes",
	              "threads=%d,when=settled", threads);
	qsort(s->late, s->nlate, sizeof *s->late, sk_cmp_i64);
	double q[3] = {NAN, NAN, NAN};
	if (s->nlate > 0) {
		q[0] = (double)sk_quantile_i64(s->late, s->nlate, 0.5);
		q[1] = (double)sk_quantile_i64(s->late, s->nlate, 0.99);
		q[2] = (double)s->late[s->nlate - 1];
	}
	static const char *qn[3] = {"p50", "p99", "max"};
	for (int k = 0; k < 3; k++)
		sk_report_fmt(run, "lateness_ns", q[k], "ns", "threads=%d,q=%s", threads, qn[k]);
	sk_report_fmt(run, "requests", req, "count", "threads=%d", threads);
	sk_report_fmt(run, "outlived", (double)s->outlived, "count", "threads=%d", threads);
	sk_report_fmt(run, "fired", (double)s->fired, "count", "threads=%d", threads);
	sk_report_fmt(run, "cancelled", (double)s->cancelled, "count", "threads=%d", threads);
	sk_report_fmt(run, "early", (double)s->early, "count", "threads=%d", threads);
	sk_report_fmt(run, "arms_refused", (double)s->refused, "count", "threads=%d", threads);
	sk_report_fmt(run, "inflight_full", (double)s->full, "count", "threads=%d", threads);
	printf("threads=%d: %.3g requests/s, %.3g timer pairs/s; CPU %.0f ns a request (the "
	       "engine's %.0f, on its own threads %.0f); held peak %llu bytes, settled %llu; %.2f %% of requests outlived a "
	       "timeout: fired %llu of %llu, lateness p50 %.2f ms p99 %.2f ms max %.2f ms; refused %llu, cap reached %llu\n",
	       threads, req / secs, (double)s->arms / secs, cpu, cpu - harness, engine,
	       (unsigned long long)peak->held_bytes, (unsigned long long)settled->held_bytes,
	       100.0 * (double)s->outlived / (req > 0 ? req : 1), (unsigned long long)s->fired,
	       (unsigned long long)(s->fired + s->cancelled),
	       q[0] / 1e6, q[1] / 1e6, q[2] / 1e6, (unsigned long long)s->refused,
	       (unsigned long long)s->full);
}

/* Serve with `threads` workers, drain, settle; report.  Returns the
 * violations, SK_SKIPPED, or a negative error. */
static int sv_phase(const struct sk_run *run, int threads, int64_t duration, double harness)
{
	struct sv_shared sh = {.run = run};
	int rc = sk_create_or_skip(run, &sh.e);
	if (rc != 0)
		return rc;
	struct sv_worker *ws = calloc((size_t)threads, sizeof *ws);
	int started = 0;
	rc = ws == NULL ? TMO_ENOMEM : 0;
	for (; rc == 0 && started < threads; started++) {
		rc = sv_worker_init(run, &sh, &ws[started], started, threads, sk_thread_per_timer(run));
		if (rc == 0 && pthread_create(&ws[started].th, NULL, sv_worker_main, &ws[started]) != 0) {
			sv_worker_free(&ws[started]);
			rc = TMO_EAGAIN;
		}
		if (rc != 0)
			break;
	}
	int64_t start = sk_now_ns();
	sh.end = rc == 0 ? start + duration : start; /* a failed start: the workers stop at once */
	int64_t others0 = sk_others_cpu_ns();
	atomic_store_explicit(&sh.go, 1, memory_order_release);
	struct tmo_stats peak = {0}, settled;
	sv_sample_until(run, &sh, sh.end, &peak, start, duration);
	int64_t cpu_other = sk_others_cpu_ns() - others0;
	double secs = (double)(sk_now_ns() - start) / 1e9;
	for (int i = 0; i < started; i++)
		pthread_join(ws[i].th, NULL);
	sk_sleep_ns(SETTLE);
	tmo_stats(sh.e, &settled);
	sk_sleep_ns(STRAY);
	long long callbacks = atomic_load(&sh.callbacks), bad = atomic_load(&sh.bad_fires);
	tmo_destroy(&sh.e);
	struct sv_sum s;
	int v = rc == 0 ? sv_sum(ws, threads, &s) : rc;
	if (v == 0) {
		for (int i = 0; i < threads; i++)
			cpu_other -= ws[i].cpu_ns;
		v = sv_violations(run, threads, &s, callbacks, bad);
		if (s.starved) {
			sk_skip(run, "threads=%d: the engine refused arms (TMO_EAGAIN/TMO_ENOMEM) for 1 s "
			        "with no request in flight: a limit other processes share", threads);
			v = v > 0 ? v : SK_SKIPPED;
		} else {
			sv_report(run, threads, &s, secs, cpu_other, &peak, &settled, harness);
		}
		free(s.late);
	}
	for (int i = 0; ws != NULL && i < started; i++)
		sv_worker_free(&ws[i]);
	free(ws);
	return v;
}

/* The harness's own CPU per request: one worker serving the same requests
 * with no engine (arm and cancel skipped), as many in flight as the
 * engines without a cap get (a capped worker spends its time waiting).
 * NaN if it could not run. */
static double sv_baseline(const struct sk_run *run, int64_t duration)
{
	struct sv_shared sh = {.run = run};
	struct sv_worker w;
	if (sv_worker_init(run, &sh, &w, 0, 0, 0) != 0)
		return NAN;
	if (pthread_create(&w.th, NULL, sv_worker_main, &w) != 0) {
		sv_worker_free(&w);
		return NAN;
	}
	sh.end = sk_now_ns() + duration;
	int64_t cpu0 = sk_process_cpu_ns();
	atomic_store_explicit(&sh.go, 1, memory_order_release);
	sk_wait_until(sh.end);
	int64_t cpu = sk_process_cpu_ns() - cpu0;
	pthread_join(w.th, NULL);
	double ns = w.requests > 0 ? (double)cpu / (double)w.requests : NAN;
	sk_report(run, "harness_cpu_ns_per_request", "", ns, "ns");
	printf("no engine (the harness's own draws and bookkeeping): %.0f ns a request, %.3g "
	       "requests/s\n", ns, (double)w.requests / ((double)duration / 1e9));
	sv_worker_free(&w);
	return ns;
}

static int service_run(const struct sk_run *run)
{
	double scaled = sk_size(run, "duration") * sk_scale();
	int64_t duration = (int64_t)((scaled < 0.2 ? 0.2 : scaled) * 1e9);
	size_t cap = (size_t)sk_size(run, sk_thread_per_timer(run) ? "thread_inflight" : "inflight");
	if (run->threads > 1)
		printf("service: 1 worker, then %d, %.2f s each", run->threads, (double)duration / 1e9);
	else
		printf("service: 1 worker for %.2f s", (double)duration / 1e9);
	printf("; up to %zu requests in flight a worker%s\n", cap,
	       sk_thread_per_timer(run) ? " (sized down: an OS thread per armed timeout)" : "");
	int v = 0;
	double harness = sv_baseline(run, (int64_t)((double)BASELINE * (scaled < 0.2 ? 0.2 : sk_scale())));
	int counts[2] = {1, run->threads};
	for (int k = 0; k < (run->threads > 1 ? 2 : 1); k++) {
		int rc = sv_phase(run, counts[k], duration, harness);
		if (rc < 0)
			return v > 0 ? v : rc;
		v += rc;
	}
	return v;
}

const struct sk_scenario sk_scenario_service = {
	.name = "service",
	.summary = "requests hold 1-4 timeouts (100 ms..120 s) for a log-normal service time, 1 % "
	           "outlive one: requests/s, CPU per request, held memory, lateness of the fires",
	.correctness = 1,
	.run = service_run,
	.params = "One worker, then --threads workers (when more than 1), each serve requests for "
	          "`duration`, up to `inflight` in flight a worker (the thread engine: "
	          "thread_inflight). A request arms 1-4 timeouts drawn from 100 ms, 1 s, 30 s and "
	          "120 s, holds them for a log-normal service time (median 1 ms, p99 50 ms, capped "
	          "at 1 s) and cancels them; a drawn 1 % outlive their shortest timeout by 1-10 ms "
	          "(made 100 ms if it was 30 s or more), so it fires. Reports requests/s, timer "
	          "pairs/s, CPU per request (the process's; the engine's: less the harness's own, "
	          "measured by one worker serving with no engine for 1 s; its engine threads' part), "
	          "engine-held bytes and nodes at the peak (sampled every `sample`) and settled "
	          "100 ms after the last cancel, and lateness p50/p99/max of the fired timeouts. "
	          "--seed draws the timeouts and service times.",
	.fails_when = "a timeout is not fired or cancelled exactly once (a cancel says PREVENTED "
	              "after the callback ran, or FIRED with none run; a callback runs twice or "
	              "after its cancel), one fires before its deadline, an arm fails other than "
	              "for capacity (TMO_EAGAIN, TMO_ENOMEM: retried, counted), or a cancel "
	              "returns an error.",
	.metrics = service_metrics,
	.sizes = service_sizes,
	.targets = service_targets,
};
