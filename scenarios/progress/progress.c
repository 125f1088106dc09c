/*
 * progress — do arm and cancel need the timer thread?  Workers (--threads)
 * arm and cancel 1 s timeouts flat out, first with the engine running, then
 * with its timer thread parked at its loop's hook (tmo_testing_park), holding
 * whatever it holds there.  Lock-free engines keep going; lock-based ones
 * block until the park is released.  The verdict is on state, not time: on
 * an engine that declares TMO_CAP_LOCKFREE_ARM the park (and, below, the
 * blocked callback) lasts at least park_window and until every worker has
 * finished PROOF_OPS arm+cancel pairs in the phase, at most LIVENESS; a
 * worker that has not by then is BLOCKED, as is one still inside an op it
 * began more than half the phase earlier when the phase ends (a lock-based
 * engine holds every worker for the whole park; its phase is park_window).  An
 * op that took longer than BOUND but finished is a STALL: reported, never
 * judged (on a loaded machine a preemption makes stalls; it does not make
 * a worker wait out the park).
 *
 * A third phase, on every engine: one callback blocks (for
 * callback_window) while the workers keep CB_HELD timers each armed (60 s) and
 * cancel the oldest as they arm a new one, so held arms pile up while the
 * timer thread cannot recycle anything: a lock-free engine's arms and
 * cancels must not block meanwhile (the slowest pair is reported:
 * callback_max_latency_ns).
 *
 * The slowest pair, told apart from the scheduler: a worker reads its own
 * context-switch counts (getrusage RUSAGE_THREAD) every SNAP_EVERY pairs
 * and after every pair slower than SLOW_NS.  A slow pair with no switch
 * since the reading before it ran on its CPU throughout: its time is the
 * engine's.  One with an involuntary switch may have been preempted (on a
 * loaded machine it usually was); one with a voluntary switch slept, which
 * an engine that never waits does not do.  Reported per phase: the slowest
 * pair of all (q=max), the slowest not switched out (max_unswitched_ns,
 * the one callback_max_latency_ns reports), the slow pairs preempted and
 * those that slept.
 *
 * Reported per engine and phase: ops, pairs/s, arm+cancel latency p50/p99/
 * max, stalled and blocked workers.  The check is the engine's own declaration: an
 * engine declaring TMO_CAP_LOCKFREE_ARM that blocks is a violation; one that
 * blocks without declaring it is reported, not failed.
 * Engines without TMO_CAP_PARK must refuse park with TMO_EINVAL (checked)
 * and skip the parked phase.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "pg.h"

static const struct sk_metric progress_metrics[] = {
	{"callback_max_latency_ns", "ns"}, {"pairs", "count"}, {"pairs_per_s", "pairs/s"},
	{"latency_ns", "ns"}, {"max_unswitched_ns", "ns"}, {"slow_pairs_preempted", "count"},
	{"slow_pairs_slept", "count"}, {"blocked_workers", "count"}, {"stalled_workers", "count"},
	{"arms_refused", "count"}, {"parkable", "bool"}, {"violations", "count"}, {NULL, NULL},
};

static const struct sk_target progress_targets[] = {
	{.label = "worst arm+cancel while a callback blocks (not switched out): %s",
	 .engines = "mpsc,wheel", .metric = "callback_max_latency_ns", .scale = 1e-6,
	 .cmp = SK_AT_MOST, .bound = 1, .unit = " ms"},
	{0},
};

static const struct sk_size progress_sizes[] = {
	{"park_window", 500, 200, "ms"}, {"callback_window", 2000, 200, "ms"}, {0},
};

#define BOUND (100 * TMO_NSEC_PER_MSEC)
#define PROOF_OPS 200 /* pairs each worker finishes while parked / blocked */
#define LIVENESS (10 * TMO_NSEC_PER_SEC)
static const char *const ph_name[NPH] = {"running", "parked", "callback"};

struct pg_watch_result {
	int stalled; /* workers seen in one op for longer than BOUND */
	int blocked; /* workers short of `need` pairs, or in an op begun more
	                than half the phase ago, at its end */
	int64_t length; /* how long the phase lasted */
};

/* Every worker has finished `need` pairs of phase ph since ops0. */
static int pg_all_done(struct pg_ctx *c, int ph, const long long *ops0, long long need)
{
	for (int i = 0; i < c->nworkers; i++)
		if (atomic_load(&c->w[i].ops[ph]) - ops0[i] < need)
			return 0;
	return 1;
}

/* Watch the workers of phase ph for at least `window` and, with need > 0,
 * until each has finished `need` pairs (at most LIVENESS). */
static struct pg_watch_result pg_watch(struct pg_ctx *c, int ph, int64_t window, long long need,
                                       const char *what, double base)
{
	struct pg_watch_result r = {0, 0, 0};
	int64_t start = sk_now_ns(), end = start + window;
	long long ops0[MAX_WORKERS];
	for (int i = 0; i < c->nworkers; i++)
		ops0[i] = atomic_load(&c->w[i].ops[ph]);
	int stalled[MAX_WORKERS] = {0};
	for (;;) {
		int64_t now = sk_now_ns();
		for (int i = 0; i < c->nworkers; i++) {
			int64_t s = atomic_load(&c->w[i].op_start);
			if (s != 0 && now - s > BOUND && !stalled[i]) {
				stalled[i] = 1;
				r.stalled++;
			}
		}
		if ((now >= end && (need == 0 || pg_all_done(c, ph, ops0, need))) ||
		    now - start >= LIVENESS)
			break;
		double f = now < end ? 1 - (double)(end - now) / (double)window : 1;
		sk_progress(c->run, what, base + 0.33 * f);
		sk_sleep_ns(TMO_NSEC_PER_MSEC);
	}
	int64_t now = sk_now_ns();
	r.length = now - start;
	for (int i = 0; i < c->nworkers; i++) {
		int64_t s = atomic_load(&c->w[i].op_start);
		r.blocked += (s != 0 && now - s > r.length / 2) ||
		             (need > 0 && atomic_load(&c->w[i].ops[ph]) - ops0[i] < need);
	}
	return r;
}

/* Pairs each worker must finish in a phase that judges it: PROOF_OPS on an
 * engine that declares TMO_CAP_LOCKFREE_ARM, none (a plain window) else. */
static long long pg_need(const struct pg_ctx *c)
{
	return (c->run->ops->caps & TMO_CAP_LOCKFREE_ARM) ? PROOF_OPS : 0;
}

static void pg_phase_report(const struct sk_run *run, struct pg_ctx *c, int ph, int64_t window,
                            struct pg_watch_result w)
{
	const char *name = ph_name[ph];
	long long ops = 0, refused = 0, preempted = 0, slept = 0;
	int64_t mx_all = 0, mx_quiet = 0;
	size_t n = 0;
	for (int i = 0; i < c->nworkers; i++) {
		struct pg_worker *x = &c->w[i];
		ops += atomic_load(&x->ops[ph]);
		refused += x->refused[ph];
		n += x->nlat[ph];
		preempted += x->preempted[ph];
		slept += x->slept[ph];
		mx_all = x->max[ph] > mx_all ? x->max[ph] : mx_all;
		mx_quiet = x->max_quiet[ph] > mx_quiet ? x->max_quiet[ph] : mx_quiet;
	}
	int64_t *all = malloc((n ? n : 1) * sizeof *all);
	size_t k = 0;
	for (int i = 0; all != NULL && i < c->nworkers; i++)
		for (size_t j = 0; j < c->w[i].nlat[ph]; j++)
			all[k++] = c->w[i].lat[ph][j];
	if (all != NULL)
		qsort(all, k, sizeof *all, sk_cmp_i64);
	double p50 = all ? (double)sk_quantile_i64(all, k, 0.5) : NAN;
	double p99 = all ? (double)sk_quantile_i64(all, k, 0.99) : NAN;
	double mx = ops > 0 ? (double)mx_all : NAN, mq = ops > 0 ? (double)mx_quiet : NAN;
	free(all);
	double rate = (double)ops / ((double)window / 1e9);
	if (ph == PH_CALLBACK)
		sk_report(run, "callback_max_latency_ns", "", mq, "ns");
	sk_report_fmt(run, "pairs", (double)ops, "count", "phase=%s,threads=%d", name, c->nworkers);
	sk_report_fmt(run, "pairs_per_s", rate, "pairs/s", "phase=%s,threads=%d", name, c->nworkers);
	sk_report_fmt(run, "latency_ns", p50, "ns", "phase=%s,threads=%d,q=p50", name, c->nworkers);
	sk_report_fmt(run, "latency_ns", p99, "ns", "phase=%s,threads=%d,q=p99", name, c->nworkers);
	sk_report_fmt(run, "latency_ns", mx, "ns", "phase=%s,threads=%d,q=max", name, c->nworkers);
	sk_report_fmt(run, "max_unswitched_ns", mq, "ns", "phase=%s,threads=%d", name, c->nworkers);
	sk_report_fmt(run, "slow_pairs_preempted", (double)preempted, "count", "phase=%s,threads=%d",
	          name, c->nworkers);
	sk_report_fmt(run, "slow_pairs_slept", (double)slept, "count", "phase=%s,threads=%d", name,
	          c->nworkers);
	sk_report_fmt(run, "blocked_workers", (double)w.blocked, "count", "phase=%s,threads=%d", name,
	          c->nworkers);
	sk_report_fmt(run, "stalled_workers", (double)w.stalled, "count", "phase=%s,threads=%d", name,
	          c->nworkers);
	sk_report_fmt(run, "arms_refused", (double)refused, "count", "phase=%s,threads=%d", name,
	          c->nworkers);
	printf("  %-8s %10lld arm+cancel pairs (%.3g/s), latency p50 %8.0f ns  p99 %10.0f ns  max "
	       "%12.0f ns; of %d workers %d stalled > %lld ms, %d blocked to the end; %lld arms "
	       "refused (TMO_EAGAIN)\n"
	       "           slowest pair not switched out %.0f ns; pairs over %lld us: %lld preempted, "
	       "%lld slept\n",
	       name, ops, rate, p50, p99, mx, c->nworkers, w.stalled, (long long)(BOUND / 1000000),
	       w.blocked, refused, mq, (long long)(SLOW_NS / 1000), preempted, slept);
}

/* Park the timer thread for `window` and watch.  Returns violations. */
static int pg_parked_phase(struct pg_ctx *c, int64_t window, struct pg_watch_result *out)
{
	const struct sk_run *run = c->run;
	/* Parking waits for the timer thread to reach its hook; only then does
	 * the parked phase start counting. */
	atomic_store(&c->parked_at, sk_now_ns());
	int rc = tmo_testing_park(c->e, 1);
	if (rc != 0) {
		sk_violation(run, "park(1) returned %s on an engine declaring TMO_CAP_PARK",
		              tmo_errname(rc));
		return 1;
	}
	*out = pg_watch(c, PH_PARKED, window, pg_need(c), "parked", 0.33);
	/* Switch to the next phase, then release: an op blocked by the park
	 * completes and is counted in the parked phase (with the park's length
	 * as its latency). */
	atomic_store(&c->phase, PH_CALLBACK);
	rc = tmo_testing_park(c->e, 0);
	if (rc != 0) {
		sk_violation(run, "park(0) returned %s", tmo_errname(rc));
		return 1;
	}
	return 0;
}

/* Block one callback for `window` and watch.  Returns violations. */
static int pg_callback_phase(struct pg_ctx *c, int64_t window, struct pg_watch_result *out)
{
	const struct sk_run *run = c->run;
	int rc = tmo_arm(c->e, &c->blocker, 0, pg_block_cb, c);
	if (rc != 0) {
		sk_violation(run, "arming the blocking callback returned %s", tmo_errname(rc));
		return 1;
	}
	int64_t end = sk_now_ns() + 10 * TMO_NSEC_PER_SEC;
	while (!atomic_load(&c->blocker_in) && sk_now_ns() < end)
		sk_sleep_ns(100 * TMO_NSEC_PER_USEC);
	if (!atomic_load(&c->blocker_in)) {
		sk_violation(run, "a timeout-0 timer did not fire within 10 s");
		atomic_store(&c->blocker_release, 1);
		return 1;
	}
	atomic_store(&c->phase, PH_CALLBACK);
	*out = pg_watch(c, PH_CALLBACK, window, pg_need(c), "callback", 0.66);
	atomic_store(&c->phase, PH_STOP);
	atomic_store(&c->blocker_release, 1);
	rc = tmo_cancel(c->e, &c->blocker);
	if (rc != TMO_CANCEL_WAITED && rc != TMO_CANCEL_FIRED) {
		sk_violation(run, "cancel of the blocked callback's timer returned %s, want "
		              "TMO_CANCEL_WAITED or TMO_CANCEL_FIRED",
		              rc < 0 ? tmo_errname(rc) : "PREVENTED");
		return 1;
	}
	return 0;
}

/* An engine declaring TMO_CAP_LOCKFREE_ARM may not block in any phase. */
static int pg_verdict(struct pg_ctx *c, int ph, struct pg_watch_result w)
{
	const struct sk_run *run = c->run;
	int lockfree = (run->ops->caps & TMO_CAP_LOCKFREE_ARM) != 0;
	if (w.blocked > 0 && lockfree) {
		sk_violation(run, "declares TMO_CAP_LOCKFREE_ARM, yet in the %s phase %d of %d workers "
		              "were blocked: short of %d arm+cancel pairs, or inside one begun more "
		              "than half the phase earlier, when it ended (%lld ms phase)",
		              ph_name[ph], w.blocked, c->nworkers, PROOF_OPS,
		              (long long)(w.length / 1000000));
		return 1;
	}
	printf("progress: %-8s %s\n", ph_name[ph],
	       w.blocked > 0 ? (lockfree ? "BLOCKED although declared lock-free"
	                                 : "arm/cancel block (lock-based, as declared)")
	       : lockfree    ? "arm/cancel keep going (lock-free, as declared)"
	                     : "arm/cancel kept going, though the engine does not declare "
	                       "TMO_CAP_LOCKFREE_ARM");
	return 0;
}

/* Start the workers, each with its latency arrays and held timers.
 * Returns 0 or TMO_EAGAIN; *started counts the threads to join. */
static int pg_start_workers(const struct sk_run *run, struct pg_ctx *c, int *started)
{
	for (int i = 0; i < c->nworkers; i++) {
		struct pg_worker *w = &c->w[i];
		w->c = c;
		for (int ph = 0; ph < NPH; ph++)
			w->lat[ph] = malloc(MAX_SAMPLES * sizeof(int64_t));
		w->nheld = sk_thread_per_timer(run) ? CB_HELD_THREAD : CB_HELD;
		w->held = calloc(w->nheld, sizeof *w->held);
		if (w->lat[0] == NULL || w->lat[1] == NULL || w->lat[2] == NULL || w->held == NULL ||
		    pthread_create(&w->th, NULL, pg_worker_main, w) != 0)
			return TMO_EAGAIN;
		(*started)++;
	}
	return 0;
}

/* Cancel what the workers still hold, count their failed pairs, free the
 * run.  Returns the violations (any failed pair). */
static int pg_finish(const struct sk_run *run, struct pg_ctx *c, int started)
{
	long long errors = 0;
	for (int i = 0; i < started; i++) {
		struct pg_worker *w = &c->w[i];
		for (size_t k = 0; k < w->nheld; k++)
			if (w->held[k].cb != NULL && tmo_cancel(c->e, &w->held[k]) != TMO_CANCEL_PREVENTED)
				w->errors++;
		errors += w->errors;
		if (w->errors > 0 && errors == w->errors)
			sk_violation(run, "worker %d: %lld arm/cancel pairs failed (first: %s, %d)", i,
			             w->errors, tmo_errname(w->first_error), w->first_error);
	}
	tmo_destroy(&c->e);
	for (int i = 0; i < c->nworkers; i++) {
		for (int ph = 0; ph < NPH; ph++)
			free(c->w[i].lat[ph]);
		free(c->w[i].held);
	}
	free(c);
	return errors > 0;
}

static int progress_run(const struct sk_run *run)
{
	struct pg_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return TMO_ENOMEM;
	c->run = run;
	c->nworkers = run->threads < MAX_WORKERS ? run->threads : MAX_WORKERS;
	atomic_store(&c->parked_at, INT64_MAX);
	/* short of kernel timers or threads: a skip with its reason */
	int rc = sk_create_or_skip(run, &c->e);
	if (rc != 0) {
		free(c);
		return rc;
	}
	int v = 0;
	int parkable = (run->ops->caps & TMO_CAP_PARK) != 0;
	if (!parkable) {
		rc = tmo_testing_park(c->e, 1);
		if (rc != TMO_EINVAL) {
			sk_violation(run, "park on an engine without TMO_CAP_PARK returned %s, want "
			              "TMO_EINVAL",
			              tmo_errname(rc));
			v++;
			if (rc == 0)
				tmo_testing_park(c->e, 0);
		}
		rc = 0;
		printf("progress: not parkable (no TMO_CAP_PARK: %s); no parked phase\n",
		       (run->ops->caps & TMO_CAP_THREAD_PER_TIMER) ? "a thread per timer, no single "
		                                                     "timer thread"
		                                                   : "no park hook");
	}
	sk_report(run, "parkable", "", parkable, "bool");
	int64_t window = sk_size_ns(run, "park_window");
	int64_t cb_window = sk_size_ns(run, "callback_window");
	int started = 0;
	rc = pg_start_workers(run, c, &started);
	printf("progress: %d workers arm+cancel a 1 s timeout flat out, %.0f ms with the timer thread "
	       "running, %.0f ms with it parked, then %.0f ms holding %d timers each while one "
	       "callback blocks\n",
	       c->nworkers, (double)window / 1e6, parkable ? (double)window / 1e6 : 0.0,
	       (double)cb_window / 1e6, sk_thread_per_timer(run) ? CB_HELD_THREAD : CB_HELD);
	struct pg_watch_result w_ph[NPH] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
	if (rc == 0) {
		w_ph[PH_RUNNING] = pg_watch(c, PH_RUNNING, window, 0, "running", 0);
		if (parkable)
			v += pg_parked_phase(c, window, &w_ph[PH_PARKED]);
		v += pg_callback_phase(c, cb_window, &w_ph[PH_CALLBACK]);
	}
	atomic_store(&c->phase, PH_STOP);
	atomic_store(&c->blocker_release, 1);
	for (int i = 0; i < started; i++)
		pthread_join(c->w[i].th, NULL);
	if (rc == 0) {
		for (int ph = 0; ph < NPH; ph++) {
			if (ph == PH_PARKED && !parkable)
				continue;
			pg_phase_report(run, c, ph, w_ph[ph].length, w_ph[ph]);
			v += pg_verdict(c, ph, w_ph[ph]);
		}
	}
	v += pg_finish(run, c, started);
	return rc < 0 ? rc : v;
}

const struct sk_scenario sk_scenario_progress = {
	.name = "progress",
	.summary = "park the timer thread, then block one callback; arm/cancel latency from other threads "
	           "meanwhile (lock-free engines keep going, lock-based ones block: bounded, counted)",
	.correctness = 1,
	.run = progress_run,
	.params = "--threads workers (at most 64) arm and cancel 1 s timeouts flat out, first "
	          "with the engine running, then for park_window with its timer thread parked "
	          "at its loop's hook (tmo_testing_park), then for callback_window while one "
	          "callback blocks, each worker keeping 4096 timers of 60 s armed (16 on "
	          "a thread-per-timer engine) and cancelling the oldest as it arms the next. On an "
	          "engine that declares lockfree-arm the park and the blocked callback last until "
	          "every worker has also finished 200 pairs in the phase (at most 10 s). Reports "
	          "pairs/s, latency p50/p99/max, stalled (an op over 100 ms: reported) and "
	          "blocked workers per phase, the slowest pair of all and the slowest that the worker's "
	          "thread ran without a context switch (getrusage), and the pairs over 20 us that "
	          "were preempted or slept.",
	.fails_when = "an engine that declares lockfree-arm has a worker blocked by the park or "
	              "by the blocked callback: short of 200 pairs when the phase ends, or inside "
	              "one pair begun more than half the phase earlier (an engine that does not "
	              "declare it is reported, not failed); an engine without the park capability "
	              "does not refuse tmo_testing_park with TMO_EINVAL; an arm or cancel returns an error "
	              "other than an arm refused at once with TMO_EAGAIN (counted and reported); "
	              "the blocked callback's timer does not fire.",
	.metrics = progress_metrics,
	.sizes = progress_sizes,
	.targets = progress_targets,
};
