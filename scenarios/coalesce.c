/*
 * coalesce — independence (guarantee 5) where deadlines crowd together.
 * N timers with deadlines inside ONE resolution window of the engine; a
 * random half is cancelled; every other timer must fire exactly once, never
 * early, and no cancelled one may fire.
 *
 * The same workload (same window, same cancelled half) and the same check
 * run against a model of core.async's
 * shared timeout channels (seed 003): `timeout(ms)` hands back an existing
 * channel when one is due within 10 ms after the wanted deadline, so
 * closing "your" timeout (the only way to cancel it) closes everyone's who
 * shares it, and they take the timeout branch at once.  The model is a
 * fixture, not an engine: the check MUST count lost timers on it, and the
 * scenario fails if it does not (a check that cannot see the document's
 * bug proves nothing about the engines).
 */
#include <stdatomic.h>

#include "kit/util.h"

static const struct sk_metric coalesce_metrics[] = {
	{"arm_eagain_retries", "count"}, {"lost", "count"}, {"cancelled_but_fired", "count"},
	{"timers", "count"}, {"model_lost", "count"}, {"violations", "count"}, {NULL, NULL},
};

static const struct sk_size coalesce_sizes[] = {
	{"timers", 10000, 2000, ""}, {"thread_timers", 200, 200, ""}, {0},
};

#define LEAD (50 * TMO_NSEC_PER_MSEC)
#define CA_RESOLUTION (10 * TMO_NSEC_PER_MSEC) /* core.async TIMEOUT_RESOLUTION_MS */

/* One user's view: what they asked for, and what they saw. */
struct co_user {
	struct tmo_timer t;
	int64_t deadline; /* lower bound (clock read before arm + timeout) */
	int cancelled;    /* this user cancelled (and the cancel said so) */
	atomic_int fired;
	int64_t fired_at;
};

static void co_cb(struct tmo_timer *t, void *arg)
{
	struct co_user *u = tmo_container_of(t, struct co_user, t);
	(void)arg;
	u->fired_at = sk_now_ns();
	atomic_fetch_add_explicit(&u->fired, 1, memory_order_release);
}

/* The check shared by engines and the model: returns the number of lost
 * timers (un-cancelled ones that did not fire exactly once at or after
 * their deadline) and counts cancelled ones that fired in *bad_cancel. */
static size_t co_check(const struct sk_run *run, const char *who, struct co_user *us, size_t n,
                       size_t *bad_cancel, int report_violations)
{
	size_t lost = 0, early = 0, never = 0, twice = 0, ncancelled = 0;
	*bad_cancel = 0;
	for (size_t i = 0; i < n; i++) {
		int f = atomic_load_explicit(&us[i].fired, memory_order_acquire);
		if (us[i].cancelled) {
			ncancelled++;
			if (f != 0 && (*bad_cancel)++ == 0 && report_violations)
				sk_violation(run, "%s: timer %zu was cancelled (TMO_CANCEL_PREVENTED) and still "
				              "fired",
				              who, i);
			continue;
		}
		if (f == 0)
			never++;
		else if (f > 1)
			twice++;
		else if (us[i].fired_at < us[i].deadline)
			early++;
		else
			continue;
		if (lost++ == 0 && report_violations)
			sk_violation(run, "%s: timer %zu (not cancelled) %s", who, i,
			              f == 0  ? "never fired"
			              : f > 1 ? "fired more than once"
			                      : "fired before its deadline (another timer's cancel?)");
	}
	printf("  %-22s %zu timers, %zu cancelled: lost %zu (never %zu, early %zu, twice %zu), "
	       "cancelled-but-fired %zu\n",
	       who, n, ncancelled, lost, never, early, twice, *bad_cancel);
	return lost;
}

/* ---- the core.async model (virtual time, single-threaded) ---- */

struct ca_chan {
	int64_t deadline;
	int closed;
	int64_t closed_at;
};

struct ca_model {
	struct ca_chan *chans;
	size_t nchans;
	size_t *user_chan; /* which channel each user got */
};

/* core.async's timeout: reuse the first channel due at or after `deadline`
 * and before deadline + 10 ms (its ceilingEntry lookup), else a new one. */
static size_t ca_timeout(struct ca_model *m, int64_t deadline)
{
	size_t best = SIZE_MAX;
	for (size_t c = 0; c < m->nchans; c++)
		if (m->chans[c].deadline >= deadline && m->chans[c].deadline < deadline + CA_RESOLUTION &&
		    (best == SIZE_MAX || m->chans[c].deadline < m->chans[best].deadline))
			best = c;
	if (best != SIZE_MAX)
		return best;
	m->chans[m->nchans] = (struct ca_chan){deadline, 0, 0};
	return m->nchans++;
}

static size_t run_model(const struct sk_run *run, struct co_user *us, size_t n,
                        const unsigned char *cancel, int64_t window)
{
	struct ca_model m = {calloc(n, sizeof *m.chans), 0, calloc(n, sizeof(size_t))};
	if (m.chans == NULL || m.user_chan == NULL) {
		free(m.chans);
		free(m.user_chan);
		return 0;
	}
	struct sk_rng rng = {run->seed ^ 0xca};
	int64_t now = 0; /* virtual ns */
	memset(us, 0, n * sizeof *us);
	for (size_t i = 0; i < n; i++) {
		us[i].deadline = now + LEAD + (int64_t)sk_below(&rng, (uint64_t)window);
		m.user_chan[i] = ca_timeout(&m, us[i].deadline);
		now += 100; /* requests arrive 100 ns apart */
	}
	/* Half the users are served first and close! their timeout channel. */
	now += TMO_NSEC_PER_MSEC;
	for (size_t i = 0; i < n; i++) {
		if (!cancel[i])
			continue;
		struct ca_chan *c = &m.chans[m.user_chan[i]];
		if (!c->closed) {
			c->closed = 1;
			c->closed_at = now;
		}
		us[i].cancelled = 1;
	}
	/* The timer thread closes every channel still open at its deadline. */
	for (size_t c = 0; c < m.nchans; c++)
		if (!m.chans[c].closed) {
			m.chans[c].closed = 1;
			m.chans[c].closed_at = m.chans[c].deadline;
		}
	/* Each waiting user takes the timeout branch when their channel
	 * closes, whoever closed it. */
	for (size_t i = 0; i < n; i++)
		if (!us[i].cancelled) {
			us[i].fired_at = m.chans[m.user_chan[i]].closed_at;
			atomic_store(&us[i].fired, 1);
		}
	size_t bad_cancel;
	size_t lost = co_check(run, "core.async model", us, n, &bad_cancel, 0);
	printf("  (model: %zu users shared %zu channels)\n", n, m.nchans);
	free(m.chans);
	free(m.user_chan);
	return lost;
}

/* The engine: arm n timers due inside one window, cancel the chosen half,
 * wait, check each user's timer on its own.  Adds the violations to *v. */
static void co_engine(const struct sk_run *run, struct tmo *e, struct co_user *us, size_t n,
                      const unsigned char *cancel, int64_t window, struct sk_rng *rng, int *v)
{
	int64_t base = sk_now_ns() + LEAD;
	int rc;
	size_t armed = 0;
	uint64_t retries = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t target = base + (int64_t)sk_below(rng, (uint64_t)window);
		int64_t now = sk_now_ns();
		us[i].deadline = target > now ? target : now;
		/* a retried arm is later than recorded: its deadline only moves later */
		rc = sk_arm_retry(e, &us[i].t, us[i].deadline - now, co_cb, NULL, &retries);
		if (rc == TMO_EAGAIN) {
			/* short of a limit other processes share: the check runs on
			 * the timers armed so far */
			printf("  note: the engine refused arm %zu with TMO_EAGAIN for %lld s on end (a "
			       "per-user limit such as RLIMIT_SIGPENDING, which other processes share): "
			       "%zu of %zu armed\n",
			       i, (long long)(SK_ARM_PATIENCE_NS / TMO_NSEC_PER_SEC), i, n);
			break;
		}
		if (rc != 0) {
			sk_violation(run, "arm %zu returned %s", i, tmo_errname(rc));
			(*v)++;
			break;
		}
		armed++;
	}
	if (sk_now_ns() >= base)
		printf("  note: arming took longer than %.0f ms; some deadlines passed before the "
		       "cancels\n",
		       (double)LEAD / 1e6);
	sk_report_fmt(run, "arm_eagain_retries", (double)retries, "count", "n=%zu", n);
	size_t cancel_fail = 0;
	for (size_t i = 0; i < armed; i++) {
		if (!cancel[i])
			continue;
		rc = tmo_cancel(e, &us[i].t);
		if (rc == TMO_CANCEL_PREVENTED) {
			us[i].cancelled = 1;
		} else if (rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED) {
			/* Too late to cancel (arming overran the lead): it fired. */
		} else {
			if (cancel_fail++ == 0)
				sk_violation(run, "cancel of timer %zu returned %s (%d)", i,
				              sk_cancel_name(rc), rc);
		}
	}
	*v += cancel_fail > 0;
	int64_t give_up = base + window + 5 * TMO_NSEC_PER_SEC;
	for (;;) {
		size_t waiting = 0;
		for (size_t i = 0; i < armed; i++)
			waiting += !us[i].cancelled && atomic_load(&us[i].fired) == 0;
		if (waiting == 0 || sk_now_ns() > give_up)
			break;
		sk_sleep_ns(TMO_NSEC_PER_MSEC);
	}
	sk_sleep_ns(20 * TMO_NSEC_PER_MSEC); /* a cancelled timer firing late would show */
	size_t bad_cancel;
	size_t lost = co_check(run, run->ops->name, us, armed, &bad_cancel, 1);
	*v += (lost > 0) + (bad_cancel > 0);
	tmo_destroy(&e);
	sk_report(run, "lost", "", (double)lost, "count");
	sk_report(run, "cancelled_but_fired", "", (double)bad_cancel, "count");
	sk_report_fmt(run, "timers", (double)armed, "count", "window_ns=%lld", (long long)window);

}

static int coalesce_run(const struct sk_run *run)
{
	size_t n = (size_t)sk_scaled(
	        (uint64_t)sk_size(run, sk_thread_per_timer(run) ? "thread_timers" : "timers"));
	if (n < 2)
		n = 2;
	int64_t window = run->ops->resolution_ns > 0 ? run->ops->resolution_ns : 1;
	struct co_user *us = calloc(n, sizeof *us);
	unsigned char *cancel = calloc(n, 1);
	struct tmo *e = NULL;
	/* sk_create_or_skip: short of kernel timers or threads (shared by
	 * the user's processes) is a skip with its reason */
	int rc = us == NULL || cancel == NULL ? TMO_ENOMEM : sk_create_or_skip(run, &e);
	if (rc != 0) {
		free(us);
		free(cancel);
		return rc;
	}
	/* A random half, chosen by the seed. */
	struct sk_rng rng = {run->seed};
	size_t want = n / 2, chosen = 0;
	while (chosen < want) {
		size_t i = (size_t)sk_below(&rng, n);
		if (!cancel[i]) {
			cancel[i] = 1;
			chosen++;
		}
	}
	int v = 0;
	printf("coalesce: %zu timers due inside one %lld ns window (the engine's resolution) %.0f ms "
	       "from now; cancel a random half\n",
	       n, (long long)window, (double)LEAD / 1e6);
	co_engine(run, e, us, n, cancel, window, &rng, &v);
	/* -- the core.async model, through the same check -- */
	size_t model_lost = run_model(run, us, n, cancel, window);
	sk_report(run, "model_lost", "", (double)model_lost, "count");
	if (model_lost == 0) {
		sk_violation(run, "the core.async model lost no timer: the independence check cannot see "
		              "the shared-channel bug");
		v++;
	} else {
		printf("  the check catches core.async's bug: %zu of %zu un-cancelled timeouts lost to "
		       "another user's close!\n",
		       model_lost, n - want);
	}
	free(us);
	free(cancel);
	return v;
}

const struct sk_scenario sk_scenario_coalesce = {
	.name = "coalesce",
	.summary = "timers due inside one resolution window, a random half cancelled: every other fires "
	           "(independence); a core.async shared-channel model must be caught losing timers",
	.correctness = 1,
	.run = coalesce_run,
	.params = "`timers` timers (the thread engine: thread_timers) due inside one resolution "
	          "window 50 ms ahead, a random half cancelled (--seed chooses which); then the "
	          "same workload against a model of core.async's shared 10 ms timeout channels.",
	.fails_when = "a timer that was not cancelled is lost, fires twice or early; a cancelled one "
	              "fires; or the check fails to catch the core.async model losing timers (a check "
	              "that cannot see that bug proves nothing).",
	.metrics = coalesce_metrics,
	.sizes = coalesce_sizes,
};
