/*
 * The throughput scenario's figures: the rows of each figure (the median
 * over instances, and its spread), the printout, the targets and the
 * end-of-run table (see throughput.c).
 */
#include <math.h>

#include "tp.h"

const size_t tp_lives[3] = {1000, 100000, 1000000};

/* The end-of-run targets table's rows (the scenario's .targets). */
const struct sk_target tp_targets[] = {
	{.label = "seed 1 thread: wheel ns per arm+cancel", .engines = "wheel",
	 .metric = "seed_median_ns_per_op", .cmp = SK_AT_MOST, .bound = 15, .unit = " ns"},
	{.label = "seed 1 thread: wheel / condvar", .engines = "wheel",
	 .metric = "seed_median_ns_per_op", .per_engine = "condvar", .cmp = SK_AT_MOST, .bound = 0.5,
	 .unit = "x"},
	{.label = "seed 1 thread: wheel faster than thread", .engines = "wheel",
	 .metric = "seed_median_ns_per_op", .per_engine = "thread", .inverse = 1,
	 .cmp = SK_AT_LEAST, .bound = 1500, .unit = "x"},
	{.label = "seed 1 thread: wheel faster than libevent", .engines = "wheel",
	 .metric = "seed_median_ns_per_op", .per_engine = "libevent", .inverse = 1,
	 .cmp = SK_AT_LEAST, .bound = 2, .unit = "x"},
	{.label = "seed 1 thread: wheel / in-run floor", .engines = "wheel",
	 .metric = "seed_median_ns_per_op", .per_metric = "floor_ns_per_op", .cmp = SK_AT_MOST,
	 .bound = 3, .unit = "x"},
	{.label = "2 threads / 1 thread aggregate: %s", .engines = "wheel,mpsc", .metric = "ops_per_s",
	 .param = "threads=2", .per_param = "threads=1", .cmp = SK_AT_LEAST, .bound = 1.7,
	 .unit = "x", .missing = "not measured (%s not run, or --threads<2)"},
	/* 12x and 8x at 16 threads: 0.75 and 0.5 of linear. */
	{.label = "%d threads / 1 aggregate: wheel seed", .engines = "wheel", .metric = "ops_per_s",
	 .per_param = "threads=1", .most_threads = 1, .cmp = SK_AT_LEAST, .bound = 0.75, .unit = "x"},
	{.label = "%d threads / 1 aggregate: wheel 1 ms held", .engines = "wheel",
	 .metric = "held_pairs_per_s", .per_param = "threads=1", .most_threads = 1,
	 .cmp = SK_AT_LEAST, .bound = 0.5, .unit = "x"},
	/* issue 20: the lock-free engines' lead where timeouts live (held) */
	{.label = "held 1 ms, 1 thread: %s pairs/s / condvar", .engines = "wheel",
	 .metric = "held_pairs_per_s", .param = "threads=1", .per_engine = "condvar",
	 .cmp = SK_AT_LEAST, .bound = 3, .unit = "x"},
	{.label = "held 1 ms, 1 thread: %s pairs/s / condvar", .engines = "mpsc",
	 .metric = "held_pairs_per_s", .param = "threads=1", .per_engine = "condvar",
	 .cmp = SK_AT_LEAST, .bound = 1.5, .unit = "x"},
	{.label = "held 1 ms, 2 threads / 1: %s", .engines = "wheel", .metric = "held_pairs_per_s",
	 .param = "threads=2", .per_param = "threads=1", .cmp = SK_AT_LEAST, .bound = 1.8,
	 .unit = "x", .missing = "not measured (%s not run, or --threads<2)"},
	{.label = "held 1 ms, 1 thread: wheel ns a pair / its structure alone", .engines = "wheel",
	 .metric = "ratio_to_structure", .param = "case=held", .cmp = SK_AT_MOST, .bound = 4,
	 .unit = "x"},
	{.label = "1e6 live timers: wheel ns per op", .engines = "wheel", .metric = "live_ns_per_op",
	 .param = "live=1000000", .cmp = SK_AT_MOST, .bound = 30, .unit = " ns",
	 .missing = "not measured (%s not run, or --quick)"},
	{.label = "1e6 live timers: wheel / condvar ns per op", .engines = "wheel",
	 .metric = "live_ns_per_op", .param = "live=1000000", .per_engine = "condvar",
	 .cmp = SK_AT_MOST, .bound = 0.5, .unit = "x",
	 .missing = "not measured (wheel or condvar not run, or --quick)"},
	{0},
};

/* A number, or "-" when it was not measured (a --benchmark_filter that
 * left its benchmark out: not "nan"); returns buf. */
static const char *tp_fmt(char *buf, double v, const char *f)
{
	if (isnan(v) || isinf(v))
		snprintf(buf, 32, "-");
	else
		snprintf(buf, 32, f, v);
	return buf;
}

/* The figure at offset (FIG) of one instance's figures. */
static inline double tp_fig(const struct tp_figs *f, size_t offset)
{
	return *(const double *)(const void *)((const char *)f + offset);
}

/* The median over instances of one figure, with its min and max as rows
 * of their own ("stat=min", "stat=max") when there are several. */
static double tp_summarize(const struct sk_run *run, const struct tp_figs *figs, int ninst,
                           size_t offset, const char *metric, const char *unit, const char *param)
{
	double v[MAX_INSTANCES];
	int k = 0;
	for (int i = 0; i < ninst; i++) {
		double x = tp_fig(&figs[i], offset);
		if (!isnan(x))
			v[k++] = x;
	}
	double med = k ? sk_median(v, (size_t)k) : NAN; /* sorts v */
	sk_report(run, metric, param, med, unit);
	if (ninst > 1 && k > 0) {
		char p[160];
		snprintf(p, sizeof p, "%s%sinstances=%d,stat=min", param, param[0] ? "," : "", ninst);
		sk_report(run, metric, p, v[0], unit);
		snprintf(p, sizeof p, "%s%sinstances=%d,stat=max", param, param[0] ? "," : "", ninst);
		sk_report(run, metric, p, v[k - 1], unit);
	}
	return med;
}

#define FIG(field) offsetof(struct tp_figs, field)

/* Whether any instance measured the figure at offset (not NaN). */
static int tp_any(const struct tp_figs *figs, int ninst, size_t offset)
{
	for (int i = 0; i < ninst; i++)
		if (!isnan(tp_fig(&figs[i], offset)))
			return 1;
	return 0;
}

/* The structure alone beside the engine: its rows, and "x structure",
 * the engine's time per pair over the structure's, same loop, same run.
 * No rows for an engine without one (its end-table cells say "-"). */
static void tp_report_ds(const struct sk_run *run, const struct tp_figs *figs, int ninst,
                         double seed, double held_one, double held_two, const double *live)
{
	if (!tp_any(figs, ninst, FIG(ds_seed_ns)) && !tp_any(figs, ninst, FIG(ds_held_s))) {
		printf("structure alone: - (no structure of this engine is in the tree)\n");
		return;
	}
	double s_seed = tp_summarize(run, figs, ninst, FIG(ds_seed_ns), "structure_seed_ns_per_op",
	                             "ns", "");
	double s_held = tp_summarize(run, figs, ninst, FIG(ds_held_s), "structure_held_pairs_per_s",
	                             "pairs/s", "threads=1");
	sk_report(run, "ratio_to_structure", "case=seed", seed / s_seed, "x");
	sk_report(run, "ratio_to_structure", "case=held", s_held / held_one, "x");
	char nb[4][32];
	printf("structure alone (unlocked, one thread, the same loops): seed %s ns/op, the engine "
	       "%s it; held 1 ms %s pairs/s, the engine %s its time per pair\n",
	       tp_fmt(nb[0], s_seed, "%.1f"), tp_fmt(nb[1], seed / s_seed, "%.2fx"),
	       tp_fmt(nb[2], s_held, "%.3g"), tp_fmt(nb[3], s_held / held_one, "%.2fx"));
	/* At two threads, each its own structure: the machine's ceiling for
	 * the engine's 2 threads / 1 (a VM's vCPUs may differ, docs/harness.md). */
	if (tp_any(figs, ninst, FIG(ds_held2_s))) {
		double s_held2 = tp_summarize(run, figs, ninst, FIG(ds_held2_s),
		                              "structure_held_pairs_per_s", "pairs/s", "threads=2");
		printf("structure alone at two threads, each its own: held 1 ms %s pairs/s, 2 threads / "
		       "1 %s (the engine's %s)\n",
		       tp_fmt(nb[0], s_held2, "%.3g"), tp_fmt(nb[1], s_held2 / s_held, "%.2fx"),
		       tp_fmt(nb[2], held_two / held_one, "%.2fx"));
	}
	char param[64];
	for (int li = 0; li < 3; li++) {
		size_t n = (size_t)sk_scaled(tp_lives[li]);
		snprintf(param, sizeof param, "live=%zu", n);
		double s_live = tp_summarize(run, figs, ninst, FIG(ds_live_ns[li]),
		                             "structure_live_ns_per_op", "ns", param);
		snprintf(param, sizeof param, "case=live,live=%zu", n);
		if (!isnan(s_live) && !isnan(live[li]))
			sk_report(run, "ratio_to_structure", param, live[li] / s_live, "x");
	}
}


void tp_report(const struct sk_run *run, const struct tp_figs *figs, int ninst,
                      int nthreads)
{
	for (int i = 0; ninst > 1 && i < ninst; i++)
		sk_report_fmt(run, "seed_instance_ns_per_op", figs[i].seed_ns, "ns", "instance=%d", i);
	double seed = tp_summarize(run, figs, ninst, FIG(seed_ns), "seed_median_ns_per_op", "ns", "");
	double empty = tp_summarize(run, figs, ninst, FIG(empty_ns), "empty_loop_ns_per_op", "ns", "");
	double floor_ns = tp_summarize(run, figs, ninst, FIG(floor_ns), "floor_ns_per_op", "ns", "");
	sk_report(run, "ratio_to_floor", "", seed / floor_ns, "x");
	char nb[4][32];
	printf("\nseed: median %s ns/op over %d instance%s; loop's own cost %s ns/op; floor "
	       "(CAS pair) %s ns/op; %s the floor\n",
	       tp_fmt(nb[0], seed, "%.1f"), ninst, ninst > 1 ? "s" : "", tp_fmt(nb[1], empty, "%.2f"),
	       tp_fmt(nb[2], floor_ns, "%.2f"), tp_fmt(nb[3], seed / floor_ns, "%.1fx"));
	char param[64];
	double one = NAN, held_one = NAN, held_two = NAN;
	for (int t = 1; t <= nthreads; t++) {
		snprintf(param, sizeof param, "threads=%d", t);
		double ops_s = tp_summarize(run, figs, ninst, FIG(ops_s[t]), "ops_per_s", "ops/s", param);
		double held = tp_summarize(run, figs, ninst, FIG(held_s[t]), "held_pairs_per_s",
		                           "pairs/s", param);
		if (t == 1) {
			one = ops_s;
			held_one = held;
		}
		if (t == 2)
			held_two = held;
		printf("threads=%d: seed %s ops/s aggregate (%s one thread); held 1 ms %s "
		       "pairs/s (%s)\n",
		       t, tp_fmt(nb[0], ops_s, "%.3g"), tp_fmt(nb[1], ops_s / one, "%.2fx"),
		       tp_fmt(nb[2], held, "%.3g"), tp_fmt(nb[3], held / held_one, "%.2fx"));
	}
	tp_summarize(run, figs, ninst, FIG(held_hold_ns), "held_mean_hold_ns", "ns", "threads=1");
	double cross = tp_summarize(run, figs, ninst, FIG(cross), "cross_pairs_per_s", "pairs/s",
	                            "threads=2");
	double refused = tp_summarize(run, figs, ninst, FIG(refused), "arms_refused", "count", "");
	if (refused > 0)
		printf("arms refused for capacity (TMO_EAGAIN) and asked again: %.0f\n", refused);
	printf("cross-thread (arm on one thread, cancel on another): %s pairs/s, %s ns per "
	       "pair\n",
	       tp_fmt(nb[0], cross, "%.3g"), tp_fmt(nb[1], 1e9 / cross, "%.0f"));
	double handoff = tp_summarize(run, figs, ninst, FIG(handoff_ns), "handoff_round_trip_ns",
	                              "ns", "threads=2");
	printf("handoff (a cache line's round trip between two threads, no engine): %s ns\n",
	       tp_fmt(nb[0], handoff, "%.0f"));
	double live[3];
	for (int li = 0; li < 3; li++) {
		snprintf(param, sizeof param, "live=%zu", (size_t)sk_scaled(tp_lives[li]));
		live[li] = tp_summarize(run, figs, ninst, FIG(live_ns[li]), "live_ns_per_op", "ns", param);
	}
	tp_report_ds(run, figs, ninst, seed, held_one, held_two, live);
}

/* The seed benchmark per engine against the in-run floor, the engine's
 * structure alone and the thread engine; the held case against the
 * structure.  From every engine's rows. */
void tp_summary(const struct sk_results *res)
{
	double thread = sk_figure(res, "throughput", "thread", "seed_median_ns_per_op", "");
	printf("\n==== throughput: seed benchmark (1 s timeout armed and cancelled around an "
	       "empty block), median of rounds ====\n");
	printf("  %-10s %9s %9s %8s %10s %11s %10s\n", "engine", "ns/op", "floor ns", "x floor",
	       "struct ns", "x structure", "x vs thread");
	for (int i = 0; i < res->nengines; i++) {
		const char *e = res->engines[i]->name;
		double ns = sk_figure(res, "throughput", e, "seed_median_ns_per_op", "");
		double fl = sk_figure(res, "throughput", e, "floor_ns_per_op", "");
		double ds = sk_figure(res, "throughput", e, "structure_seed_ns_per_op", "");
		char c[6][32];
		tp_fmt(c[0], ns, "%.1f");
		tp_fmt(c[1], fl, "%.2f");
		tp_fmt(c[2], ns / fl, "%.2f");
		tp_fmt(c[3], ds, "%.1f");
		tp_fmt(c[4], ns / ds, "%.2f");
		tp_fmt(c[5], thread / ns, "%.0f");
		printf("  %-10s %9s %9s %8s %10s %11s %10s\n", e, c[0], c[1], c[2], c[3], c[4], c[5]);
	}
	printf("\n  held 1 ms, one thread         %14s %14s %11s %12s\n", "engine pairs/s",
	       "struct pairs/s", "x structure", "handoff ns");
	for (int i = 0; i < res->nengines; i++) {
		const char *e = res->engines[i]->name;
		double held = sk_figure(res, "throughput", e, "held_pairs_per_s", "threads=1");
		double ds = sk_figure(res, "throughput", e, "structure_held_pairs_per_s", "threads=1");
		double ho = sk_figure(res, "throughput", e, "handoff_round_trip_ns", "threads=2");
		char c[4][32];
		tp_fmt(c[0], held, "%.3g");
		tp_fmt(c[1], ds, "%.3g");
		tp_fmt(c[2], ds / held, "%.2f");
		tp_fmt(c[3], ho, "%.0f");
		printf("  %-29s %14s %14s %11s %12s\n", e, c[0], c[1], c[2], c[3]);
	}
	printf("  (x floor: times slower than an uncontended CAS pair measured in the same run;\n"
	       "   x structure: times slower than the engine's own structure driven alone by the "
	       "same\n   loop, unlocked, on one thread (wheel: src/ds/wheel.c; condvar: "
	       "src/ds/heap.c;\n   mpsc: src/lf/schedule.c's near/far, a heap over a wheel);\n"
	       "   handoff ns: a cache line's round trip between two threads, measured beside\n"
	       "   that engine's rows (no engine in it): what a timer filed by another thread\n"
	       "   pays, and on a VM it moves with the host's placement of the vCPUs;\n"
	       "   - : not measured, or no structure of that engine in the tree;\n"
	       "   x vs thread: times faster than the thread engine, - when it was not run)\n");
}
