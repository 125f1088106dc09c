/*
 * skip-rescue: Ruby Bug #8730 on every engine.  A timeout scope runs
 *
 *     Timeout.timeout(10 ms) do
 *       begin
 *         begin; sleep 3; ensure; cleanup; end
 *       rescue <filter> => e
 *         seen = e; (raise if reraise)
 *       end
 *     end
 *
 * in each delivery mode (include/tmo/scope.h) and with each handler, and
 * prints the truth table — did the inner rescue see the interrupt, how many
 * times did the ensure run, what did the caller get — beside the expected
 * one.  Then nested scopes (an outer scope expiring inside a longer inner
 * one, and the reverse) and the edge-of-deadline race: blocks that return
 * within +-100 us of their deadline, many times; an interrupt seen after the
 * block returned is a late interrupt.  Every mismatch is a violation.
 */
#include <stdatomic.h>

#include "tmo/scope.h"
#include "kit/ruby_timeout.h"
#include "kit/util.h"

static const struct sk_metric skip_rescue_metrics[] = {
	{"truth_table_mismatches", "count"}, {"interrupted_block_ms_max", "ms"},
	{"nested_mismatches", "count"}, {"edge_discarded", "count"},
	{"edge_late_interrupts", "count"}, {"edge_expired", "count"}, {"scope_empty_ns", "ns"},
	{"arm_cancel_ns", "ns"}, {"scope_no_deadline_ns", "ns"}, {"arm_eagain_retries", "count"},
	{NULL, NULL},
};

static const struct sk_size skip_rescue_sizes[] = {
	{"truth_rounds", 20, 3, ""}, {"nest_rounds", 5, 1, ""}, {"edge_blocks", 5000, 500, ""}, {0},
};

#define MS TMO_NSEC_PER_MSEC
#define US TMO_NSEC_PER_USEC
#define SR_DEADLINE (10 * MS)
#define SR_LONG (3000 * MS) /* what an uninterrupted sleep would take */
/* The other scope of a nest, whose deadline must not pass: far beyond
 * anything a loaded machine delays, so only the one meant to expires. */
#define SR_FAR (600 * TMO_NSEC_PER_SEC)

static struct tmo *sr_eng;
static long sr_eagain; /* arms refused with TMO_EAGAIN, then retried */
/* The engine kept refusing for 1 s: the run cannot go on here and now, and
 * is skipped (not failed) once it has stopped; nothing it tried from then
 * on counts. */
static int sr_short;

/* tmo_scope_run, retried while the engine refuses to arm with TMO_EAGAIN
 * (the block has not run then).  Kernel-timer engines hit per-user limits
 * (RLIMIT_SIGPENDING) that other processes share; the refusal is the
 * engine's declared behaviour, not a scope result, so wait it out (up to
 * 1 s) and count it; past that the run is short of the resource. */
static int sr_scope(int64_t timeout, enum tmo_scope_mode mode, tmo_block_fn *block, void *arg,
                    intptr_t *value, struct tmo_exc *exc)
{
	for (int i = 0; !sr_short; i++) {
		int rc = tmo_scope_run(sr_eng, timeout, mode, block, arg, value, exc);
		if (rc != TMO_EAGAIN)
			return rc;
		if (i == 1000)
			sr_short = 1;
		else {
			sr_eagain++;
			sk_sleep_ns(MS);
		}
	}
	return TMO_EAGAIN;
}

static const char *mode_name(int mode)
{
	return mode == TMO_SCOPE_RAISE ? "raise" : mode == TMO_SCOPE_THROW ? "throw" : "exception";
}

/* ---- the truth table (kit/ruby_timeout.h: the Ruby block and its table) ---------- */

/* What one row of the table came to over its runs. */
struct row_tally {
	int saw_any, bad, ensure_min, ensure_max;
	const char *got;
	int64_t worst;
};

/* One run of the block in (mode, handler h); returns 1 if it did not come
 * out as the table says (printed as a violation). */
static int truth_run(const struct sk_run *run, int mode, int h, int r, struct row_tally *t)
{
	const struct sk_8730_handler *hd = &sk_8730_handlers[h];
	struct sk_8730 c = {.filter = hd->filter, .reraise = hd->reraise, .sleep_ns = SR_LONG};
	intptr_t val = 0;
	struct tmo_exc e = {0};
	int64_t t0 = sk_now_ns();
	int rc = sr_scope(SR_DEADLINE, mode, sk_8730_block, &c, &val, &e);
	int64_t el = sk_now_ns() - t0;
	if (el > t->worst)
		t->worst = el;
	const char *o = sk_8730_outcome(rc, val);
	int ok = sk_8730_as_expected(mode, h, &c, rc, val, &e);
	if (sr_short)
		return 0; /* not run: the run is skipped */
	if (!ok) {
		const struct sk_8730_expect *x = &sk_8730_expected[mode - TMO_SCOPE_RAISE][h];
		sk_violation(run,
		             "mode %s, %s, run %d: rescue saw %d (class %d), ensure ran %d, "
		             "code after sleep ran %d, caller got %s (%s) — expected saw %d, "
		             "ensure 1, caller %s",
		             mode_name(mode), hd->ruby, r, c.saw, (int)c.saw_cls, c.ensured,
		             c.after_sleep, o, tmo_errname(rc), x->saw, x->caller);
	}
	t->saw_any |= c.saw;
	if (c.ensured < t->ensure_min)
		t->ensure_min = c.ensured;
	if (c.ensured > t->ensure_max)
		t->ensure_max = c.ensured;
	if (t->got == NULL)
		t->got = o;
	else if (strcmp(t->got, o) != 0)
		t->got = "varies";
	return !ok;
}

static int truth_table(const struct sk_run *run, int reps)
{
	int v = 0;
	printf("truth table (%d runs per row; deadline 10 ms, the block sleeps 3 s):\n", reps);
	printf("  %-9s | %-23s | %-11s | %-6s | %-15s | %s\n", "mode", "inner handler",
	       "rescue saw", "ensure", "caller got", "expected");
	for (int mode = TMO_SCOPE_RAISE; mode <= TMO_SCOPE_EXCEPTION; mode++) {
		for (int h = 0; h < 3; h++) {
			struct row_tally t = {.ensure_min = 1 << 30};
			for (int r = 0; r < reps; r++) {
				t.bad += truth_run(run, mode, h, r, &t);
				if (sr_short)
					return v;
			}
			char ens[32];
			if (t.ensure_min == t.ensure_max)
				snprintf(ens, sizeof ens, "%d", t.ensure_min);
			else
				snprintf(ens, sizeof ens, "%d..%d", t.ensure_min, t.ensure_max);
			const char *ruby = sk_8730_handlers[h].ruby;
			printf("  %-9s | %-23s | %-11s | %-6s | %-15s | %s\n", mode_name(mode), ruby,
			       t.saw_any ? "yes" : "no", ens, t.got ? t.got : "-",
			       t.bad ? "MISMATCH" : "as expected");
			sk_report_fmt(run, "truth_table_mismatches", (double)t.bad, "count",
			              "mode=%s,handler=%s", mode_name(mode), ruby);
			sk_report_fmt(run, "interrupted_block_ms_max", (double)t.worst / 1e6, "ms",
			              "mode=%s,handler=%s", mode_name(mode), ruby);
			v += t.bad;
		}
	}
	return v;
}

/* ---- nesting ---------------------------------------------------------------- */

static int sr_nest_inner(struct sk_nest *n, tmo_block_fn *block)
{
	return sr_scope(n->inner_timeout, n->inner_mode, block, n, NULL, NULL);
}

static int nesting(const struct sk_run *run, int reps)
{
	int v = 0;
	printf("nested scopes (inner block: begin; begin; sleep 3; ensure; end; rescue => e; end):\n");
	printf("  %-28s | %-9s | %-9s | %-34s | %s\n", "case", "outer", "inner", "result", "expected");
	for (int reverse = 0; reverse <= 1; reverse++) {
		for (int om = TMO_SCOPE_RAISE; om <= TMO_SCOPE_EXCEPTION; om++) {
			for (int im = TMO_SCOPE_RAISE; im <= TMO_SCOPE_EXCEPTION; im++) {
				int bad = 0;
				char res[64] = "";
				for (int r = 0; r < reps; r++) {
					struct sk_nest n = {.run_inner = sr_nest_inner, .inner_mode = im,
					                    .inner_timeout = reverse ? SR_DEADLINE : SR_FAR,
					                    .sleep_ns = SR_LONG, .after_sleep_ns = 2 * MS};
					struct tmo_exc e = {0};
					intptr_t val = 0;
					int rc = sr_scope(reverse ? SR_FAR : SR_DEADLINE, om,
					                       sk_nest_outer_block, &n, &val, &e);
					int ok;
					if (!reverse) {
						/* The outer interrupt passes the inner boundary untouched;
						 * only a raise-mode (standard) error is rescued inside. */
						if (om == TMO_SCOPE_RAISE)
							ok = rc == 0 && val == 5 && n.rescued == 1 && n.inner_rc == 0;
						else
							ok = rc == TMO_ETIMEDOUT && e.scope == n.outer &&
							     n.inner_returned == 0 && n.rescued == 0;
						snprintf(res, sizeof res, "outer got %s, inner %s",
						         rc == 0 ? "its value" : tmo_errname(rc),
						         n.inner_returned ? "returned" : "never returned");
					} else {
						/* The inner scope's own timeout, then the outer block runs
						 * on and its scope returns the value. */
						int want_inner = im == TMO_SCOPE_RAISE ? 0 : TMO_ETIMEDOUT;
						ok = rc == 0 && val == 5 && n.inner_rc == want_inner &&
						     n.after_ok == 1 && n.rescued == (im == TMO_SCOPE_RAISE);
						snprintf(res, sizeof res, "inner got %s, outer its value",
						         n.inner_rc == 0 ? "0 (rescued)" : tmo_errname(n.inner_rc));
					}
					ok = ok && n.ensure_inner == 1 && n.ensure_outer == 1 && n.outer != 0 &&
					     n.inner != 0 && n.outer != n.inner && tmo_interrupt_pending() == 0;
					if (sr_short)
						return v;
					if (!ok) {
						sk_violation(run,
						              "nested (%s expires first), outer %s, inner %s, run %d: rc %s, "
						              "inner rc %s, inner returned %d, rescued %d, ensures %d/%d, "
						              "identity %s",
						              reverse ? "inner" : "outer", mode_name(om), mode_name(im), r,
						              tmo_errname(rc), tmo_errname(n.inner_rc),
						              n.inner_returned, n.rescued, n.ensure_inner, n.ensure_outer,
						              e.scope == n.outer ? "outer" : "not outer");
						bad++;
					}
				}
				printf("  %-28s | %-9s | %-9s | %-34s | %s\n",
				       reverse ? "inner expires inside outer" : "outer expires inside inner",
				       mode_name(om), mode_name(im), res, bad ? "MISMATCH" : "as expected");
				sk_report_fmt(run, "nested_mismatches", (double)bad, "count",
				          "first=%s,outer=%s,inner=%s", reverse ? "inner" : "outer",
				          mode_name(om), mode_name(im));
				v += bad;
			}
		}
	}
	return v;
}

/* ---- the edge-of-deadline race -------------------------------------------------- */

struct edge_run {
	const struct sk_run *run;
	int iterations, mode;
	struct sk_rng rng;
	int returned, expired, late, inconsistent;
};

static intptr_t edge_outer(void *arg)
{
	struct edge_run *r = arg;
	for (int i = 0; i < r->iterations; i++) {
		int64_t timeout = 200 * US + (int64_t)sk_below(&r->rng, 800 * US);
		struct sk_edge e = {.checks = (int)sk_below(&r->rng, 2)};
		/* Return from 100 us before the deadline to 100 us + two engine
		 * resolutions after it: the callback of a coarse engine (a 1 ms
		 * wheel) fires that late, and the race is with the callback. */
		int64_t window = 200 * US + 2 * r->run->ops->resolution_ns;
		e.until = sk_now_ns() + timeout - 100 * US + (int64_t)sk_below(&r->rng, (uint64_t)window);
		intptr_t val = 0;
		int rc = sr_scope(timeout, r->mode, sk_edge_block, &e, &val, NULL);
		if (sr_short)
			return 0;
		if (rc == 0 && e.finished && val == 3) {
			r->returned++;
		} else if (rc == TMO_ETIMEDOUT && !e.finished) {
			r->expired++;
		} else {
			sk_violation(r->run, "edge race, mode %s, iteration %d: rc %s, block finished %d",
			              mode_name(r->mode), i, tmo_errname(rc), e.finished);
			r->inconsistent++;
		}
		/* From here any interrupt is late: the outer scope has no deadline. */
		if (tmo_interrupt_pending()) {
			sk_violation(r->run, "edge race, mode %s, iteration %d: interrupt pending after the "
			              "scope returned", mode_name(r->mode), i);
			r->late++;
		}
		tmo_check();
		tmo_sleep(0);
		if ((i & 255) == 0)
			sk_progress(r->run, "edge race", (double)i / r->iterations);
	}
	return 0;
}

static int edge_race(const struct sk_run *run, int iterations)
{
	int v = 0;
	printf("edge-of-deadline race (timeouts 0.2-1 ms; blocks return from 100 us before to "
	       "100 us + 2 x resolution after them):\n");
	for (int mode = TMO_SCOPE_RAISE; mode <= TMO_SCOPE_EXCEPTION; mode++) {
		struct edge_run r = {.run = run, .iterations = iterations, .mode = mode,
		                     .rng = {run->seed * 31 + (uint64_t)mode}};
		/* The outer scope (no deadline) is the frame a late interrupt would
		 * reach: then it returns early instead of 0 after all iterations. */
		struct tmo_exc e = {0};
		struct tmo_scope_stats s0, s1;
		tmo_scope_stats(&s0);
		int rc = sr_scope(0, TMO_SCOPE_THROW, edge_outer, &r, NULL, &e);
		tmo_scope_stats(&s1);
		if (sr_short)
			return v;
		uint64_t discarded = s1.discarded - s0.discarded;
		if (s1.delivered - s0.delivered != (uint64_t)r.expired ||
		    s1.expired - s0.expired != (s1.delivered - s0.delivered) + discarded) {
			sk_violation(run, "edge race, mode %s: expiries %llu != delivered %llu + "
			              "discarded %llu, or delivered != %d timeouts seen",
			              mode_name(mode), (unsigned long long)(s1.expired - s0.expired),
			              (unsigned long long)(s1.delivered - s0.delivered),
			              (unsigned long long)discarded, r.expired);
			r.inconsistent++;
		}
		if (rc != 0) {
			sk_violation(run, "edge race, mode %s: a late interrupt reached the outer frame "
			              "(%s)", mode_name(mode), tmo_errname(rc));
			r.late++;
		}
		printf("  %-9s: %d runs, %d returned (%llu after their timer fired: expiry "
		       "discarded), %d expired, %d late, %d inconsistent\n",
		       mode_name(mode), iterations, r.returned, (unsigned long long)discarded,
		       r.expired, r.late, r.inconsistent);
		sk_report_fmt(run, "edge_discarded", (double)discarded, "count", "mode=%s,runs=%d",
		          mode_name(mode), iterations);
		sk_report_fmt(run, "edge_late_interrupts", (double)r.late, "count", "mode=%s,runs=%d",
		          mode_name(mode), iterations);
		sk_report_fmt(run, "edge_expired", (double)r.expired, "count", "mode=%s,runs=%d",
		          mode_name(mode), iterations);
		v += r.late + r.inconsistent;
	}
	return v;
}

/* ---- cost of a scope that does not expire ------------------------------------- */

static intptr_t empty_block(void *arg) { return (intptr_t)arg; }
static void never_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg; }

static double time_scopes(const struct sk_run *run, int n, int64_t timeout, int *v)
{
	int64_t t0 = sk_now_ns();
	for (int i = 0; i < n; i++) {
		intptr_t val = 0;
		int rc = sr_scope(timeout, TMO_SCOPE_EXCEPTION, empty_block,
		                       (void *)(intptr_t)i, &val, NULL);
		if (sr_short)
			break;
		if (rc != 0 || val != i) {
			sk_violation(run, "empty scope %d: rc %s, value %ld", i, tmo_errname(rc),
			              (long)val);
			(*v)++;
			break;
		}
	}
	return (double)(sk_now_ns() - t0) / n;
}

static double time_raw(const struct sk_run *run, int n, int *v)
{
	struct tmo_timer t = TMO_TIMER_INIT;
	int64_t t0 = sk_now_ns();
	for (int i = 0; i < n; i++) {
		int rc;
		for (int k = 0; (rc = tmo_arm(sr_eng, &t, TMO_NSEC_PER_SEC, never_cb, NULL)) == TMO_EAGAIN &&
		                k < 1000;
		     k++) {
			sr_eagain++;
			sk_sleep_ns(MS);
		}
		if (rc == TMO_EAGAIN)
			sr_short = 1;
		if (sr_short)
			break;
		if (rc != 0 || tmo_cancel(sr_eng, &t) != TMO_CANCEL_PREVENTED) {
			sk_violation(run, "raw arm+cancel %d failed", i);
			(*v)++;
			break;
		}
	}
	return (double)(sk_now_ns() - t0) / n;
}

/* The seed benchmark's shape (Timeout.timeout(1) {} n times) against the
 * engine's bare arm+cancel and a scope with no deadline (the runtime's own
 * cost: frame, setjmp, thread context).  Rounds alternate; medians of 5. */
static int scope_cost(const struct sk_run *run, int n)
{
	int v = 0;
	double scope[5], raw[5], none[5];
	for (int r = 0; r < 5 && !sr_short; r++) {
		raw[r] = time_raw(run, n, &v);
		scope[r] = time_scopes(run, n, TMO_NSEC_PER_SEC, &v);
		none[r] = time_scopes(run, n, 0, &v);
	}
	if (sr_short)
		return v;
	double s = sk_median(scope, 5), a = sk_median(raw, 5), z = sk_median(none, 5);
	printf("cost (median of 5 x %d): empty 1 s scope %.0f ns, bare arm+cancel %.0f ns, "
	       "scope without deadline %.0f ns\n", n, s, a, z);
	sk_report_fmt(run, "scope_empty_ns", s, "ns", "timeout=1s,n=%d", n);
	sk_report_fmt(run, "arm_cancel_ns", a, "ns", "timeout=1s,n=%d", n);
	sk_report_fmt(run, "scope_no_deadline_ns", z, "ns", "timeout=0,n=%d", n);
	return v;
}

static int skip_rescue_run(const struct sk_run *run)
{
	int rc = sk_create_or_skip(run, &sr_eng);
	if (rc != 0)
		return rc;
	sr_eagain = 0;
	sr_short = 0;
	int v = 0;
	v += truth_table(run, (int)sk_size(run, "truth_rounds"));
	if (!sr_short)
		v += nesting(run, (int)sk_size(run, "nest_rounds"));
	if (!sr_short)
		v += edge_race(run, (int)sk_size(run, "edge_blocks"));
	if (!sr_short)
		v += scope_cost(run, sk_thread_per_timer(run) ? 1000 : 20000);
	tmo_destroy(&sr_eng);
	if (sr_short && v == 0) {
		sk_skip(run, "the engine refused to arm with TMO_EAGAIN for 1 s on end (%s; a "
		         "per-user limit such as RLIMIT_SIGPENDING for kernel timers, which other "
		         "processes share): stopped after %ld refusals", tmo_strerror(TMO_EAGAIN),
		         sr_eagain);
		return SK_SKIPPED;
	}
	if (sr_eagain > 0)
		printf("note: the engine refused %ld arms with TMO_EAGAIN (retried after 1 ms each)\n",
		       sr_eagain);
	sk_report(run, "arm_eagain_retries", "", (double)sr_eagain, "count");
	printf("skip-rescue: %d violations\n", v);
	return v;
}

const struct sk_scenario sk_scenario_skip_rescue = {
	.name = "skip-rescue",
	.summary = "timeout scopes: raise/throw/exception truth table (Ruby Bug #8730), nesting by "
	           "identity, edge-of-deadline race (0 late interrupts)",
	.correctness = 1,
	.run = skip_rescue_run,
	.params = "Timeout scopes (include/tmo/scope.h): a 10 ms scope around a 3 s sleep in each "
	          "handler (rescue standard, rescue all, ensure) and delivery mode (raise, throw, "
	          "exception), truth_rounds rounds; nested scopes, nest_rounds rounds; edge_blocks "
	          "blocks per mode returning within 100 us of their 0.2-1 ms deadline (the "
	          "edge-of-deadline race); the cost of a scope. --seed draws the race's timing.",
	.fails_when = "a row of the truth table differs from the expected one (the interrupt seen "
	              "by the wrong handler, an ensure not run once, code after the sleep run), a "
	              "nested scope delivers the wrong scope's timeout, an interrupt arrives after its "
	              "block returned (late), or an empty scope or a plain arm+cancel fails.",
	.metrics = skip_rescue_metrics,
	.sizes = skip_rescue_sizes,
};
