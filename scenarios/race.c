/*
 * race — cancel issued from another thread at about the deadline, many
 * times (`arms`; engines too slow for that within the time cap run fewer,
 * and the count run is printed and reported).
 *
 * An arming thread arms timer i (timeout D) into slot i % K; a cancelling
 * thread waits until arm time + D + O + u and cancels it.  R is the
 * engine's resolution (at least 20 us), u is random in [-R/2, +R/2], and O
 * is steered so that about half the arms fire: each fired arm moves it R/64
 * earlier, each prevented one R/64 later.  The cancels then gather around
 * the moment this engine really fires, on this machine, under this load
 * (its lateness, and the cancelling thread's own lag), which is where the
 * race is.  The callback marks itself
 * running, spins ~0.5 us (widening the window in which a cancel meets a
 * running callback), counts, and marks itself done.  Per arm exactly one of:
 *
 *   fired      cancel returned FIRED or WAITED, and the callback ran once
 *              and had returned;
 *   cancelled  cancel returned PREVENTED, and the callback never runs.
 *
 * Violations: both (PREVENTED, yet the callback ran: seen at once, later by
 * the callback itself, or when the slot is reused), neither (FIRED/WAITED
 * but no callback), still running (the callback had not returned when
 * cancel returned), double fires, and cancel errors.  Then five probes
 * (rc_probes) make the last meeting certain rather than likely.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "kit/util.h"

static const struct sk_metric race_metrics[] = {
	{"requested", "count"}, {"run", "count"}, {"fired", "count"}, {"cancelled", "count"},
	{"both", "count"}, {"neither", "count"}, {"running_after_cancel", "count"},
	{"double_fires", "count"}, {"errors", "count"}, {"arms_per_s", "arms/s"},
	{"cancel_offset_ns", "ns"}, {"arm_retries", "count"}, {"probes", "count"},
	{"violations", "count"},
	{NULL, NULL},
};

static const struct sk_target race_targets[] = {
	{.label = "race: violations, %s", .engines = "*", .metric = "violations", .cmp = SK_AT_MOST,
	 .bound = 0, .unit = "", .missing = "not measured (race did not complete)"},
	{0},
};

static const struct sk_size race_sizes[] = {
	{"arms", 10000000, 1000000, ""}, {"time_cap", 120, 15, "s"}, {0},
};

#define K_MIN 16
#define K_MAX 256
#define K_THREAD 32
#define MIN_R (20 * TMO_NSEC_PER_USEC)

enum { S_FREE = 0, S_ARMED = 1 };
/* O_BOTH: already counted as a violation; not counted again on reuse. */
enum { O_NONE = 0, O_PREVENTED, O_FIRED, O_BOTH };

struct rc_slot {
	_Alignas(64) struct tmo_timer t;
	atomic_ullong iter;   /* the arm this slot holds now */
	atomic_int state;     /* S_FREE (canceller done) / S_ARMED */
	atomic_int in_cb;     /* the callback is between its first and last store */
	atomic_int cb_count;  /* callbacks for `iter` */
	int outcome;          /* canceller's verdict on the previous arm */
	int64_t armed_at, cancel_at;
	_Atomic int64_t fired_at; /* when the callback started */
};

struct rc_ctx {
	const struct sk_run *run;
	struct tmo *e;
	struct rc_slot *slots;
	uint64_t k, count;
	int64_t D, R, stop_at;
	_Atomic int64_t offset; /* O: the canceller steers it, the armer reads it */
	_Alignas(64) atomic_ullong armed; /* arms done (also: the armer's stop) */
	_Alignas(64) atomic_ullong done;  /* cancels done */
	atomic_int stop;
	/* Arms the engine refused for now (TMO_EAGAIN) and that were asked
	 * again (the armer's; read after it is joined); short_of: refused for
	 * 10 s on end, which stopped the run. */
	uint64_t retries;
	int short_of;
	/* outcome counters */
	atomic_llong fired, cancelled, both, neither, running, doubles, errors, stale, arm_errors;
	struct rc_probe *probes; /* PROBES of them, freed after the engine */
};

static void rc_stale(uint64_t i);

static void rc_cb(struct tmo_timer *t, void *arg)
{
	struct rc_slot *s = tmo_container_of(t, struct rc_slot, t);
	uint64_t i = (uint64_t)(uintptr_t)arg;
	atomic_store(&s->fired_at, sk_now_ns());
	atomic_store(&s->in_cb, 1);
	int64_t until = sk_now_ns() + 500;
	while (sk_now_ns() < until) {
	}
	if (atomic_load(&s->iter) != i) {
		/* The callback of an arm whose slot was already reused: that arm's
		 * cancel returned, so it must have said PREVENTED: both. */
		rc_stale(i);
	} else {
		atomic_fetch_add(&s->cb_count, 1);
	}
	atomic_store(&s->in_cb, 0);
}

static struct rc_ctx *rc_current; /* one race runs at a time */
static void rc_stale(uint64_t i)
{
	struct rc_ctx *c = rc_current;
	if (atomic_fetch_add(&c->stale, 1) == 0)
		sk_violation(c->run, "arm #%llu: its callback ran after its slot was reused (its cancel "
		              "had returned TMO_CANCEL_PREVENTED)",
		              (unsigned long long)i);
}

/* The probes: the race above meets a cancel that does not wait only when
 * the cancel happens to land in the callback's half microsecond, which a
 * loaded machine can make rare.  A probe makes the meeting certain: its
 * callback announces itself and then waits, on state, for the cancel to
 * begin; the cancel follows the announcement, and the callback stays until
 * the cancel has returned (or PROBE_HOLD passed: a cancel that waits, as
 * it must, waits that long).  A cancel that returns while the callback is
 * still inside is caught on every probe, unless the cancelling thread is
 * held off the CPU for PROBE_HOLD between its return and its next read. */
#define PROBES 5
#define PROBE_HOLD (20 * TMO_NSEC_PER_MSEC)

struct rc_probe {
	struct tmo_timer t;
	atomic_int in_cb, entering, returned;
	int64_t give_up; /* the callback's bound on waiting for the cancel */
};

static void rc_probe_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct rc_probe *p = tmo_container_of(t, struct rc_probe, t);
	atomic_store(&p->in_cb, 1);
	while (!atomic_load(&p->entering) && sk_now_ns() < p->give_up)
		sched_yield();
	int64_t until = sk_now_ns() + PROBE_HOLD;
	while (!atomic_load(&p->returned) && sk_now_ns() < until)
		sched_yield();
	atomic_store(&p->in_cb, 0);
}

/* PROBES probes on c's engine; returns the violations (counted in c too)
 * and in *made the probes whose cancel was judged (fewer when an arm was
 * refused, TMO_EAGAIN, or a probe failed). */
static long long rc_probes(const struct sk_run *run, struct rc_ctx *c, int64_t cap, int *made)
{
	long long v = 0;
	*made = 0;
	for (int i = 0; i < PROBES; i++) {
		struct rc_probe *p = &c->probes[i];
		p->give_up = sk_now_ns() + cap;
		int rc = sk_arm_retry(c->e, &p->t, c->R, rc_probe_cb, NULL, &c->retries);
		if (rc != 0) {
			if (rc != TMO_EAGAIN) {
				atomic_fetch_add(&c->arm_errors, 1);
				sk_violation(run, "probe %d: arm returned %s", i, tmo_errname(rc));
			}
			return v + (rc != TMO_EAGAIN);
		}
		while (!atomic_load(&p->in_cb) && sk_now_ns() < p->give_up)
			sched_yield();
		if (!atomic_load(&p->in_cb)) {
			sk_violation(run, "probe %d: a %lld us timer did not fire within %lld s", i,
			              (long long)(c->R / 1000), (long long)(cap / TMO_NSEC_PER_SEC));
			atomic_fetch_add(&c->neither, 1);
			atomic_store(&p->entering, 1);
			atomic_store(&p->returned, 1);
			(void)tmo_cancel(c->e, &p->t);
			return v + 1;
		}
		atomic_store(&p->entering, 1);
		rc = tmo_cancel(c->e, &p->t);
		int running = atomic_load(&p->in_cb);
		atomic_store(&p->returned, 1);
		if (running || rc < 0 || rc == TMO_CANCEL_PREVENTED) {
			v++;
			atomic_fetch_add(running ? &c->running : &c->errors, 1);
			sk_violation(run, "probe %d: the callback was running when cancel began, and cancel "
			              "returned %s%s",
			              i, sk_cancel_name(rc), running ? " before the callback had returned" : "");
		}
		/* A cancel that did not wait: the callback is still inside. */
		while (atomic_load(&p->in_cb))
			sched_yield();
		(*made)++;
	}
	return v;
}

static void *rc_armer(void *arg)
{
	struct rc_ctx *c = arg;
	struct sk_rng rng = {c->run->seed ^ 0x5ace};
	for (uint64_t i = 0; i < c->count; i++) {
		struct rc_slot *s = &c->slots[i % c->k];
		while (atomic_load_explicit(&s->state, memory_order_acquire) != S_FREE) {
			if (atomic_load(&c->stop))
				goto out;
			sched_yield();
		}
		if (atomic_load(&c->stop) || sk_now_ns() > c->stop_at)
			break;
		/* The previous arm of this slot was PREVENTED: its callback must
		 * not have run since. */
		if (s->outcome == O_PREVENTED && atomic_load(&s->cb_count) != 0) {
			if (atomic_fetch_add(&c->both, 1) == 0)
				sk_violation(c->run, "arm #%llu: cancel returned TMO_CANCEL_PREVENTED, then its "
				              "callback ran",
				              (unsigned long long)atomic_load(&s->iter));
		}
		atomic_store(&s->iter, i);
		atomic_store(&s->cb_count, 0);
		s->outcome = O_NONE;
		int64_t u = (int64_t)sk_below(&rng, (uint64_t)c->R) - c->R / 2;
		/* A refusal is a limit other processes share (posix: the user's
		 * RLIMIT_SIGPENDING, which a concurrent run can hold), not the
		 * race: asked again for up to 10 s, and dated by the try that
		 * took. */
		uint64_t retries = c->retries;
		s->armed_at = sk_now_ns();
		int rc = sk_arm_retry(c->e, &s->t, c->D, rc_cb, (void *)(uintptr_t)i, &c->retries);
		if (c->retries != retries)
			s->armed_at = sk_now_ns();
		s->cancel_at = s->armed_at + c->D + atomic_load(&c->offset) + u;
		if (rc == TMO_EAGAIN) {
			c->short_of = 1;
			break;
		}
		if (rc != 0) {
			if (atomic_fetch_add(&c->arm_errors, 1) == 0)
				sk_violation(c->run, "arm #%llu returned %s", (unsigned long long)i,
				              tmo_errname(rc));
			atomic_store(&c->stop, 1);
			break;
		}
		atomic_store_explicit(&s->state, S_ARMED, memory_order_release);
		atomic_store_explicit(&c->armed, i + 1, memory_order_release);
	}
out:
	atomic_store(&c->stop, 1);
	return NULL;
}

static void *rc_canceller(void *arg)
{
	struct rc_ctx *c = arg;
	for (uint64_t i = 0;; i++) {
		/* Stop once the armer stopped and every arm it made is handled. */
		while (atomic_load_explicit(&c->armed, memory_order_acquire) <= i) {
			if (atomic_load(&c->stop) && atomic_load(&c->armed) <= i)
				return NULL;
			sched_yield();
		}
		struct rc_slot *s = &c->slots[i % c->k];
		sk_wait_until(s->cancel_at);
		int rc = tmo_cancel(c->e, &s->t);
		int running = atomic_load(&s->in_cb);
		int n = atomic_load(&s->cb_count);
		if (running && rc != TMO_CANCEL_PREVENTED) {
			if (atomic_fetch_add(&c->running, 1) == 0)
				sk_violation(c->run, "arm #%llu: cancel returned %s while the callback was "
				              "still running",
				              (unsigned long long)i, sk_cancel_name(rc));
		}
		if (rc == TMO_CANCEL_PREVENTED) {
			s->outcome = O_PREVENTED;
			if (n != 0 || running) {
				s->outcome = O_BOTH;
				if (atomic_fetch_add(&c->both, 1) == 0)
					sk_violation(c->run, "arm #%llu: cancel %+lld ns from the deadline returned "
					              "TMO_CANCEL_PREVENTED, but the callback %s",
					              (unsigned long long)i,
					              (long long)(s->cancel_at - s->armed_at - c->D),
					              running ? "was running" : "had run");
			} else {
				atomic_fetch_add(&c->cancelled, 1);
			}
		} else if (rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED) {
			s->outcome = O_FIRED;
			if (n == 0) {
				if (atomic_fetch_add(&c->neither, 1) == 0)
					sk_violation(c->run, "arm #%llu: cancel returned %s but the callback never "
					              "ran",
					              (unsigned long long)i,
					              sk_cancel_name(rc));
			} else if (n > 1) {
				if (atomic_fetch_add(&c->doubles, 1) == 0)
					sk_violation(c->run, "arm #%llu: callback ran %d times", (unsigned long long)i,
					              n);
			} else if (!running) {
				atomic_fetch_add(&c->fired, 1);
			}
		} else {
			if (atomic_fetch_add(&c->errors, 1) == 0)
				sk_violation(c->run, "arm #%llu: cancel returned %s (%d)", (unsigned long long)i,
				              sk_cancel_name(rc), rc);
		}
		/* Steer O toward the point where half the arms fire, within
		 * [-D, +10 ms]. */
		int64_t o = atomic_load(&c->offset) + (s->outcome == O_FIRED ? -1 : 1) * (c->R / 64);
		o = o < -c->D ? -c->D : o > 10 * TMO_NSEC_PER_MSEC ? 10 * TMO_NSEC_PER_MSEC : o;
		atomic_store(&c->offset, o);
		atomic_store_explicit(&s->state, S_FREE, memory_order_release);
		atomic_store_explicit(&c->done, i + 1, memory_order_release);
	}
}

/* Sizes from the run: the count, the timeout, the slots in flight; the
 * time cap. */
static int64_t rc_size(const struct sk_run *run, struct rc_ctx *c)
{
	c->run = run;
	c->count = sk_scaled((uint64_t)sk_size(run, "arms"));
	c->R = run->ops->resolution_ns > MIN_R ? run->ops->resolution_ns : MIN_R;
	c->D = 2 * c->R;
	/* In flight: enough to keep the engine busy, few enough that the
	 * cancelling thread, which visits the slots in turn, is not behind by
	 * more than the timeout itself (~2 us per arm+cancel round trip). */
	c->k = (uint64_t)(c->D / (2 * TMO_NSEC_PER_USEC));
	c->k = c->k < K_MIN ? K_MIN : c->k > K_MAX ? K_MAX : c->k;
	if (sk_thread_per_timer(run))
		c->k = K_THREAD;
	int64_t cap = sk_size_ns(run, "time_cap");
	if (sk_scale() < 1) /* sanitized: a shorter cap, but at least 3 s */
		cap = (int64_t)((double)cap * sk_scale()) > 3 * TMO_NSEC_PER_SEC
		              ? (int64_t)((double)cap * sk_scale())
		              : 3 * TMO_NSEC_PER_SEC;
	return cap;
}

/* The armer and the canceller until the count or the cap, then the check
 * that no PREVENTED arm's callback ran late.  Returns 0 or TMO_EAGAIN (a
 * thread could not start). */
static int rc_drive(const struct sk_run *run, struct rc_ctx *c, int64_t cap, double *secs)
{
	int64_t t0 = sk_now_ns();
	c->stop_at = t0 + cap;
	pthread_t a, b;
	if (pthread_create(&a, NULL, rc_armer, c) != 0)
		return TMO_EAGAIN;
	if (pthread_create(&b, NULL, rc_canceller, c) != 0) {
		atomic_store(&c->stop, 1);
		pthread_join(a, NULL);
		return TMO_EAGAIN;
	}
	while (!atomic_load(&c->stop) || atomic_load(&c->done) < atomic_load(&c->armed)) {
		sk_progress(run, "cancel at the deadline", (double)atomic_load(&c->done) / (double)c->count);
		sk_sleep_ns(10 * TMO_NSEC_PER_MSEC);
	}
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	*secs = (double)(sk_now_ns() - t0) / 1e9;
	/* Late callbacks of PREVENTED arms would show within this. */
	sk_sleep_ns(50 * TMO_NSEC_PER_MSEC);
	for (uint64_t k = 0; k < c->k; k++) {
		struct rc_slot *s = &c->slots[k];
		if (s->outcome == O_PREVENTED && atomic_load(&s->cb_count) != 0 &&
		    atomic_fetch_add(&c->both, 1) == 0)
			sk_violation(run, "arm #%llu: cancel returned TMO_CANCEL_PREVENTED, then its callback "
			              "ran",
			              (unsigned long long)atomic_load(&s->iter));
	}
	return 0;
}

/* The outcome counts as rows and lines; returns the violations. */
static long long rc_report(const struct sk_run *run, struct rc_ctx *c, double secs)
{
	uint64_t ran = atomic_load(&c->done);
	long long fired = atomic_load(&c->fired), cancelled = atomic_load(&c->cancelled);
	long long both = atomic_load(&c->both) + atomic_load(&c->stale);
	long long neither = atomic_load(&c->neither), running = atomic_load(&c->running);
	long long doubles = atomic_load(&c->doubles), errors = atomic_load(&c->errors);
	long long arm_errors = atomic_load(&c->arm_errors);
	long long v = both + neither + running + doubles + errors + arm_errors;
	printf("race: %llu of %llu arms run in %.1f s%s: fired %lld, cancelled %lld | both %lld, "
	       "neither %lld, running after cancel %lld, double %lld, cancel errors %lld, arm errors "
	       "%lld\n",
	       (unsigned long long)ran, (unsigned long long)c->count, secs,
	       ran >= c->count ? ""
	       : arm_errors > 0 ? " (stopped: an arm failed)"
	       : c->short_of    ? " (stopped: the engine refused to arm for 10 s)"
	                        : " (stopped at the time cap)",
	       fired, cancelled, both, neither,
	       running, doubles, errors, arm_errors);
	if (ran > 0 && (fired == 0 || cancelled == 0))
		printf("race: note: every cancel landed on one side (%lld fired, %lld cancelled): the "
		       "race window was not exercised\n",
		       fired, cancelled);
	sk_report(run, "requested", "", (double)c->count, "count");
	sk_report(run, "run", "", (double)ran, "count");
	sk_report(run, "fired", "", (double)fired, "count");
	sk_report(run, "cancelled", "", (double)cancelled, "count");
	sk_report(run, "both", "", (double)both, "count");
	sk_report(run, "neither", "", (double)neither, "count");
	sk_report(run, "running_after_cancel", "", (double)running, "count");
	sk_report(run, "double_fires", "", (double)doubles, "count");
	sk_report(run, "errors", "", (double)(errors + arm_errors), "count");
	sk_report(run, "arms_per_s", "", (double)ran / secs, "arms/s");
	sk_report(run, "cancel_offset_ns", "", (double)atomic_load(&c->offset), "ns");
	sk_report(run, "arm_retries", "", (double)c->retries, "count");
	if (c->retries > 0)
		printf("race: %llu arms refused for now (TMO_EAGAIN) and asked again 1 ms later\n",
		       (unsigned long long)c->retries);
	printf("race: at the end, cancels were aimed at the deadline %+.1f us (where about half the "
	       "arms fire)\n",
	       (double)atomic_load(&c->offset) / 1e3);
	return v;
}

static int race_run(const struct sk_run *run)
{
	struct rc_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return TMO_ENOMEM;
	int64_t cap = rc_size(run, c);
	c->slots = calloc(c->k, sizeof *c->slots);
	c->probes = calloc(PROBES, sizeof *c->probes);
	int rc = c->slots && c->probes ? sk_create_or_skip(run, &c->e) : TMO_ENOMEM;
	if (rc != 0) {
		free(c->probes);
		free(c->slots);
		free(c);
		return rc;
	}
	rc_current = c;
	printf("race: %llu arms requested, %llu in flight, timeout %lld us, cancel at deadline + "
	       "steered offset %+lld..%+lld us, time cap %lld s\n",
	       (unsigned long long)c->count, (unsigned long long)c->k, (long long)(c->D / 1000),
	       (long long)(-c->R / 2000), (long long)(c->R / 2000), (long long)(cap / 1000000000));
	double secs = 0;
	rc = rc_drive(run, c, cap, &secs);
	int probed = 0;
	if (rc == 0 && !c->short_of && atomic_load(&c->arm_errors) == 0) {
		long long caught = rc_probes(run, c, cap, &probed);
		printf("race: %d of %d probes (the callback held until the cancel returned, or %lld ms): "
		       "%lld cancels returned while it was inside\n",
		       probed, PROBES, (long long)(PROBE_HOLD / TMO_NSEC_PER_MSEC), caught);
	}
	sk_report(run, "probes", "", (double)probed, "count");
	tmo_destroy(&c->e);
	rc_current = NULL;
	long long v = rc == 0 ? rc_report(run, c, secs) : 0;
	uint64_t ran = atomic_load(&c->done);
	int short_of = c->short_of;
	free(c->probes);
	free(c->slots);
	free(c);
	if (rc != 0)
		return rc;
	/* Short of the resource before any arm took: nothing was raced. */
	if (short_of && ran == 0 && v == 0)
		return sk_skip_refused(run);
	return v > INT32_MAX ? INT32_MAX : (int)v;
}

const struct sk_scenario sk_scenario_race = {
	.name = "race",
	.summary = "cancel from another thread at about the deadline, 10M times: fired, "
	           "cancelled, both, neither, still running",
	.correctness = 1,
	.run = race_run,
	.params = "An arming thread and a cancelling thread: each timer (2 x the resolution, at "
	          "least 40 us) is cancelled at about its deadline, steered so that about half "
	          "fire; `arms` arms, or as many as fit in time_cap (or until the engine refuses "
	          "to arm, TMO_EAGAIN, for 10 s on end: a limit other processes share). "
	          "Then five probes, whose callback waits for its cancel to begin and stays "
	          "until it returned (or 20 ms): a cancel that does not wait is caught on "
	          "every one. --seed draws the jitter.",
	.fails_when = "a cancel returned PREVENTED and the callback ran anyway (both), FIRED/WAITED "
	              "with no callback (neither), the callback still running when cancel returned, a "
	              "double fire, or a cancel error.",
	.metrics = race_metrics,
	.sizes = race_sizes,
	.targets = race_targets,
};
