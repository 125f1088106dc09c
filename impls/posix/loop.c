/* The posix engine's thread: signals in, callbacks out (impls/posix.c: the
 * design). */
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "posix.h"

/* ---- the engine thread ---------------------------------------------------- */

/* Fire the arm a signal names, if it is still that arm and still armed;
 * *fired_max follows the latest deadline run. */
static void px_fire(struct tmo *e, uint64_t v, int64_t deadline, int64_t *fired_max)
{
	uint32_t idx = (uint32_t)v, gen = (uint32_t)(v >> 32);
	/* Destroy has begun: what has not started is cancelled, not run (the
	 * slot stays ARMED for destroy's sweep). */
	if (atomic_load(&e->stop))
		return;
	if (idx >= atomic_load_explicit(&e->nslots, memory_order_acquire))
		return; /* not ours */
	struct px_slot *s = slot_at(e, idx);
	uint64_t w = mkword(gen, S_ARMED);
	/* Before FIRING shows: a cancel that sees it reads this ref or later. */
	atomic_store_explicit(&e->cb_ref, tmo__cb_begin(), memory_order_release);
	if (!atomic_compare_exchange_strong_explicit(&s->word, &w, mkword(gen, S_FIRING),
	                                             memory_order_acq_rel, memory_order_relaxed)) {
		tmo__cb_end();
		return; /* late signal of a cancelled arm, or stale generation */
	}
	if (deadline > *fired_max)
		*fired_max = deadline;
	struct tmo_timer *t = s->timer;
	tmo_callback *cb = s->cb;
	void *arg = s->arg;
	/* The one-shot kernel timer has expired; release it before the callback
	 * so a re-arm from the callback finds the resource. */
	timer_delete(s->ktimer);
	atomic_fetch_sub_explicit(&e->pending, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->fired, 1, memory_order_relaxed);
	atomic_store_explicit(&priv(t)->ref, mkref(gen, idx) | PX_FIRED_BIT, memory_order_release);
	atomic_store(&e->running, t);
	cb(t, arg); /* may free t: not touched again */
	tmo__end_if_forked(e);
	tmo__cb_end();
	atomic_store(&e->running, NULL);
	atomic_store(&s->word, mkword(gen, S_DONE));
	/* Waiters increment `waiters` before they test the state (seq_cst):
	 * either they see DONE, or we see them here. */
	if (atomic_load(&e->waiters) != 0) {
		pthread_mutex_lock(&e->wm);
		pthread_cond_broadcast(&e->wait_cv);
		while (atomic_load(&e->waiters) != 0)
			pthread_cond_wait(&e->drain_cv, &e->wm);
		pthread_mutex_unlock(&e->wm);
	}
	px_slot_put(e, idx);
}

/* One signal: 1 = a timer's (goes into the window), 0 = dropped or
 * control (handled through *ctl). */
static int px_classify(const siginfo_t *si, uint64_t *v, bool *ctl)
{
	*v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	if (si->si_code != SI_TIMER)
		return 0; /* not from one of our timers: dropped */
	if (*v == PX_CTRL) {
		*ctl = true;
		return 0;
	}
	return 1;
}

static int64_t px_deadline_of(struct tmo *e, uint64_t v)
{
	uint32_t idx = (uint32_t)v;
	if (idx >= atomic_load_explicit(&e->nslots, memory_order_acquire))
		return INT64_MIN; /* not ours: px_fire drops it */
	return atomic_load_explicit(&slot_at(e, idx)->deadline, memory_order_relaxed);
}

/* Guarantee 4's named limit (tmo.h; impls/posix.c, Resolution): a signal of
 * a live arm that arrives once the loop has run a deadline more than the
 * resolution after its own cannot be put back in order.  Counted when it
 * arrives, before the window sorts anything, so an inversion the loop made
 * itself is never counted (the expiry scenario reports it as a violation). */
static void px_note_skew(struct tmo *e, uint64_t v, int64_t deadline, int64_t fired_max)
{
	if (deadline == INT64_MIN || fired_max == INT64_MIN || fired_max - deadline <= PX_RESOLUTION)
		return; /* not ours, nothing run yet, or within the resolution */
	uint32_t idx = (uint32_t)v, gen = (uint32_t)(v >> 32);
	if (atomic_load_explicit(&slot_at(e, idx)->word, memory_order_acquire) == mkword(gen, S_ARMED))
		atomic_fetch_add_explicit(&e->skewed, 1, memory_order_relaxed);
}

/*
 * The loop fires in deadline order what is queued, through a sliding window:
 * a min-heap of up to PX_WINDOW signals, topped up from the queue (without
 * blocking) before each fire while the queue has more, flushed in order once
 * it is empty.  hrtimers live in per-CPU bases: timers armed on different
 * CPUs expire on different CPUs, and when one CPU (a virtual CPU the
 * hypervisor descheduled, say) is late, an earlier deadline's signal is
 * queued after a later one's.  Measured (1e5 timers over 1 s, 2 vCPUs, load
 * 8-11): firing in queue order put 41-109 pairs out of order by more than
 * 50 us (up to 2.7 ms); fixed batches of 256 left 0-32 (up to 1.2 ms, pairs
 * split by a batch boundary); the window keeps any pair less than PX_WINDOW
 * signals apart in the queue in order.  A signal that arrives after the queue
 * ran empty and its window was flushed cannot be reordered: that residue is
 * the kernel's expiry skew between CPUs, which the resolution must cover.
 */
#define PX_WINDOW 256

struct px_due {
	int64_t deadline;
	uint64_t seq; /* arrival order: equal deadlines stay in queue order */
	uint64_t v;
};

static bool due_before(const struct px_due *a, const struct px_due *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void due_push(struct px_due *h, int *n, struct px_due d)
{
	int i = (*n)++;
	while (i > 0 && due_before(&d, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = d;
}

static struct px_due due_pop(struct px_due *h, int *n)
{
	struct px_due top = h[0], last = h[--*n];
	int i = 0;
	for (;;) {
		int c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && due_before(&h[c + 1], &h[c]))
			c++;
		if (!due_before(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n > 0)
		h[i] = last;
	return top;
}

void *tmo__px_main(void *arg)
{
	struct tmo *e = arg;
	tmo__thread_enter(e, "posix");
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, e->signo);
	static const struct timespec zero = {0, 0};
	struct px_due win[PX_WINDOW];
	int n = 0;
	uint64_t seq = 0;
	int64_t fired_max = INT64_MIN;

	/* The control timer is made here, where the thread's id is known: if
	 * the kernel refuses it (the user's quota of queued signals is full),
	 * the thread ends by itself.  Stopping it from outside would need a
	 * queued signal, which the same full quota refuses. */
	e->tid = gettid();
	int rc = tmo__px_make_ktimer(e, PX_CTRL, &e->ctl);
	pthread_mutex_lock(&e->wm);
	e->start_rc = rc;
	e->started = true;
	pthread_cond_broadcast(&e->wait_cv);
	pthread_mutex_unlock(&e->wm);
	if (rc != 0)
		return NULL;

	for (;;) {
		siginfo_t si;
		bool ctl = false, empty = false;
		if (n == 0) {
			if (sigwaitinfo(&set, &si) != e->signo)
				continue; /* EINTR */
		} else if (sigtimedwait(&set, &si, &zero) != e->signo) {
			empty = true; /* EAGAIN: nothing more queued */
		}
		while (!empty) {
			uint64_t v;
			int k = px_classify(&si, &v, &ctl);
			if (k > 0) {
				int64_t d = px_deadline_of(e, v);
				px_note_skew(e, v, d, fired_max);
				due_push(win, &n, (struct px_due){d, seq++, v});
			}
			if (n == PX_WINDOW)
				break; /* full: fire one, then top up again */
			if (sigtimedwait(&set, &si, &zero) != e->signo)
				empty = true;
		}
		while (n > 0) {
			struct px_due d = due_pop(win, &n);
			px_fire(e, d.v, d.deadline, &fired_max);
			if (!empty)
				break; /* the window was full: top it up before the next */
		}
		if (ctl) {
			atomic_store(&e->ctl_out, 0);
			if (atomic_load(&e->stop))
				break; /* what the window holds: destroy cancels it */
			tmo__park_point(&e->park); /* holding nothing */
		}
	}
	return NULL;
}
