/*
 * The throughput scenario's Google Benchmark bodies: see tp.h.
 *
 * Every arm must return 0 and every cancel TMO_CANCEL_PREVENTED (a 1 s
 * timeout cancelled microseconds later); anything else, or a callback that
 * runs, is counted and makes the run fail.  A capacity refusal (TMO_EAGAIN:
 * mpsc's one timer thread cannot file every held arm of several threads) is
 * asked again, after a yield, until the engine takes the arm (for at most
 * REFUSED_MAX_NS in a row, then it is an error): rates count accepted arms,
 * and the refusals are reported (arms_refused).
 */
#include "tp.h"
#include "tmo/testing.h"

static void tp_cb(struct tmo_timer *t, void *arg)
{
	struct tp_ctx *c = arg;
	(void)t;
	atomic_fetch_add(&c->fired, 1);
}

static void tp_error(struct tp_ctx *c, atomic_llong *counter, int rc)
{
	int zero = 0;
	atomic_fetch_add(counter, 1);
	atomic_compare_exchange_strong(&c->first_error, &zero, rc == 0 ? 1000 : rc);
}

/* An arm the engine refused for capacity (TMO_EAGAIN), asked again until
 * it is taken or `patience` of refusals in a row. */
static __attribute__((noinline)) int tp_arm_again(struct tp_ctx *c, struct tmo_timer *t,
                                                  int64_t timeout, int64_t patience)
{
	int64_t start = tmo_now_ns();
	long long n = 0;
	int rc;
	do {
		n++;
		sched_yield();
		rc = tmo_arm(c->e, t, timeout, tp_cb, c);
	} while (rc == TMO_EAGAIN && tmo_now_ns() - start < patience);
	atomic_fetch_add_explicit(&c->refused, n, memory_order_relaxed);
	return rc;
}

static inline int tp_arm(struct tp_ctx *c, struct tmo_timer *t, int64_t timeout)
{
	int rc = tmo_arm(c->e, t, timeout, tp_cb, c);
	return __builtin_expect(rc == TMO_EAGAIN, 0) ? tp_arm_again(c, t, timeout, REFUSED_MAX_NS)
	                                               : rc;
}

/* ---- the ops a loop drives (enum tp_on, a constant in each loop) ----
 * The engine: tmo_arm and tmo_cancel of the caller's timer `ts[k]`.  The
 * structure alone: add and del of its node k, deadline the batch's `now`
 * plus the timeout (a wheel is advanced to `now` once per batch, as the
 * engine's timer thread advances it; a heap needs nothing until a node is
 * due, and none is).  The engine is judged by its returns; the structure
 * has none to judge but a node already gone (cancel: fired). */
#define TP_INLINE static inline __attribute__((always_inline))

TP_INLINE int op_arm(struct tp_ctx *c, struct tp_ds *d, enum tp_on on, struct tmo_timer *ts,
                     uint32_t k, int64_t timeout)
{
	if (on == TP_ENGINE)
		return tp_arm(c, &ts[k], timeout);
	if (on == TP_WHEEL) {
		tmo__wheel_add(&d->wheel, &d->wn[k], d->now + timeout);
		return 0;
	}
	if (on == TP_NEAR_FAR)
		return tp_nf_insert(d, &d->ln[k], d->now + timeout);
	return tmo__heap_push(&d->heap, &d->hn[k], d->now + timeout);
}

TP_INLINE int op_cancel(struct tp_ctx *c, struct tp_ds *d, enum tp_on on, struct tmo_timer *ts,
                        uint32_t k)
{
	if (on == TP_ENGINE)
		return tmo_cancel(c->e, &ts[k]);
	if (on == TP_WHEEL) {
		if (!tmo__wheel_contains(&d->wn[k]))
			return TMO_CANCEL_FIRED;
		tmo__wheel_del(&d->wheel, &d->wn[k]);
		return TMO_CANCEL_PREVENTED;
	}
	if (on == TP_NEAR_FAR) {
		if (!d->sc->contains(&d->ln[k]))
			return TMO_CANCEL_FIRED;
		d->sc->remove(d->nf, &d->ln[k]);
		return TMO_CANCEL_PREVENTED;
	}
	if (!tmo__heap_contains(&d->hn[k]))
		return TMO_CANCEL_FIRED;
	tmo__heap_remove(&d->heap, &d->hn[k]);
	return TMO_CANCEL_PREVENTED;
}

/* Before each batch: the structure's clock (and the wheel's turn). */
TP_INLINE void op_batch(struct tp_ds *d, enum tp_on on, int64_t now)
{
	if (on == TP_ENGINE)
		return;
	d->now = now;
	if (on == TP_WHEEL) {
		struct tmo_wheel_list due = {NULL};
		d->fired += (long long)tmo__wheel_advance(&d->wheel, now, &due);
	}
	if (on == TP_NEAR_FAR && d->sc->next_deadline(d->nf) <= now) /* the timer thread's round */
		d->fired += (long long)d->sc->collect(d->nf, now, SIZE_MAX, tp_ds_due, NULL);
}

/* The seed loop body: the op a Ruby `Timeout.timeout(1) { }` costs. */
TP_INLINE void seed_op(struct tp_ctx *c, enum tp_on on, struct tmo_timer *ts)
{
	int rc = op_arm(c, c->ds, on, ts, 0, TMO_NSEC_PER_SEC);
	if (rc != 0) {
		tp_error(c, &c->arm_errors, rc);
		return;
	}
	__asm__ volatile("" ::: "memory"); /* the empty block */
	rc = op_cancel(c, c->ds, on, ts, 0);
	if (rc != TMO_CANCEL_PREVENTED)
		tp_error(c, &c->cancel_errors, rc);
}

/* The seed loop; the engine's reads no clock (its arm dates itself). */
TP_INLINE void seed_loop(sk_gb_state *st, struct tp_ctx *c, enum tp_on on, struct tmo_timer *ts)
{
	while (sk_gb_keep_running_batch(st, BATCH)) {
		if (on != TP_ENGINE)
			op_batch(c->ds, on, tmo_now_ns());
		for (int i = 0; i < BATCH; i++)
			seed_op(c, on, ts);
	}
	sk_gb_items_processed(st, (int64_t)sk_gb_max_iterations(st));
}

/* ---- the library on its own loop thread (TMO_CAP_RUN_ON_LOOP) ----
 * libev_loop and libuv_loop: at one thread the whole loop runs inside the
 * engine's loop thread (tmo_testing_run_on_loop), where arm and cancel call
 * the library directly, so the figure is the library's own cost.  With
 * more threads the others would queue behind that one thread: every thread
 * takes the adapter's path then, as a multi-threaded program would. */
struct tp_loop_call {
	sk_gb_state *st;
	struct tp_ctx *c;
	int held; /* bench_held, else bench_seed */
};

static void tp_loop_body(void *arg);

static int tp_on_loop(sk_gb_state *st, struct tp_ctx *c, int held)
{
	if (!(c->run->ops->caps & TMO_CAP_RUN_ON_LOOP) || sk_gb_thread_count(st) != 1)
		return 0;
	struct tp_loop_call call = {st, c, held};
	int rc = tmo_testing_run_on_loop(c->e, tp_loop_body, &call);
	if (rc != 0) {
		tp_error(c, &c->arm_errors, rc);
		sk_gb_skip_with_error(st, "tmo_testing_run_on_loop failed");
	}
	return 1;
}

/* A repetition of the rounds (tp_register_rounds) records its place in
 * their interleaved order: the counter "round", 1, 2, ... */
static void round_mark(sk_gb_state *st, struct tp_ctx *c)
{
	if (c->rounds_on)
		sk_gb_counter(st, "round", (double)++c->round_seq, SK_GB_COUNTER_DEFAULT);
}

void bench_seed(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	round_mark(st, c);
	if (tp_on_loop(st, c, 0))
		return;
	seed_loop(st, c, TP_ENGINE, &c->slots[sk_gb_thread_index(st)].t);
}

/* Cancel the oldest held timer (it was armed `now - at` ago). */
TP_INLINE void held_cancel_oldest(struct tp_ctx *c, struct tp_ds *d, enum tp_on on,
                                  struct tp_held *h, int64_t now)
{
	uint32_t k = (uint32_t)(h->tail++ % HELD_RING);
	int rc = op_cancel(c, d, on, h->t, k);
	if (rc != TMO_CANCEL_PREVENTED)
		tp_error(c, &c->cancel_errors, rc);
	h->hold_ns_sum += (double)(now - h->at[k]);
	h->holds++;
}

/* A held arm the engine refused for capacity (TMO_EAGAIN).  A capped
 * engine (glib: 4,096 pending) refuses while held timers fill it, this
 * thread's and the others', and each thread cancels only its own: waiting
 * for room (tp_arm_again) held every thread's 1 s timers until they fired
 * (throughput/glib at two threads, "7221 callbacks ran", in about half the
 * runs).  So a refusal that outlasts HELD_REFUSED_NS makes room from this
 * thread's own oldest timers (cancelled early: the mean hold reported shows
 * it), and so does every later refusal of the run at once; only with none
 * of its own left does the thread wait for the others'.  A transient
 * refusal (mpsc's inbox while its timer thread catches up) is only waited
 * for.  k, the slot being armed, is h->head - 1. */
static __attribute__((noinline)) int held_arm_refused(struct tp_ctx *c, struct tp_held *h,
                                                      uint32_t k, int64_t now)
{
	int rc = TMO_EAGAIN;
	if (!h->capped) {
		rc = tp_arm_again(c, &h->t[k], TMO_NSEC_PER_SEC, HELD_REFUSED_NS);
		h->capped = rc == TMO_EAGAIN;
	}
	long long n = 0;
	while (rc == TMO_EAGAIN && h->head - 1 > h->tail) {
		held_cancel_oldest(c, NULL, TP_ENGINE, h, now);
		n++;
		rc = tmo_arm(c->e, &h->t[k], TMO_NSEC_PER_SEC, tp_cb, c);
	}
	atomic_fetch_add_explicit(&c->refused, n, memory_order_relaxed);
	return rc == TMO_EAGAIN ? tp_arm_again(c, &h->t[k], TMO_NSEC_PER_SEC, REFUSED_MAX_NS) : rc;
}

TP_INLINE int held_arm(struct tp_ctx *c, struct tp_ds *d, enum tp_on on, struct tp_held *h,
                       uint32_t k, int64_t now)
{
	if (on != TP_ENGINE)
		return op_arm(c, d, on, h->t, k, TMO_NSEC_PER_SEC);
	int rc = tmo_arm(c->e, &h->t[k], TMO_NSEC_PER_SEC, tp_cb, c);
	return __builtin_expect(rc == TMO_EAGAIN, 0) ? held_arm_refused(c, h, k, now) : rc;
}

/* Each iteration arms one timer and cancels those armed at least HELD_NS
 * ago: in the steady state one arm and one cancel. */
TP_INLINE void held_loop(sk_gb_state *st, struct tp_ctx *c, struct tp_ds *d, enum tp_on on,
                         struct tp_held *h)
{
	h->head = h->tail = 0;
	h->capped = 0;
	while (sk_gb_keep_running_batch(st, BATCH)) {
		int64_t now = tmo_now_ns();
		op_batch(d, on, now);
		for (int i = 0; i < BATCH; i++) {
			while (h->head - h->tail >= HELD_RING ||
			       (h->head > h->tail && now - h->at[h->tail % HELD_RING] >= HELD_NS))
				held_cancel_oldest(c, d, on, h, now);
			uint32_t k = (uint32_t)(h->head++ % HELD_RING);
			h->at[k] = now;
			int rc = held_arm(c, d, on, h, k, now);
			if (rc != 0) {
				tp_error(c, &c->arm_errors, rc);
				h->head--;
			}
		}
	}
	int64_t now = tmo_now_ns(); /* the loop has ended: this is not timed */
	while (h->head > h->tail)
		held_cancel_oldest(c, d, on, h, now);
	sk_gb_items_processed(st, (int64_t)sk_gb_max_iterations(st));
}

void bench_held(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	if (tp_on_loop(st, c, 1))
		return;
	held_loop(st, c, NULL, TP_ENGINE, &c->held[sk_gb_thread_index(st)]);
}

static void tp_loop_body(void *arg)
{
	struct tp_loop_call *call = arg;
	if (call->held)
		held_loop(call->st, call->c, NULL, TP_ENGINE, &call->c->held[0]);
	else
		seed_loop(call->st, call->c, TP_ENGINE, &call->c->slots[0].t);
}

/* The same two loops on the structure alone (one thread, its own FIFO). */
void bench_ds_seed(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	round_mark(st, c);
	if (c->ds->kind == TP_WHEEL)
		seed_loop(st, c, TP_WHEEL, NULL);
	else if (c->ds->kind == TP_NEAR_FAR)
		seed_loop(st, c, TP_NEAR_FAR, NULL);
	else
		seed_loop(st, c, TP_HEAP, NULL);
}

/* At two threads (the machine's ceiling for the engine's held case at
 * two: nothing shared), the second thread drives a structure of its own. */
void bench_ds_held(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	struct tp_ds *d = sk_gb_thread_index(st) == 0 ? c->ds : c->ds2;
	if (d->kind == TP_WHEEL)
		held_loop(st, c, d, TP_WHEEL, &d->held);
	else if (d->kind == TP_NEAR_FAR)
		held_loop(st, c, d, TP_NEAR_FAR, &d->held);
	else
		held_loop(st, c, d, TP_HEAP, &d->held);
}

void bench_empty(sk_gb_state *st, void *arg)
{
	round_mark(st, arg);
	while (sk_gb_keep_running_batch(st, BATCH))
		for (int i = 0; i < BATCH; i++)
			__asm__ volatile("" ::: "memory");
}

void bench_floor(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	round_mark(st, c);
	atomic_uint *w = &c->slots[sk_gb_thread_index(st)].cas_word;
	while (sk_gb_keep_running_batch(st, BATCH))
		for (int i = 0; i < BATCH; i++) {
			unsigned zero = 0, one = 1;
			/* Both CASes succeed (the line is ours); seq_cst like an
			 * engine's arm and cancel publishing a timer's state. */
			atomic_compare_exchange_strong(w, &zero, 1);
			atomic_compare_exchange_strong(w, &one, 0);
		}
}

/* One step of a spin-wait: yield once `limit` steps went by. */
static inline void tp_spin(unsigned *spins, unsigned limit)
{
	if (++*spins > limit) {
		sched_yield();
		*spins = 0;
	}
}

/* Spin for a ring slot without starving the timer thread (2 cores). */
static inline void tp_pause(unsigned *spins) { tp_spin(spins, 64); }

/* Thread 0 arms timers and passes them to thread 1, which cancels them and
 * passes them back.  Both threads run the same iteration count, so every
 * armed timer is cancelled before the repetition ends. */
void bench_cross(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	int producer = sk_gb_thread_index(st) == 0;
	while (sk_gb_keep_running_batch(st, BATCH)) {
		for (int i = 0; i < BATCH; i++) {
			unsigned spins = 0;
			if (producer) {
				uint64_t fh = atomic_load_explicit(&c->free_head, memory_order_relaxed);
				while (atomic_load_explicit(&c->free_tail, memory_order_acquire) == fh)
					tp_pause(&spins);
				struct tmo_timer *t = c->free_[fh % RING];
				atomic_store_explicit(&c->free_head, fh + 1, memory_order_release);
				int rc = tp_arm(c, t, TMO_NSEC_PER_SEC);
				if (rc != 0) {
					tp_error(c, &c->arm_errors, rc);
					t->cb = NULL; /* tells the consumer: not armed */
				}
				uint64_t at = atomic_load_explicit(&c->armed_tail, memory_order_relaxed);
				while (at - atomic_load_explicit(&c->armed_head, memory_order_acquire) >= RING)
					tp_pause(&spins);
				c->armed[at % RING] = t;
				atomic_store_explicit(&c->armed_tail, at + 1, memory_order_release);
			} else {
				uint64_t ah = atomic_load_explicit(&c->armed_head, memory_order_relaxed);
				while (atomic_load_explicit(&c->armed_tail, memory_order_acquire) == ah)
					tp_pause(&spins);
				struct tmo_timer *t = c->armed[ah % RING];
				atomic_store_explicit(&c->armed_head, ah + 1, memory_order_release);
				if (t->cb != NULL) {
					int rc = tmo_cancel(c->e, t);
					if (rc != TMO_CANCEL_PREVENTED)
						tp_error(c, &c->cancel_errors, rc);
				}
				uint64_t ft = atomic_load_explicit(&c->free_tail, memory_order_relaxed);
				c->free_[ft % RING] = t;
				atomic_store_explicit(&c->free_tail, ft + 1, memory_order_release);
			}
		}
	}
	/* Counters are summed over threads: only the cancelling thread counts
	 * pairs, so the rate is pairs (not arms + cancels) per second. */
	if (!producer)
		sk_gb_counter(st, "pairs", (double)sk_gb_max_iterations(st), SK_GB_COUNTER_RATE);
}

/* Thread 0 writes an odd count into one cache line, thread 1 answers with
 * the next even one: each iteration is one round trip of the line between
 * the two threads' CPUs, what a timer handed to another thread's structure
 * (mpsc's filing thread) pays at least once.  Both threads run the same
 * iteration count, so the count ends even, ready for the next repetition.
 * The wait is a bare load loop (a pause instruction would add its own
 * latency); it yields only after HANDOFF_SPINS loads, far more than a round
 * trip between two running CPUs, so that two threads on one CPU still
 * progress.  (With the cross case's 64 the figure was the sched_yield
 * calls', 1.4-1.7 us, not the line's.) */
#define HANDOFF_SPINS (1u << 16)
void bench_handoff(sk_gb_state *st, void *arg)
{
	struct tp_ctx *c = arg;
	unsigned long long mine = sk_gb_thread_index(st) == 0 ? 0 : 1; /* the parity I wait for */
	while (sk_gb_keep_running_batch(st, BATCH))
		for (int i = 0; i < BATCH; i++) {
			unsigned spins = 0;
			unsigned long long v;
			while (((v = atomic_load_explicit(&c->handoff, memory_order_acquire)) & 1) != mine)
				tp_spin(&spins, HANDOFF_SPINS);
			atomic_store_explicit(&c->handoff, v + 1, memory_order_release);
		}
}

/* One seed pair, out of line: the warm-up's. */
void tp_seed_op(struct tp_ctx *c, struct tmo_timer *t) { seed_op(c, TP_ENGINE, t); }

/* Arm `n` background timers with long random timeouts.  Returns how many
 * were armed (fewer if the engine ran out: its error is in *err). */
size_t tp_arm_background(struct tp_ctx *c, struct tmo_timer *bg, size_t n, struct sk_rng *rng,
                         int *err)
{
	*err = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t timeout = 60 * TMO_NSEC_PER_SEC + (int64_t)sk_below(rng, 3540) * TMO_NSEC_PER_SEC +
		                  (int64_t)sk_below(rng, (uint64_t)TMO_NSEC_PER_SEC);
		int rc = tp_arm(c, &bg[i], timeout);
		if (rc != 0) {
			*err = rc;
			return i;
		}
		if ((i & 0xffff) == 0)
			sk_progress(c->run, "arming background timers", (double)i / (double)n);
	}
	return n;
}

size_t tp_cancel_background(struct tp_ctx *c, struct tmo_timer *bg, size_t n)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = tmo_cancel(c->e, &bg[i]);
		if (rc != TMO_CANCEL_PREVENTED) {
			if (bad == 0)
				sk_violation(c->run, "cancel of background timer %zu (60..3600 s timeout) "
				              "returned %s (%d), want TMO_CANCEL_PREVENTED",
				              i, rc < 0 ? tmo_errname(rc) : "not prevented", rc);
			bad++;
		}
	}
	return bad;
}

void tp_held_free(struct tp_ctx *c, int nthreads)
{
	for (int t = 0; c->held != NULL && t < nthreads; t++) {
		free(c->held[t].t);
		free(c->held[t].at);
	}
	free(c->held);
	c->held = NULL;
}

/* The held case's timers: NULL (case skipped) on a thread-per-timer engine
 * (a thread per held timer) or when memory is short. */
void tp_held_alloc(const struct sk_run *run, struct tp_ctx *c, int nthreads)
{
	if (sk_thread_per_timer(run))
		return;
	c->held = aligned_alloc(_Alignof(struct tp_held), (size_t)nthreads * sizeof *c->held);
	if (c->held != NULL)
		memset(c->held, 0, (size_t)nthreads * sizeof *c->held);
	for (int t = 0; c->held != NULL && t < nthreads; t++) {
		c->held[t].t = calloc(HELD_RING, sizeof *c->held[t].t);
		c->held[t].at = calloc(HELD_RING, sizeof *c->held[t].at);
		if (c->held[t].t == NULL || c->held[t].at == NULL) {
			tp_held_free(c, nthreads);
			return;
		}
	}
}
