/*
 * The service scenario's worker: see sv.h and service.c.
 */
#include <math.h>

#include "sv.h"

static const int64_t timeouts[4] = {
	100 * TMO_NSEC_PER_MSEC, TMO_NSEC_PER_SEC, 30 * TMO_NSEC_PER_SEC, 120 * TMO_NSEC_PER_SEC,
};

static void sv_cb(struct tmo_timer *t, void *arg)
{
	struct sv_shared *sh = arg;
	struct sv_timer *x = tmo_container_of(t, struct sv_timer, t);
	x->fired_at = sk_now_ns();
	int prev = atomic_exchange_explicit(&x->state, SV_FIRED, memory_order_acq_rel);
	if (prev != SV_ARMED)
		atomic_fetch_add(&sh->bad_fires, 1);
	atomic_fetch_add_explicit(&sh->callbacks, 1, memory_order_relaxed);
}

/* A service time: log-normal with median 1 ms and p99 50 ms (sigma =
 * ln 50 / z(0.99)), capped at SERVICE_MAX; Box-Muller on the kit's RNG. */
static int64_t sv_service_ns(struct sk_rng *rng)
{
	const double sigma = 1.6817; /* ln(50) / 2.3263 */
	double u1 = ((double)(sk_rand(rng) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
	double u2 = (double)(sk_rand(rng) >> 11) * 0x1p-53;
	double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
	double ns = 1e6 * exp(sigma * z);
	return ns < (double)SERVICE_MAX ? (int64_t)ns + 1 : SERVICE_MAX;
}

/* Resolve one timeout of a completing request: cancel it, and check the
 * answer against what its callback did. */
static void sv_resolve(struct sv_worker *w, struct sv_timer *x)
{
	/* no engine: the harness's own cost (service.c, sv_baseline) */
	int rc = w->sh->e != NULL ? tmo_cancel(w->sh->e, &x->t) : TMO_CANCEL_PREVENTED;
	if (rc == TMO_CANCEL_PREVENTED) {
		if (atomic_exchange_explicit(&x->state, SV_CANCELLED, memory_order_acq_rel) != SV_ARMED)
			w->v_both++; /* the callback ran too */
		w->cancelled++;
	} else if (rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED) {
		if (atomic_load_explicit(&x->state, memory_order_acquire) != SV_FIRED) {
			w->v_none++; /* said fired, yet no callback ran */
			return;
		}
		w->fired++;
		int64_t l = x->fired_at - x->deadline;
		w->early += l < 0;
		if (w->nlate == w->late_cap) {
			size_t cap = w->late_cap ? 2 * w->late_cap : 1024;
			int64_t *p = realloc(w->late, cap * sizeof *p);
			if (p == NULL)
				return;
			w->late = p, w->late_cap = cap;
		}
		w->late[w->nlate++] = l;
	} else {
		if (w->v_cancel++ == 0)
			w->first_cancel_error = rc;
	}
}

static void sv_complete(struct sv_worker *w, struct sv_req *r)
{
	uint64_t fired = w->fired;
	for (int i = 0; i < r->n; i++)
		sv_resolve(w, &r->to[i]);
	w->outlived += w->fired != fired;
	r->next = w->free;
	w->free = r;
	w->inflight--;
}

/* Complete every request whose bucket has ended by `now`. */
static void sv_complete_due(struct sv_worker *w, int64_t now)
{
	uint64_t upto = (uint64_t)now / BUCKET_NS;
	for (; w->cursor <= upto && w->inflight > 0; w->cursor++) {
		struct sv_req **b = &w->bucket[w->cursor % BUCKETS];
		struct sv_req *r = *b;
		*b = NULL;
		while (r != NULL) {
			struct sv_req *next = r->next;
			sv_complete(w, r);
			r = next;
		}
	}
	if (w->inflight == 0)
		w->cursor = upto + 1;
}

/* Draw a request's timeouts and service time.  A drawn 1 % outlive their
 * shortest timeout by 1..10 ms (one of 30 s or more is made 100 ms first,
 * so the run stays bounded); the others take the log-normal's time, and
 * fire a timeout only when that is longer than one of them. */
static int64_t sv_draw(struct sv_worker *w, int64_t *to, int *n)
{
	*n = 1 + (int)sk_below(&w->rng, SV_TIMEOUTS_MAX);
	int shortest = 0;
	for (int i = 0; i < *n; i++) {
		to[i] = timeouts[sk_below(&w->rng, 4)];
		if (to[i] < to[shortest])
			shortest = i;
	}
	if (sk_below(&w->rng, 10000) >= OUTLIVE_PER_10K)
		return sv_service_ns(&w->rng);
	if (to[shortest] > TMO_NSEC_PER_SEC)
		to[shortest] = timeouts[0];
	return to[shortest] + TMO_NSEC_PER_MSEC +
	       (int64_t)sk_below(&w->rng, (uint64_t)(OUTLIVE_MAX - TMO_NSEC_PER_MSEC));
}

/* Start a request at `now`: arm its timeouts, file it by completion time.
 * Returns 0, or -1 when the engine refused an arm for capacity (the
 * request's other timeouts are cancelled and it waits on the free list). */
static int sv_start(struct sv_worker *w, struct sv_req *r, int64_t now)
{
	int64_t to[SV_TIMEOUTS_MAX];
	int n;
	int64_t service = sv_draw(w, to, &n);
	r->n = 0;
	for (int i = 0; i < n; i++) {
		struct sv_timer *x = &r->to[r->n];
		x->deadline = now + to[i];
		atomic_store_explicit(&x->state, SV_ARMED, memory_order_relaxed);
		int rc = w->sh->e != NULL ? tmo_arm(w->sh->e, &x->t, to[i], sv_cb, w->sh) : 0;
		if (rc == TMO_EAGAIN || rc == TMO_ENOMEM) {
			w->refused++;
			atomic_store_explicit(&x->state, SV_IDLE, memory_order_relaxed);
			for (int k = 0; k < r->n; k++)
				sv_resolve(w, &r->to[k]);
			return -1;
		}
		if (rc != 0) {
			if (w->v_arm++ == 0)
				w->first_arm_error = rc;
			continue;
		}
		r->n++;
	}
	w->free = r->next;
	uint64_t idx = (uint64_t)(now + service + BUCKET_NS - 1) / BUCKET_NS;
	r->next = w->bucket[idx % BUCKETS];
	w->bucket[idx % BUCKETS] = r;
	w->inflight++;
	w->requests++;
	w->arms += (uint64_t)r->n;
	return 0;
}

/* Wait for the next bucket that holds a request to end (a full worker,
 * or the drain). */
static void sv_wait_bucket(struct sv_worker *w)
{
	uint64_t k = w->cursor;
	while (w->inflight > 0 && w->bucket[k % BUCKETS] == NULL && k < w->cursor + BUCKETS)
		k++;
	/* A sleep, never a spin: a worker held up by its cap (the thread
	 * engine's) must not count its wait as CPU per request. */
	int64_t left = (int64_t)(k * BUCKET_NS) - sk_now_ns();
	if (left > 0)
		sk_sleep_ns(left);
}

/* An arm refused for capacity: let completions free what the engine
 * holds; refused with nothing in flight for REFUSED_GIVE_UP_NS, the worker
 * gives up (a limit other processes hold: the run is skipped). */
static int sv_refused(struct sv_worker *w, int64_t now)
{
	if (w->refused_since == 0)
		w->refused_since = now;
	if (w->inflight == 0 && now - w->refused_since > REFUSED_GIVE_UP_NS) {
		w->starved = 1;
		return -1;
	}
	if (w->inflight > 0)
		sv_wait_bucket(w);
	else
		sk_sleep_ns(TMO_NSEC_PER_MSEC);
	return 0;
}

void *sv_worker_main(void *arg)
{
	struct sv_worker *w = arg;
	struct sv_shared *sh = w->sh;
	while (!atomic_load_explicit(&sh->go, memory_order_acquire))
		sched_yield();
	int64_t cpu0 = sk_thread_cpu_ns();
	int64_t now = sk_now_ns();
	w->cursor = (uint64_t)now / BUCKET_NS + 1;
	while ((now = sk_now_ns()) < sh->end) {
		sv_complete_due(w, now);
		if (w->free == NULL) {
			w->full++;
			sv_wait_bucket(w);
		} else if (sv_start(w, w->free, now) == 0) {
			w->refused_since = 0;
		} else if (sv_refused(w, now) != 0) {
			break;
		}
	}
	w->cpu_ns = sk_thread_cpu_ns() - cpu0;
	while (w->inflight > 0) { /* the drain: complete what is in flight */
		sv_wait_bucket(w);
		sv_complete_due(w, sk_now_ns());
	}
	return NULL;
}
