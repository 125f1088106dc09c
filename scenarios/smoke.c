/*
 * smoke: the default scenario, seconds for every engine.  Arms and cancels
 * a batch of 1 s timers (every cancel must prevent its callback), lets a few
 * short timers fire (each exactly once, never early), checks the named
 * errors of bad input and that the engine's counters agree with what
 * happened.  Every check counts a violation.  An arm the engine refuses for
 * now (TMO_EAGAIN: a limit other processes share) is asked again for up to
 * 10 s; past that the run is skipped, with the reason.
 */
#include <stdatomic.h>

#include "kit/util.h"

static const struct sk_metric smoke_metrics[] = {
	{"arm_cancel_ns_per_op", "ns"}, {"fire_max_lateness_ns", "ns"}, {"violations", "count"},
	{NULL, NULL},
};

#define SMOKE_CANCELS 1000
#define SMOKE_FIRES 20

struct smoke_timer {
	struct tmo_timer t;
	int64_t deadline;
	atomic_int fired;
	_Atomic int64_t fired_at;
};

/* Arms refused for now (TMO_EAGAIN) and asked again; short: one was refused
 * for 10 s on end, and the run is skipped (a per-user limit that other
 * processes share, such as posix's RLIMIT_SIGPENDING). */
static uint64_t smoke_retries;
static int smoke_short;

static void smoke_cb(struct tmo_timer *t, void *arg)
{
	struct smoke_timer *st = tmo_container_of(t, struct smoke_timer, t);
	atomic_store(&st->fired_at, sk_now_ns());
	atomic_fetch_add(&st->fired, 1);
	(void)arg;
}

static void noop_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg; }

/* 1. arm + cancel: every cancel of a pending 1 s timer prevents it. */
static int smoke_cancels(const struct sk_run *run, struct tmo *e, struct smoke_timer *ts,
                         int *ncancel_out)
{
	int v = 0, rc;
	int ncancel = sk_thread_per_timer(run) ? SMOKE_CANCELS / 10 : SMOKE_CANCELS;
	int64_t t0 = sk_now_ns();
	for (int i = 0; i < ncancel; i++) {
		rc = sk_arm_retry(e, &ts[i].t, TMO_NSEC_PER_SEC, smoke_cb, NULL, &smoke_retries);
		if (rc == TMO_EAGAIN) {
			smoke_short = 1;
			return v;
		}
		if (rc != 0) {
			sk_violation(run, "arm+cancel #%d: arm of a 1 s timeout returned %s", i,
			              tmo_errname(rc));
			v++;
			continue;
		}
		rc = tmo_cancel(e, &ts[i].t);
		if (rc != TMO_CANCEL_PREVENTED) {
			sk_violation(run, "arm+cancel #%d: cancel of a pending 1 s timeout returned %s (%d), "
			              "want TMO_CANCEL_PREVENTED",
			              i, rc < 0 ? tmo_errname(rc) : "a non-prevented result", rc);
			v++;
		}
	}
	double ns_per_op = (double)(sk_now_ns() - t0) / ncancel;
	printf("arm+cancel: %d pairs, all prevented: %s, %.0f ns per pair (rough; throughput "
	       "measures it properly)\n",
	       ncancel, v == 0 ? "yes" : "NO", ns_per_op);
	sk_report(run, "arm_cancel_ns_per_op", "", ns_per_op, "ns");

	*ncancel_out = ncancel;
	return v;
}

/* 2. short timers fire, exactly once, never early. */
static int smoke_fires(const struct sk_run *run, struct tmo *e, struct smoke_timer *ts, size_t n,
                       int *fired_out)
{
	int v = 0, rc;
	memset(ts, 0, n * sizeof *ts);
	int64_t max_deadline = 0;
	for (int i = 0; i < SMOKE_FIRES; i++) {
		int64_t timeout = (int64_t)(i + 1) * TMO_NSEC_PER_MSEC;
		ts[i].deadline = sk_now_ns() + timeout; /* read before arm: a lower bound */
		rc = sk_arm_retry(e, &ts[i].t, timeout, smoke_cb, NULL, &smoke_retries);
		if (rc != 0) {
			ts[i].deadline = 0;
			if (rc == TMO_EAGAIN) {
				smoke_short = 1;
				break;
			}
			sk_violation(run, "fire #%d: arm of %d ms returned %s", i, i + 1, tmo_errname(rc));
			v++;
		}
		if (ts[i].deadline > max_deadline)
			max_deadline = ts[i].deadline;
	}
	/* Generous bound for a loaded 2-core machine; lateness is not judged
	 * here (the expiry scenario measures it). */
	int64_t give_up = max_deadline + 5 * TMO_NSEC_PER_SEC;
	for (;;) {
		int all = 1;
		for (int i = 0; i < SMOKE_FIRES; i++)
			all &= ts[i].deadline == 0 || atomic_load(&ts[i].fired) > 0;
		if (all || sk_now_ns() > give_up)
			break;
		sk_sleep_ns(TMO_NSEC_PER_MSEC);
	}
	sk_sleep_ns(20 * TMO_NSEC_PER_MSEC); /* a second firing would show by now */
	int64_t max_late = 0;
	int fired = 0;
	for (int i = 0; i < SMOKE_FIRES; i++) {
		if (ts[i].deadline == 0)
			continue;
		int f = atomic_load(&ts[i].fired);
		if (f != 1) {
			sk_violation(run, "fire #%d (%d ms timeout): callback ran %d times, want 1", i, i + 1,
			              f);
			v++;
			continue;
		}
		fired++;
		int64_t late = atomic_load(&ts[i].fired_at) - ts[i].deadline;
		if (late < 0) {
			sk_violation(run, "fire #%d (%d ms timeout): callback ran %lld ns early", i, i + 1,
			              (long long)-late);
			v++;
		}
		if (late > max_late)
			max_late = late;
		rc = tmo_cancel(e, &ts[i].t);
		if (rc != TMO_CANCEL_FIRED && rc != TMO_CANCEL_WAITED) {
			sk_violation(run, "fire #%d: cancel after the callback ran returned %s (%d), want "
			              "TMO_CANCEL_FIRED",
			              i, rc < 0 ? tmo_errname(rc) : "another result", rc);
			v++;
		}
	}
	printf("fires: %d of %d timers (1..%d ms) fired exactly once, max lateness %.2f ms\n", fired,
	       SMOKE_FIRES, SMOKE_FIRES, (double)max_late / 1e6);
	sk_report(run, "fire_max_lateness_ns", "", (double)max_late, "ns");

	*fired_out = fired;
	return v;
}

/* 3. bad input gets its named error. */
static int smoke_bad_input(const struct sk_run *run, struct tmo *e)
{
	int v = 0;
	struct tmo_timer idle = TMO_TIMER_INIT;
	struct {
		const char *what;
		int got, want;
	} errs[] = {
		{"arm with timeout -1", tmo_arm(e, &idle, -1, noop_cb, NULL), TMO_EBADTIMEOUT},
		{"arm above TMO_TIMEOUT_MAX", tmo_arm(e, &idle, TMO_TIMEOUT_MAX + 1, noop_cb, NULL),
		 TMO_EBADTIMEOUT},
		{"arm with NULL callback", tmo_arm(e, &idle, 1, NULL, NULL), TMO_ENULLCB},
		{"arm of NULL timer", tmo_arm(e, NULL, 1, noop_cb, NULL), TMO_ENULLTIMER},
		{"cancel of a never-armed timer", tmo_cancel(e, &idle), TMO_ENOTARMED},
		{"arm on a NULL engine", tmo_arm(NULL, &idle, 1, noop_cb, NULL), TMO_ENULLENGINE},
	};
	int nerr_ok = 0;
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		if (errs[i].got != errs[i].want) {
			sk_violation(run, "%s returned %s (%d), want %s", errs[i].what,
			              tmo_errname(errs[i].got), errs[i].got, tmo_errname(errs[i].want));
			v++;
		} else {
			nerr_ok++;
		}
	}
	printf("bad input: %d of %zu calls got their named error\n", nerr_ok,
	       sizeof errs / sizeof errs[0]);

	return v;
}

/* 4. the engine's own counters agree. */
static int smoke_stats(const struct sk_run *run, struct tmo *e, int fired, int ncancel)
{
	int v = 0;
	struct tmo_stats s;
	int rc = tmo_stats(e, &s);
	if (rc != 0) {
		sk_violation(run, "stats returned %s", tmo_errname(rc));
		v++;
	} else {
		if (s.pending != 0) {
			sk_violation(run, "stats: %llu pending, want 0 (everything fired or was cancelled)",
			              (unsigned long long)s.pending);
			v++;
		}
		if (s.fired != (uint64_t)fired || s.cancelled != (uint64_t)ncancel) {
			sk_violation(run, "stats: fired %llu cancelled %llu, want %d and %d",
			              (unsigned long long)s.fired, (unsigned long long)s.cancelled, fired,
			              ncancel);
			v++;
		}
		printf("stats: pending %llu, fired %llu, cancelled %llu, held %llu nodes / %llu bytes, "
		       "%llu threads\n",
		       (unsigned long long)s.pending, (unsigned long long)s.fired,
		       (unsigned long long)s.cancelled, (unsigned long long)s.held_nodes,
		       (unsigned long long)s.held_bytes, (unsigned long long)s.threads);
	}
	return v;
}

static int smoke_run(const struct sk_run *run)
{
	struct tmo *e = NULL;
	int rc = sk_create_or_skip(run, &e);
	if (rc != 0)
		return rc;
	size_t n = SMOKE_CANCELS > SMOKE_FIRES ? SMOKE_CANCELS : SMOKE_FIRES;
	struct smoke_timer *ts = calloc(n, sizeof *ts);
	if (ts == NULL) {
		tmo_destroy(&e);
		return TMO_ENOMEM;
	}
	int ncancel = 0, fired = 0;
	smoke_retries = 0;
	smoke_short = 0;
	int v = smoke_cancels(run, e, ts, &ncancel);
	if (!smoke_short)
		v += smoke_fires(run, e, ts, n, &fired);
	v += smoke_bad_input(run, e);
	if (!smoke_short) /* the counts are of a run that did not finish */
		v += smoke_stats(run, e, fired, ncancel);
	tmo_destroy(&e);
	free(ts);
	if (smoke_retries > 0)
		printf("smoke: %llu arms refused for now (TMO_EAGAIN) and asked again 1 ms later\n",
		       (unsigned long long)smoke_retries);
	if (smoke_short && v == 0)
		return sk_skip_refused(run);
	printf("smoke: %s\n", v == 0 ? "ok" : "VIOLATIONS (above)");
	return v;
}

const struct sk_scenario sk_scenario_smoke = {
	.name = "smoke",
	.summary = "seconds-long check: arm+cancel, a few fires (exactly once, never early), named errors, "
	           "stats",
	.correctness = 1,
	.run = smoke_run,
	.params = "1,000 arm+cancel pairs of a 1 s timeout (thread engine: 100), 20 timers of "
	          "1..20 ms that fire, the named errors of bad input, tmo_stats. Fixed size: "
	          "--quick, --threads and --seed change nothing.",
	.fails_when = "a cancel of a pending timer does not return PREVENTED; a fired timer ran other "
	              "than once, or early; a bad input does not get its named error; stats show "
	              "timers still pending at the end.",
	.metrics = smoke_metrics,
};
