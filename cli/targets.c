/* See targets.h.  Metric names are the ones scenarios/throughput.c,
 * retention.c, expiry.c, progress.c and race.c report (kept in sync by
 * hand: a renamed metric shows here as "not measured", never as met).
 * The targets are issue 8's, for the lock-free engines; the instruction
 * count per arm+cancel (<= 80, wheel) is scripts/instructions' figure. */
#include "targets.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int ran(const struct sk_scenario *const *s, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s[i]->name, name) == 0)
			return 1;
	return 0;
}

static double get(struct sk_sink *r, const char *scen, const char *engine, const char *metric,
                  const char *param)
{
	double v;
	return sk_sink_lookup(r, scen, engine, metric, param, &v) ? v : NAN;
}

/* A number, or "-" when it was not measured. */
static void fmt(char *buf, double v, const char *f)
{
	if (isnan(v) || isinf(v))
		snprintf(buf, 32, "-");
	else
		snprintf(buf, 32, f, v);
}

static int met_count, missed_count, unmeasured_count;
static struct sk_sink *cur_report; /* targets also go to the JSON */

/* One target row: `measured` compared with `want` by `op` ("<=" or ">="). */
static void target(const char *what, double measured, const char *op, double want,
                   const char *unit, const char *why_missing)
{
	char m[48];
	const char *verdict;
	if (isnan(measured)) {
		snprintf(m, sizeof m, "-");
		verdict = why_missing;
		unmeasured_count++;
	} else {
		snprintf(m, sizeof m, "%.3g%s", measured, unit);
		int ok = strcmp(op, ">=") == 0 ? measured >= want : measured <= want;
		verdict = ok ? "met" : "NOT MET";
		if (ok)
			met_count++;
		else
			missed_count++;
	}
	char w[48];
	snprintf(w, sizeof w, "%s %.3g%s", op, want, unit);
	printf("  %-46s %12s %12s  %s\n", what, m, w, verdict);
	sk_sink_add_target(cur_report, what, measured, op, want, unit, verdict);
}

void targets_print(struct sk_sink *r, const struct sk_scenario *const *scenarios, int nscen,
                   const struct tmo_engine_ops *const *engines, int nengines)
{
	int tp = ran(scenarios, nscen, "throughput");
	int ret = ran(scenarios, nscen, "retention");
	int race = ran(scenarios, nscen, "race");
	int exp = ran(scenarios, nscen, "expiry");
	int prog = ran(scenarios, nscen, "progress");
	if (!tp && !ret && !race && !exp && !prog)
		return;
	met_count = missed_count = unmeasured_count = 0;
	cur_report = r;

	if (tp) {
		double thread = get(r, "throughput", "thread", "seed_median_ns_per_op", "");
		printf("\n==== throughput: seed benchmark (1 s timeout armed and cancelled around an "
		       "empty block), median of rounds ====\n");
		printf("  %-10s %12s %12s %14s %12s\n", "engine", "ns/op", "floor ns/op", "x floor",
		       "x vs thread");
		for (int i = 0; i < nengines; i++) {
			const char *e = engines[i]->name;
			double ns = get(r, "throughput", e, "seed_median_ns_per_op", "");
			double fl = get(r, "throughput", e, "floor_ns_per_op", "");
			char c[4][32];
			fmt(c[0], ns, "%.1f");
			fmt(c[1], fl, "%.2f");
			fmt(c[2], ns / fl, "%.2f");
			fmt(c[3], thread / ns, "%.0f");
			printf("  %-10s %12s %12s %14s %12s\n", e, c[0], c[1], c[2], c[3]);
		}
		printf("  (x floor: times slower than an uncontended CAS pair measured in the same "
		       "run;\n   x vs thread: times faster than the thread engine, - when it was not "
		       "run)\n");
	}

	printf("\n==== targets (measured in this run) ====\n");
	printf("  %-46s %12s %12s  %s\n", "target", "measured", "wanted", "verdict");
	if (tp) {
		const char *nt = "not measured (thread not run)";
		const char *nl = "not measured (libevent not run)";
		const char *nw = "not measured (wheel not run)";
		double wheel = get(r, "throughput", "wheel", "seed_median_ns_per_op", "");
		double thread = get(r, "throughput", "thread", "seed_median_ns_per_op", "");
		double cv = get(r, "throughput", "condvar", "seed_median_ns_per_op", "");
		double lev = get(r, "throughput", "libevent", "seed_median_ns_per_op", "");
		double fl = get(r, "throughput", "wheel", "floor_ns_per_op", "");
		target("seed 1 thread: wheel ns per arm+cancel", wheel, "<=", 15, " ns", nw);
		target("seed 1 thread: wheel / condvar", wheel / cv, "<=", 0.5, "x",
		       isnan(wheel) ? nw : "not measured (condvar not run)");
		target("seed 1 thread: wheel faster than thread", thread / wheel, ">=", 1500, "x",
		       isnan(wheel) ? nw : nt);
		target("seed 1 thread: wheel faster than libevent", lev / wheel, ">=", 2, "x",
		       isnan(wheel) ? nw : nl);
		target("seed 1 thread: wheel / in-run floor", wheel / fl, "<=", 3, "x", nw);
		const char *two[] = {"wheel", "mpsc"};
		for (int i = 0; i < 2; i++) {
			char what[64], why[64];
			snprintf(what, sizeof what, "2 threads / 1 thread aggregate: %s", two[i]);
			snprintf(why, sizeof why, "not measured (%s not run, or --threads<2)", two[i]);
			double one = get(r, "throughput", two[i], "ops_per_s", "threads=1");
			double dbl = get(r, "throughput", two[i], "ops_per_s", "threads=2");
			target(what, dbl / one, ">=", 1.7, "x", why);
		}
		/* At the most threads measured beyond 2: 12x and 8x at 16 threads
		 * (0.75 and 0.5 of linear), as fractions of linear. */
		int most = 0;
		char param[32];
		for (int t = 256; t > 2 && most == 0; t--) {
			snprintf(param, sizeof param, "threads=%d", t);
			if (!isnan(get(r, "throughput", "wheel", "ops_per_s", param)))
				most = t;
		}
		if (most > 2) {
			char what[80];
			snprintf(what, sizeof what, "%d threads / 1 aggregate: wheel seed", most);
			target(what,
			       get(r, "throughput", "wheel", "ops_per_s", param) /
			           get(r, "throughput", "wheel", "ops_per_s", "threads=1"),
			       ">=", 0.75 * most, "x", nw);
			snprintf(what, sizeof what, "%d threads / 1 aggregate: wheel 1 ms held", most);
			target(what,
			       get(r, "throughput", "wheel", "held_pairs_per_s", param) /
			           get(r, "throughput", "wheel", "held_pairs_per_s", "threads=1"),
			       ">=", 0.5 * most, "x", nw);
		}
		double wl = get(r, "throughput", "wheel", "live_ns_per_op", "live=1000000");
		double cl = get(r, "throughput", "condvar", "live_ns_per_op", "live=1000000");
		target("1e6 live timers: wheel ns per op", wl, "<=", 30, " ns",
		       "not measured (wheel not run, or --quick)");
		target("1e6 live timers: wheel / condvar ns per op", wl / cl, "<=", 0.5, "x",
		       "not measured (wheel or condvar not run, or --quick)");
	}
	if (exp)
		target("expiry burst, 1e6 due at one instant: wheel", 
		       get(r, "expiry", "wheel", "fires_per_s", "n=1000000") / 1e6, ">=", 10,
		       "M fires/s", "not measured (wheel not run, or --quick)");
	if (prog) {
		const char *lf[] = {"mpsc", "wheel"};
		for (int i = 0; i < 2; i++) {
			char what[96], why[64];
			snprintf(what, sizeof what,
			         "worst arm+cancel while a callback blocks (not switched out): %s", lf[i]);
			snprintf(why, sizeof why, "not measured (%s not run)", lf[i]);
			target(what, get(r, "progress", lf[i], "callback_max_latency_ns", "") / 1e6, "<=",
			       1, " ms", why);
		}
	}
	if (ret) {
		const char *three[] = {"condvar", "mpsc", "wheel"};
		for (int i = 0; i < 3; i++) {
			char what[80], why[64];
			snprintf(what, sizeof what, "retention after cancels (settled): %s", three[i]);
			snprintf(why, sizeof why, "not measured (%s not run)", three[i]);
			double b = get(r, "retention", three[i], "held_bytes", "variant=cancelled,when=settled");
			target(what, b / 1024.0, "<=", 64, " KiB", why);
		}
	}
	if (race) {
		for (int i = 0; i < nengines; i++) {
			char what[80];
			snprintf(what, sizeof what, "race: violations, %s", engines[i]->name);
			target(what, get(r, "race", engines[i]->name, "violations", ""), "<=", 0, "",
			       "not measured (race did not complete)");
		}
	}
	printf("  %d met, %d not met, %d not measured (targets are reported, not asserted)\n",
	       met_count, missed_count, unmeasured_count);
}
