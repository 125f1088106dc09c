/*
 * throughput — the seed benchmark and its variations, run by Google
 * Benchmark (kit/gbench.h), every figure from one process run:
 *
 *  seed    Ruby's `Timeout.timeout(1) { }` in a loop: arm a 1 s timeout,
 *          run an empty block, cancel it.  `rounds` repetitions of `ops`
 *          arm+cancel pairs on one thread; each round and the median
 *          ns/op.  (Seed 000: the Ruby timeout benchmark.)
 *  empty   the same loop with no engine call: the keep-running loop's own
 *          cost per op (Debian's Google Benchmark is a debug build).
 *  floor   an uncontended CAS pair on a cache line the caller owns: what an
 *          arm+cancel that touches one shared word costs at best.
 *          (empty and floor: the seed's rounds, their median.)
 *  threads:N  1..--threads threads, each arming and cancelling its own
 *          timer: aggregate ops/s (min-time runs, repeated: the median).
 *  held:N  1..--threads threads, each holding its timers about 1 ms before
 *          cancelling them (the web-service shape of the retention
 *          scenario: an arm, then the cancel of the arm made ~1 ms
 *          earlier): aggregate pairs/s.
 *  cross   arm on one thread, cancel on another (two threads and a
 *          single-producer ring between them): pairs/s.
 *  handoff two threads pass one cache line to and fro, no engine: what a
 *          timer filed by another thread pays (docs/held-and-service.md).
 *  live:L  the seed loop with L (1e3, 1e5, 1e6) other timers armed
 *          (timeouts 60..3600 s, never due during the run).
 *  structure:S/seed, /held, /live:L  the same seed, held and live loops
 *          (bench.c: one loop, specialised) on the engine's own structure
 *          alone, unlocked on one thread (structure.c: S is wheel for
 *          wheel, heap for condvar and mpsc; none for the others).  "x
 *          structure" is the engine's time per pair over the structure's:
 *          what the engine's locking, dating and filing add to the limit.
 *
 * --repeat=N runs all of it on N fresh engine instances and reports each
 * figure's median over them (the rows without "stat="), and its min and max
 * ("stat=min", "stat=max"): one slow mode of one instance cannot pass for
 * the engine's speed.  With N >= 2 each is a process of its own (kit/instance.c).
 *
 * Every arm must return 0 and every cancel TMO_CANCEL_PREVENTED (bench.c
 * says how a capacity refusal is asked again).  Speed is reported, never
 * asserted: the targets table at the end of the harness run compares.
 *
 * Sizes: the thread engine creates an OS thread per arm (~25 us): its seed
 * rounds are thread_ops pairs instead of ops, and it holds at most
 * LIVE_THREAD_MAX live timers (more sizes are reported as skipped).
 */
#include <math.h>

#include "tp.h"

static const struct sk_metric throughput_metrics[] = {
	{"live_capacity", "timers"}, {"seed_instance_ns_per_op", "ns"},
	{"seed_median_ns_per_op", "ns"}, {"empty_loop_ns_per_op", "ns"}, {"floor_ns_per_op", "ns"},
	{"ratio_to_floor", "x"}, {"ops_per_s", "ops/s"}, {"held_pairs_per_s", "pairs/s"},
	{"held_mean_hold_ns", "ns"}, {"cross_pairs_per_s", "pairs/s"},
	{"handoff_round_trip_ns", "ns"}, {"arms_refused", "count"},
	{"live_ns_per_op", "ns"}, {"structure_seed_ns_per_op", "ns"},
	{"structure_held_pairs_per_s", "pairs/s"}, {"structure_live_ns_per_op", "ns"},
	{"ratio_to_structure", "x"}, {NULL, NULL},
};

/* min_time_reps: the repetitions of the min-time benchmarks, their median. */
static const struct sk_size tp_sizes_table[] = {
	{"rounds", 20, 5, ""}, {"ops", 10000, 2000, "pairs"}, {"thread_ops", 1000, 100, "pairs"},
	{"min_time", 0.3, 0.03, "s"}, {"min_time_reps", 5, 3, ""}, {0},
};

static void tp_sizes(const struct sk_run *run, int *rounds, int *ops, double *min_time)
{
	*rounds = (int)sk_size(run, "rounds");
	if (*rounds > ROUNDS_MAX) {
		fprintf(stderr, "throughput: rounds %d above ROUNDS_MAX %d\n", *rounds, ROUNDS_MAX);
		abort();
	}
	*ops = (int)sk_size(run, sk_thread_per_timer(run) ? "thread_ops" : "ops");
	*min_time = sk_size(run, "min_time");
	/* Under TMO_TEST_SCALE: fewer ops per round, still a multiple of BATCH. */
	*ops = (int)((sk_scaled((uint64_t)*ops) + BATCH - 1) / BATCH * BATCH);
}

static struct sk_gb_bench *tp_register(const struct sk_run *run, const char *what, sk_gb_fn *fn,
                                    void *ctx, int threads, double min_time)
{
	/* min_time > 0: a min-time benchmark, repeated (see tp_median_rate). */
	char name[160];
	snprintf(name, sizeof name, "throughput/%s%s%s", run->ops->name, what[0] ? "/" : "", what);
	struct sk_gb_bench *b = sk_gb_register(name, fn, ctx);
	sk_gb_threads(b, threads);
	sk_gb_use_real_time(b);
	if (min_time > 0) {
		sk_gb_min_time(b, min_time);
		sk_gb_repetitions(b, (int)sk_size(run, "min_time_reps"));
	}
	return b;
}

/* The median over the repetitions of "throughput/<engine>/<what>/threads:N"
 * of iterations (all threads) per wall second.  Computed from each
 * repetition: the iteration count may differ between repetitions, so
 * Google Benchmark's median time and median iterations need not pair up. */
static double tp_median_rate(const struct sk_run *run, const struct sk_gb_result *res, size_t n,
                             const char *what, int threads)
{
	char name[200];
	snprintf(name, sizeof name, "throughput/%s%s%s/threads:%d", run->ops->name,
	         what[0] ? "/" : "", what, threads);
	double rates[64];
	size_t k = 0;
	for (size_t i = 0; i < n && k < 64; i++)
		if (!res[i].error && res[i].repetition >= 0 && res[i].real_s > 0 &&
		    strcmp(res[i].name, name) == 0)
			rates[k++] = res[i].iterations / res[i].real_s;
	return k ? sk_median(rates, k) : NAN;
}

/* Look up "throughput/<engine>/<what>/threads:N[_aggregate]". */
static const struct sk_gb_result *tp_find(const struct sk_run *run, const struct sk_gb_result *res,
                                       size_t n, const char *what, int threads, const char *agg)
{
	char name[200];
	snprintf(name, sizeof name, "throughput/%s%s%s/threads:%d%s%s", run->ops->name,
	         what[0] ? "/" : "", what, threads, agg[0] ? "_" : "", agg);
	return sk_gb_find(res, n, name);
}

/* Register the rounds of one instance: the seed, the empty loop, the
 * floor and the structure's seed, fixed-iteration repetitions run
 * interleaved at random (sk_gb_run_interleaved), so their medians compare
 * like with like: each samples the same stretch of the run (one long run
 * of the floor is at the mercy of one preemption, or of the machine's
 * state in its own few seconds). */
static void tp_register_rounds(const struct sk_run *run, struct tp_ctx *c, int rounds, int ops)
{
	static const struct {
		const char *what;
		sk_gb_fn *fn;
	} rounds_of[] = {{"seed", bench_seed}, {"empty", bench_empty}, {"floor", bench_floor}};
	for (size_t k = 0; k < 3; k++) {
		struct sk_gb_bench *b = tp_register(run, rounds_of[k].what, rounds_of[k].fn, c, 1, 0);
		sk_gb_iterations(b, (uint64_t)ops);
		sk_gb_repetitions(b, rounds);
	}
	if (c->ds != NULL) {
		char what[64];
		snprintf(what, sizeof what, "structure:%s/seed", c->ds->name);
		struct sk_gb_bench *b = tp_register(run, what, bench_ds_seed, c, 1, 0);
		sk_gb_iterations(b, (uint64_t)ops);
		sk_gb_repetitions(b, rounds);
	}
}

/* Register the rest of one instance's set: min-time runs, in order. */
static void tp_register_rest(const struct sk_run *run, struct tp_ctx *c, double min_time,
                             int nthreads)
{
	/* The structure's held loop as the engine's at one thread, and at two
	 * (bench_ds_held: each its own, the machine's ceiling). */
	if (c->ds != NULL) {
		char what[64];
		snprintf(what, sizeof what, "structure:%s/held", c->ds->name);
		tp_register(run, what, bench_ds_held, c, 1, min_time);
		if (c->ds2 != NULL)
			tp_register(run, what, bench_ds_held, c, 2, min_time);
	}
	for (int t = 1; t <= nthreads; t++)
		tp_register(run, "", bench_seed, c, t, min_time);
	/* handoff straight after the held case at one thread: the vCPUs'
	 * placement, which it reads, can change within seconds */
	if (c->held != NULL)
		tp_register(run, "held", bench_held, c, 1, min_time);
	tp_register(run, "handoff", bench_handoff, c, 2, min_time);
	for (int t = 2; c->held != NULL && t <= nthreads; t++)
		tp_register(run, "held", bench_held, c, t, min_time);
	tp_register(run, "cross", bench_cross, c, 2, min_time);
}

/* Read one instance's figures out of its Google Benchmark results. */
static int tp_collect(const struct sk_run *run, struct tp_ctx *c, const struct sk_gb_result *res,
                      size_t n, int nthreads, struct tp_figs *f)
{
	double round_ns[ROUNDS_MAX];
	int nround = 0, violations = 0;
	char want[200];
	snprintf(want, sizeof want, "throughput/%s/seed/threads:1", run->ops->name);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(res[i].name, want) == 0 && !res[i].error && res[i].repetition >= 0 &&
		    nround < ROUNDS_MAX)
			round_ns[nround++] = res[i].real_ns;
		if (res[i].error) {
			sk_violation(run, "benchmark %s stopped: %s", res[i].name, res[i].error_message);
			violations++;
		}
	}
	f->seed_ns = nround > 0 ? sk_median(round_ns, (size_t)nround) : NAN;
	const struct sk_gb_result *r_empty = tp_find(run, res, n, "empty", 1, "median");
	const struct sk_gb_result *r_floor = tp_find(run, res, n, "floor", 1, "median");
	f->empty_ns = r_empty ? r_empty->real_ns : NAN;
	f->floor_ns = r_floor ? r_floor->real_ns : NAN;
	for (int t = 1; t <= nthreads; t++) {
		/* real_s is the repetition's wall time; iterations are summed
		 * over threads: aggregate ops/s. */
		f->ops_s[t] = tp_median_rate(run, res, n, "", t);
		f->held_s[t] = c->held != NULL ? tp_median_rate(run, res, n, "held", t) : NAN;
	}
	f->held_hold_ns = c->held != NULL && c->held[0].holds > 0
	                      ? c->held[0].hold_ns_sum / (double)c->held[0].holds
	                      : NAN;
	/* Both threads count an iteration per timer: pairs = iterations / 2. */
	f->cross = tp_median_rate(run, res, n, "cross", 2) / 2;
	/* Both threads count an iteration per round trip too. */
	f->handoff_ns = 2e9 / tp_median_rate(run, res, n, "handoff", 2);
	f->ds_seed_ns = f->ds_held_s = f->ds_held2_s = NAN;
	if (c->ds != NULL) {
		char what[64];
		snprintf(what, sizeof what, "structure:%s/seed", c->ds->name);
		const struct sk_gb_result *r = tp_find(run, res, n, what, 1, "median");
		f->ds_seed_ns = r ? r->real_ns : NAN;
		snprintf(what, sizeof what, "structure:%s/held", c->ds->name);
		f->ds_held_s = tp_median_rate(run, res, n, what, 1);
		f->ds_held2_s = tp_median_rate(run, res, n, what, 2); /* NaN: not run */
	}
	return violations;
}

/* Run the one benchmark registered (WHAT, one thread): ns per op, or NaN;
 * a benchmark stopped with an error is a violation (*violations). */
static double tp_run_one(const struct sk_run *run, const char *what, int *violations)
{
	struct sk_gb_result *res;
	size_t n = sk_gb_run(run, &res);
	double ns = n > 0 ? 1e9 / tp_median_rate(run, res, n, what, 1) : NAN;
	for (size_t i = 0; i < n; i++)
		if (res[i].error) {
			sk_violation(run, "benchmark %s stopped: %s", res[i].name, res[i].error_message);
			++*violations;
		}
	sk_gb_results_free(res);
	return ns;
}

/* Whether --benchmark_filter selects "throughput/<engine>/<what>". */
static int tp_selected(const struct sk_run *run, const char *what)
{
	char name[200];
	snprintf(name, sizeof name, "throughput/%s/%s", run->ops->name, what);
	return sk_gb_selected(name, 1);
}

/* The structure alone with the same L background timeouts (drawn from
 * *rng as the engine's were). */
static void tp_live_ds(const struct sk_run *run, struct tp_ctx *c, size_t live, double min_time,
                       struct sk_rng *rng, double *ns, int *violations)
{
	char what[64];
	snprintf(what, sizeof what, "structure:%s/live:%zu", c->ds->name, live);
	if (!tp_selected(run, what))
		return;
	if (tp_ds_fill(c->ds, live, rng) != 0) {
		printf("live=%zu: structure alone not measured (out of memory)\n", live);
	} else {
		tp_register(run, what, bench_ds_seed, c, 1, min_time);
		*ns = tp_run_one(run, what, violations);
		printf("live=%zu: structure alone (%s) %.1f ns/op\n", live, c->ds->name, *ns);
	}
	if (tp_ds_drain(c->ds) != 0) {
		sk_violation(run, "live=%zu: background nodes left the %s alone before their "
		             "60..3600 s deadlines", live, c->ds->name);
		++*violations;
	}
}

/* The seed loop with L other timers live (the engine's, then its
 * structure's alone). */
static int tp_live(const struct sk_run *run, struct tp_ctx *c, double min_time,
                   struct sk_rng *rng, struct tp_figs *f)
{
	int violations = 0;
	/* the background timers the engine took before it refused for capacity
	 * at a smaller size: a larger one is not tried (each try waits
	 * REFUSED_MAX_NS of refusals before it gives up) */
	size_t cap = SIZE_MAX;
	for (size_t li = 0; li < 3; li++) {
		f->live_ns[li] = f->ds_live_ns[li] = NAN;
		size_t live = (size_t)sk_scaled(tp_lives[li]);
		struct sk_rng drawn = *rng; /* the structure draws the same timeouts */
		char what[32];
		snprintf(what, sizeof what, "live:%zu", live);
		if (!tp_selected(run, what)) {
			/* left out by --benchmark_filter: no background to arm */
		} else if (sk_thread_per_timer(run) && live > LIVE_THREAD_MAX) {
			printf("live=%zu: skipped (thread per timer: at most %d live timers)\n", live,
			       LIVE_THREAD_MAX);
		} else if (live > cap) {
			printf("live=%zu: skipped: the engine took %zu timers at a smaller size, then "
			       "returned TMO_EAGAIN\n",
			       live, cap);
			sk_report_fmt(run, "live_capacity", (double)cap, "timers", "live=%zu", live);
		} else {
			struct tmo_timer *bg = calloc(live, sizeof *bg);
			if (bg == NULL) {
				sk_violation(run, "out of memory for %zu background timers", live);
				return violations + 1;
			}
			int err;
			size_t armed = tp_arm_background(c, bg, live, rng, &err);
			if (armed < live) {
				printf("live=%zu: skipped: the engine took %zu timers, then returned %s\n",
				       live, armed, tmo_errname(err));
				sk_report_fmt(run, "live_capacity", (double)armed, "timers", "live=%zu", live);
				if (err == TMO_EAGAIN)
					cap = armed;
			} else {
				tp_register(run, what, bench_seed, c, 1, min_time);
				f->live_ns[li] = tp_run_one(run, what, &violations);
				printf("live=%zu: %.1f ns/op\n", live, f->live_ns[li]);
			}
			violations += (int)tp_cancel_background(c, bg, armed);
			free(bg);
		}
		if (c->ds != NULL)
			tp_live_ds(run, c, live, min_time, &drawn, &f->ds_live_ns[li], &violations);
	}
	return violations;
}

/* One fresh engine instance: every benchmark of the scenario. */
static int tp_instance(const struct sk_run *run, int inst, struct tp_figs *f)
{
	int rounds, ops;
	double min_time;
	tp_sizes(run, &rounds, &ops, &min_time);
	int nthreads = run->threads < MAX_THREADS ? run->threads : MAX_THREADS;
	struct tp_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return TMO_ENOMEM;
	c->run = run;
	int rc = sk_create_or_skip(run, &c->e);
	if (rc != 0) {
		free(c);
		return rc;
	}
	c->pool = calloc(RING, sizeof *c->pool);
	if (c->pool == NULL) {
		tmo_destroy(&c->e);
		free(c);
		return TMO_ENOMEM;
	}
	for (int i = 0; i < RING; i++)
		c->free_[i] = &c->pool[i];
	atomic_store(&c->free_tail, RING);
	tp_held_alloc(run, c, nthreads);
	c->ds = tp_ds_new(run);
	c->ds2 = c->ds != NULL && nthreads >= 2 ? tp_ds_new(run) : NULL;
	struct sk_rng rng = {run->seed + (uint64_t)inst};
	/* Warm-up, not timed: the engine's first arms may allocate (pools,
	 * heap arrays) and fault in memory; round 1 should not pay for it. */
	for (int i = 0; i < ops; i++)
		tp_seed_op(c, &c->slots[0].t);
	tp_register_rounds(run, c, rounds, ops);
	struct sk_gb_result *r_rounds, *r_rest, *res;
	c->rounds_on = 1;
	size_t n_rounds = sk_gb_run_interleaved(run, &r_rounds);
	c->rounds_on = 0;
	tp_register_rest(run, c, min_time, nthreads);
	size_t n_rest = sk_gb_run(run, &r_rest);
	size_t n = sk_gb_results_concat(r_rounds, n_rounds, r_rest, n_rest, &res);
	int violations = tp_collect(run, c, res, n, nthreads, f);
	sk_gb_results_free(res);
	violations += tp_live(run, c, min_time, &rng, f);
	f->refused = (double)atomic_load(&c->refused);

	long long ae = atomic_load(&c->arm_errors), ce = atomic_load(&c->cancel_errors);
	long long fired = atomic_load(&c->fired);
	if (ae || ce || fired) {
		int fe = atomic_load(&c->first_error);
		sk_violation(run, "%lld arms failed, %lld cancels of a pending 1 s timeout did not "
		              "return TMO_CANCEL_PREVENTED, %lld callbacks ran (first unexpected return: "
		              "%s, %d)",
		              ae, ce, fired, fe < 0 ? tmo_errname(fe) : "non-negative", fe);
		violations++;
	}
	violations += tp_ds_fired(run, c->ds) + tp_ds_fired(run, c->ds2);
	tmo_destroy(&c->e);
	tp_ds_free(c->ds);
	tp_ds_free(c->ds2);
	tp_held_free(c, nthreads);
	free(c->pool);
	free(c);
	return violations;
}

static int throughput_run(const struct sk_run *run)
{
	int rounds, ops;
	double min_time;
	tp_sizes(run, &rounds, &ops, &min_time);
	int ninst = run->repeat < 1 ? 1 : run->repeat > MAX_INSTANCES ? MAX_INSTANCES : run->repeat;
	int nthreads = run->threads < MAX_THREADS ? run->threads : MAX_THREADS;
	if (run->instance_fd > 0) { /* one instance of a parent's --repeat run */
		struct tp_figs f = {0};
		int rc = tp_instance(run, run->instance, &f);
		sk_instance_send(run, rc, &f, sizeof f);
		return rc;
	}
	struct tp_figs *figs = calloc((size_t)ninst, sizeof *figs);
	if (figs == NULL)
		return TMO_ENOMEM;
	printf("seed benchmark: %d rounds of %d arm+cancel pairs of a 1 s timeout around an empty "
	       "block%s, on %d fresh engine instance%s\n",
	       rounds, ops,
	       sk_thread_per_timer(run) ? " (sized down: this engine starts a thread per arm)" : "",
	       ninst, run->instance_argv ? "s, each a process of its own (run above)" : &"s"[ninst < 2]);
	int violations = 0, got = 0, sent = 1;
	for (int i = 0; i < ninst; i++) {
		if (ninst > 1 && run->instance_argv == NULL)
			printf("---- instance %d of %d ----\n", i + 1, ninst);
		int rc = run->instance_argv
		                 ? sk_instance_run(run, i, &figs[got], sizeof *figs, &sent)
		                 : tp_instance(run, i, &figs[got]);
		if (rc < 0) {
			free(figs);
			return rc;
		}
		violations += rc;
		got += sent; /* an instance that died sent no figures: a violation */
	}
	if (got > 0)
		tp_report(run, figs, got, nthreads);
	free(figs);
	return violations;
}

const struct sk_scenario sk_scenario_throughput = {
	.name = "throughput",
	.summary = "seed benchmark (arm+cancel a 1 s timeout around an empty block), threads, timers held "
	           "1 ms, cross-thread, 1e3..1e6 live timers, vs an in-run CAS floor",
	.correctness = 0,
	.run = throughput_run,
	.params = "Seed benchmark: `rounds` rounds of `ops` arm+cancel pairs (the thread "
	          "engine: thread_ops) on one thread, beside the loop's own cost and an "
	          "uncontended CAS pair, their rounds (and the structure's seed) run interleaved "
	          "in a random order; 1..--threads threads each "
	          "arming its own timer, and 1..--threads threads each cancelling its arms ~1 ms "
	          "after making them (min-time runs of min_time, median of min_time_reps); "
	          "cross-thread cancel (2 threads); a cache line's round trip between 2 threads, "
	          "no engine (handoff: what a timer filed by another thread pays; on a VM the "
	          "host's placement of the vCPUs sets it); the seed loop with 1e3, 1e5, 1e6 other timers "
	          "live (thread engine: 1e3 only). The seed, held (one thread) and live loops also drive "
	          "the engine's own structure alone, unlocked on one thread (wheel: src/ds/wheel.c; "
	          "condvar: src/ds/heap.c; mpsc: the heap over a wheel of src/lf/schedule.c; other "
	          "engines have none: \"-\"), reported as "
	          "\"x structure\". --repeat=N: all of it on N fresh engine "
	          "instances, each in a process of its own, each figure's median and (stat=min, "
	          "stat=max) its spread. --seed "
	          "draws the live timers' timeouts. An arm refused with TMO_EAGAIN is asked again "
	          "(arms_refused counts them). A benchmark: speed is reported and compared in the "
	          "targets table, never a failure.",
	.fails_when = "an arm fails (other than a capacity refusal that clears within 10 s), a "
	              "cancel of the pending 1 s timeout does not return PREVENTED, a callback "
	              "runs, or Google Benchmark stops a benchmark with an error.",
	.metrics = throughput_metrics,
	.sizes = tp_sizes_table,
	.targets = tp_targets,
	.end_table = tp_summary,
	.instances = 1,
};
