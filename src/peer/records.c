/*
 * The peer core's records, arm, cancel and expiry (src/peer/peer.h: the
 * design).
 */
#include <string.h>

#include "peer/peer.h"

#define P(self) ((struct peer *)(void *)(self))

/* ---- records ---------------------------------------------------------------- */

/* An idle record, or the oldest one whose stop the loop thread owes
 * (state REARM: its library timer must be stopped before it starts again;
 * on the loop thread it is stopped here), or a new one. */
static struct peer_rec *rec_get(struct peer *e)
{
	if (!tmo_list_empty(&e->free)) {
		struct peer_rec *r = tmo_container_of(e->free.next, struct peer_rec, link);
		tmo_list_del(&r->link);
		e->nfree--;
		return r;
	}
	if (!tmo_list_empty(&e->stopping)) {
		struct peer_rec *r = tmo_container_of(e->stopping.next, struct peer_rec, link);
		tmo_list_del(&r->link);
		r->state = PR_REARM;
		if (peer_on_loop(e)) {
			e->be->stop(e, r);
			r->state = PR_FREE;
		}
		return r;
	}
	struct peer_rec *r = tmo__calloc(1, e->rec_size);
	if (r == NULL)
		return NULL;
	tmo_list_init(&r->link);
	r->eng = e;
	e->records++;
	return r;
}

/* r is idle (stopped in the library, or never started): keep or free it. */
static void rec_put(struct peer *e, struct peer_rec *r)
{
	r->state = PR_FREE;
	r->timer = NULL;
	/* A record whose library object only the loop thread may free (a
	 * libuv handle) stays on the free list when put elsewhere. */
	bool keep = r->lib_init && !(e->be->flags & PEER_ANY_THREAD) && !peer_on_loop(e);
	if (e->nfree < PEER_FREE_MAX || keep) {
		tmo_list_add(&e->free, &r->link);
		e->nfree++;
		return;
	}
	e->records--;
	if (e->be->rec_free != NULL)
		e->be->rec_free(e, r);
	else
		tmo__free(r);
}

void tmo__peer_release(struct peer *e, struct peer_rec *r)
{
	tmo_list_del(&r->link);
	rec_put(e, r);
}

/* The caller's timer is idle again (destroy, a cancel that prevented it). */
static void timer_idle(struct peer_rec *r)
{
	struct peer_priv *p = peer_priv(r->timer);
	atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
	atomic_store_explicit(&p->fired, 0, memory_order_relaxed);
}

/* Under m: owe the loop thread a wake-up. */
static void owe_wake(struct peer *e)
{
	if (!e->woken) {
		e->woken = true;
		e->be->wake(e);
	}
}

/* ---- arm / cancel --------------------------------------------------------- */

int tmo__peer_arm(struct tmo *self, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg)
{
	struct peer *e = P(self);
	struct peer_priv *p = peer_priv(t);
	if (atomic_load_explicit(&p->rec, memory_order_relaxed) != NULL)
		return TMO_EARMED;
	int64_t now = tmo_now_ns();
	peer_lock(e);
	if (e->be->max_pending != 0 && e->pending >= e->be->max_pending) {
		peer_unlock(e);
		return TMO_EAGAIN;
	}
	struct peer_rec *r = rec_get(e);
	if (r == NULL) {
		peer_unlock(e);
		return TMO_ENOMEM;
	}
	r->timer = t;
	r->cb = cb;
	r->arg = arg;
	r->deadline = now + timeout_ns; /* <= 2^62 + now: no overflow */
	if ((e->be->flags & PEER_ANY_THREAD) || peer_on_loop(e)) {
		int rc = e->be->start(e, r, now);
		if (rc != 0) {
			rec_put(e, r);
			peer_unlock(e);
			return rc;
		}
		r->state = PR_STARTED;
		tmo_list_add_tail(&e->started, &r->link);
	} else {
		if (r->state != PR_REARM)
			r->state = PR_QUEUED;
		tmo_list_add_tail(&e->queue, &r->link);
		owe_wake(e);
	}
	t->cb = cb;
	t->arg = arg;
	e->pending++;
	atomic_store_explicit(&p->rec, r, memory_order_relaxed);
	atomic_store_explicit(&p->fired, 0, memory_order_relaxed);
	peer_unlock(e);
	return 0;
}

/* Under m: stop a STARTED record's library timer (list: started). */
static void stop_started(struct peer *e, struct peer_rec *r)
{
	tmo_list_del(&r->link);
	if ((e->be->flags & PEER_ANY_THREAD) || peer_on_loop(e)) {
		e->be->stop(e, r);
		if (e->be->flags & PEER_ASYNC_STOP) {
			r->state = PR_DEAD;
			tmo_list_add_tail(&e->dead, &r->link);
		} else {
			rec_put(e, r);
		}
		return;
	}
	r->state = PR_STOPPING; /* the loop thread stops it, or an arm takes it */
	tmo_list_add_tail(&e->stopping, &r->link);
	owe_wake(e);
}

int tmo__peer_cancel(struct tmo *self, struct tmo_timer *t)
{
	struct peer *e = P(self);
	struct peer_priv *p = peer_priv(t);
	/* Everything under m: the loop thread clears rec and sets fired in two
	 * stores under m; read between them a firing timer would look idle. */
	peer_lock(e);
	int waited = tmo__gate_wait(&e->gate, &e->m, self, t);
	if (waited < 0) { /* TMO_EDEADLK: nothing changed, the callback still runs */
		peer_unlock(e);
		return waited;
	}
	struct peer_rec *r = atomic_load_explicit(&p->rec, memory_order_relaxed);
	if (r != NULL) {
		/* The arm, or the re-arm made by the callback we waited for. */
		atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
		e->pending--;
		e->cancelled++;
		if (r->state == PR_QUEUED) {
			tmo_list_del(&r->link);
			rec_put(e, r);
		} else if (r->state == PR_REARM) {
			/* Its library timer may still run: the loop thread stops it. */
			tmo_list_del(&r->link);
			r->state = PR_STOPPING;
			tmo_list_add_tail(&e->stopping, &r->link);
			owe_wake(e);
		} else if (r->state == PR_DUE) {
			/* Expired in the library, callback not started: the library
			 * is done with it but for its per-arm resources. */
			tmo_list_del(&r->link);
			if (e->be->done != NULL)
				e->be->done(e, r);
			rec_put(e, r);
		} else {
			stop_started(e, r);
		}
		peer_unlock(e);
		return TMO_CANCEL_PREVENTED;
	}
	int res = tmo__gate_result(&e->gate, t,
	                           atomic_load_explicit(&p->fired, memory_order_relaxed), waited);
	peer_unlock(e);
	return res;
}

int tmo__peer_stats(struct tmo *self, struct tmo_stats *out)
{
	struct peer *e = P(self);
	peer_lock(e);
	out->pending = e->pending;
	out->held_nodes = e->records;
	out->held_bytes = e->records * e->rec_size;
	out->threads = 1;
	out->fired = e->fired;
	out->cancelled = e->cancelled;
	out->skewed = e->skewed;
	peer_unlock(e);
	return 0;
}

/* ---- the loop thread --------------------------------------------------------- */

/* Under m: r's deadline has passed; it joins `due`.  It is placed in
 * deadline order from the back when its place is near the back (the usual
 * case: the library reports expiries in about that order, a queued arm past
 * its deadline is about the latest); otherwise it is appended and `due` is
 * sorted once before the next callback (peer_sort_due): a burst of timers
 * due at one instant, reported in the library's order (its own rounding of
 * equal deadlines), would otherwise cost a walk each, O(n^2). */
#define PEER_DUE_WALK 32
static void make_due(struct peer *e, struct peer_rec *r)
{
	struct tmo_list *at = &e->due;
	int walked = 0;
	while (at->prev != &e->due &&
	       tmo_container_of(at->prev, struct peer_rec, link)->deadline > r->deadline) {
		if (++walked > PEER_DUE_WALK) {
			at = &e->due;
			e->due_unsorted = true;
			break;
		}
		at = at->prev;
	}
	r->state = PR_DUE;
	tmo_list_add_tail(at, &r->link);
}

/* A stable merge sort of a NULL-terminated chain linked by `next`. */
static struct tmo_list *chain_sort(struct tmo_list *h, size_t n)
{
	if (n < 2)
		return h;
	struct tmo_list *mid = h;
	for (size_t i = 1; i < n / 2; i++)
		mid = mid->next;
	struct tmo_list *b = mid->next;
	mid->next = NULL;
	struct tmo_list *a = chain_sort(h, n / 2);
	b = chain_sort(b, n - n / 2);
	struct tmo_list head, *t = &head;
	while (a != NULL && b != NULL) {
		struct peer_rec *ra = tmo_container_of(a, struct peer_rec, link);
		struct peer_rec *rb = tmo_container_of(b, struct peer_rec, link);
		struct tmo_list **take = rb->deadline < ra->deadline ? &b : &a;
		t->next = *take;
		t = *take;
		*take = (*take)->next;
	}
	t->next = a != NULL ? a : b;
	return head.next;
}

/* Under m: put `due` in deadline order again (O(n log n), stable). */
static void peer_sort_due(struct peer *e)
{
	e->due_unsorted = false;
	size_t n = 0;
	for (struct tmo_list *l = e->due.next; l != &e->due; l = l->next)
		n++;
	e->due.prev->next = NULL;
	struct tmo_list *h = chain_sort(e->due.next, n);
	struct tmo_list *prev = &e->due;
	for (; h != NULL; h = h->next) {
		prev->next = h;
		h->prev = prev;
		prev = h;
	}
	prev->next = &e->due;
	e->due.prev = prev;
}

void tmo__peer_fire(struct peer *e, struct peer_rec *r)
{
	if (r->state != PR_STARTED || e->stop)
		return; /* cancelled (its stop is queued or done), or destroy began */
	tmo_list_del(&r->link);
	int64_t now = tmo_now_ns();
	if (now < r->deadline) {
		/* The library fired early (its clock is coarser than ours): again
		 * for the remainder.  If that fails (io_uring's ring is full), the
		 * loop thread retries from its queue: never early, never lost. */
		if (e->be->start(e, r, now) == 0) {
			tmo_list_add_tail(&e->started, &r->link);
		} else {
			r->state = PR_QUEUED;
			tmo_list_add_tail(&e->queue, &r->link);
			e->woken = true;
		}
		return;
	}
	/* Guarantee 4's named limit: the kernel reported it too late to run in
	 * order.  (base.ops is set when create returns, before any arm, whose
	 * record reached here under m.) */
	if ((e->be->flags & PEER_KERNEL_EXPIRY) && e->fired_max != INT64_MIN &&
	    e->fired_max - r->deadline > e->base.ops->resolution_ns)
		e->skewed++;
	make_due(e, r);
}

/* Loop thread, under m: run the callback of the first due record. */
static void fire_first(struct peer *e)
{
	struct peer_rec *r = tmo_container_of(e->due.next, struct peer_rec, link);
	struct tmo_timer *t = r->timer;
	struct peer_priv *p = peer_priv(t);
	tmo_list_del(&r->link);
	r->state = PR_FIRING;
	e->pending--;
	e->fired++;
	if (r->deadline > e->fired_max)
		e->fired_max = r->deadline;
	atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
	atomic_store_explicit(&p->fired, 1, memory_order_relaxed);
	tmo__gate_begin(&e->gate, t);
	peer_unlock(e);

	r->cb(t, r->arg); /* may free t: not touched again */
	tmo__end_if_forked((struct tmo *)(void *)e);

	peer_lock(e);
	tmo__gate_end(&e->gate, &e->m);
	if (e->be->done != NULL)
		e->be->done(e, r);
	rec_put(e, r);
}

/* Loop thread, under m: start what other threads queued (what is due
 * already joins `due`: it must not wait for the library's next turn behind
 * later deadlines), stop what they cancelled. */
void tmo__peer_drain(struct peer *e)
{
	e->woken = false;
	tmo_list_for_each_safe(r, &e->stopping, struct peer_rec, link) {
		tmo_list_del(&r->link);
		e->be->stop(e, r);
		rec_put(e, r);
	}
	if (tmo_list_empty(&e->queue))
		return;
	int64_t now = tmo_now_ns();
	tmo_list_for_each_safe(r, &e->queue, struct peer_rec, link) {
		tmo_list_del(&r->link);
		if (r->state == PR_REARM) {
			e->be->stop(e, r); /* the cancelled arm's timer, then this one */
			r->state = PR_QUEUED;
		}
		if (r->deadline <= now) {
			make_due(e, r);
			continue;
		}
		/* A failed start keeps the record queued for the next turn: an
		 * accepted arm is never dropped (libev and libuv cannot fail). */
		if (e->be->start(e, r, now) != 0) {
			tmo_list_add_tail(&e->queue, &r->link);
			break;
		}
		r->state = PR_STARTED;
		tmo_list_add_tail(&e->started, &r->link);
	}
}

/* Loop thread, under m: whether the first due record r may run now.  A
 * started timer the library has not reported yet is due after
 * collected_at - lag_ns (peer.h); if that bound is more than the resolution
 * before r's deadline, such a timer might be due that much earlier than r
 * and must run first (guarantee 4).  That happens when the loop thread was
 * starved: an arm drained past its deadline joins `due` at once (drain),
 * while a timer started earlier, due before it, waits for the library's
 * next turn; and when the library's timers fell due during a long due list.
 * A turn (collect) then reports them; should its clock still lag (a coarse
 * loop clock), r waits for the next turn.  Backends without collect
 * (GLib: its timer starts are dated within the arm's own clock reads, and
 * a turn reports every source its cached time has passed) are not held.
 * Kernel timers (PEER_KERNEL_EXPIRY) also get a turn at most every
 * PEER_COLLECT_NS between callbacks, so that one the kernel reported late
 * does not wait behind a long due list; the libraries' timers that fall
 * due meanwhile are later than every record on the list, and are not
 * worth a clock reading per callback. */
static bool unreported_may_precede(const struct peer *e, int64_t res)
{
	const struct peer_rec *r = tmo_container_of(e->due.next, struct peer_rec, link);
	return !tmo_list_empty(&e->started) && r->deadline - res > e->collected_at - e->lag_ns;
}

static bool due_may_run(struct peer *e)
{
	if (e->be->collect == NULL)
		return true;
	/* (base.ops is set when create returns, before any arm: a record is
	 * due) */
	int64_t res = e->base.ops->resolution_ns;
	bool behind = unreported_may_precede(e, res);
	if (!behind && (e->be->flags & PEER_KERNEL_EXPIRY) == 0)
		return true;
	int64_t now = tmo_now_ns();
	if (!behind && now - e->collected_at < PEER_COLLECT_NS)
		return true;
	e->collected_at = now;
	e->be->collect(e);
	if (e->stop || tmo_list_empty(&e->due))
		return true; /* nothing to hold: run_due looks again (defensive:
		              * no backend's collect releases m today) */
	if (e->due_unsorted)
		peer_sort_due(e);
	return !unreported_may_precede(e, res); /* as of this turn */
}

/* Loop thread, under m: fire what is due in deadline order, taking in what
 * other threads armed meanwhile before each callback, so that a queued arm
 * due earlier runs first (the libraries collect a turn's expiries at once,
 * then the adapter's queue would wait behind them all), and what the
 * library reports meanwhile (due_may_run).  Returns with e->held set when
 * the first due record waits for the library's next turn. */
void tmo__peer_run_due(struct peer *e)
{
	e->held = false;
	while (!e->stop && !tmo_list_empty(&e->due)) {
		if (e->due_unsorted)
			peer_sort_due(e);
		if (!due_may_run(e)) {
			e->held = true;
			return;
		}
		if (e->stop || tmo_list_empty(&e->due))
			break;
		fire_first(e);
		tmo__peer_drain(e);
	}
}

/* After the loop thread was joined (destroy), or in a fork child
 * (library = false: the library's state is the backend's fini_forked's):
 * every record still listed never ran its callback. */
void tmo__peer_drop_all(struct peer *e, bool library)
{
	tmo_list_for_each_safe(r, &e->started, struct peer_rec, link) {
		if (library)
			e->be->stop(e, r);
		if (library)
			timer_idle(r); /* the child may have freed the timers */
		e->cancelled++;
		tmo_list_del(&r->link);
		tmo_list_add(&e->dead, &r->link);
	}
	tmo_list_for_each_safe(r, &e->due, struct peer_rec, link) {
		if (library)
			timer_idle(r);
		e->cancelled++;
		tmo_list_del(&r->link);
		tmo_list_add(&e->dead, &r->link);
	}
	tmo_list_for_each_safe(r, &e->stopping, struct peer_rec, link) {
		tmo_list_del(&r->link);
		tmo_list_add(&e->dead, &r->link);
	}
	tmo_list_for_each_safe(r, &e->queue, struct peer_rec, link) {
		if ((r->state == PR_QUEUED || r->state == PR_REARM) && library) {
			timer_idle(r);
			e->cancelled++;
		}
		tmo_list_del(&r->link);
		tmo_list_add(&e->dead, &r->link);
	}
	tmo_list_for_each_safe(r, &e->free, struct peer_rec, link) {
		tmo_list_del(&r->link);
		tmo_list_add(&e->dead, &r->link);
	}
	e->nfree = 0;
}
