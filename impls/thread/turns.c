/*
 * thread engine: fire order by turns (impls/thread.c has the design).
 *
 * Order, without polling
 * ----------------------
 * Independent threads would fire in whatever order the scheduler wakes
 * them; on a loaded machine that inverted timers 2 ms apart.  So a due
 * thread calls its callback only on its turn: when no record due more than
 * the resolution before it is still waiting (the heap of waiting records,
 * by deadline and arm order, has its top within the resolution), and none
 * that decided to fire is still `entering` (by deadline): decided, and not
 * yet known to be inside its callback.  Timers within the resolution of
 * each other fire concurrently.
 *
 * Turns are handed on, never polled for:
 *  - a due thread held back by the heap's top sleeps on its own condvar in
 *    `blocked` (by deadline); whoever takes the top out of the heap (its
 *    own thread deciding to fire, or a cancel) wakes exactly the blocked
 *    records the new top lets through, earliest first;
 *  - a due thread held back by an `entering` record sleeps on that record's
 *    condvar until its callback returns, when that record's thread wakes
 *    it: a wake-up sent after the callback ran, so nothing can overtake it.
 * A flag set just before the call cannot stand in for "the callback
 * started": the thread may be preempted between the two, and a loaded
 * machine does that often enough (a few times per 9,000 timers with CPU
 * hogs running; waking the next thread before the call, 40-300 times).  So
 * a record leaves `entering` when its callback returns, or, for a callback
 * that runs longer than ENTRY_GRACE, when its thread is seen past the call:
 * it has used CPU time since it recorded its own just before the call, or
 * it is blocked (sleeping in the kernel, which nothing before the call
 * does).  A waiter looks at that after ENTRY_GRACE, and again each
 * ENTRY_GRACE while the record's thread is preempted before its callback:
 * the only repeated look, and it waits on that thread, not on the clock.
 * Each thread wakes once at its deadline and usually once for its turn;
 * nothing scans a list, and each step is O(log n).
 *
 * `blocked` and `entering` are intrusive pairing heaps (links in the
 * record, which is in at most one of them): insertion, removal of any
 * record and extraction of the minimum never allocate, so the firing path
 * cannot fail.
 */

#include "thread.h"

/* ---- blocked and entering: intrusive pairing heaps by deadline --------------- */

static struct rec *ph_meld(struct rec *a, struct rec *b)
{
	if (a == NULL)
		return b;
	if (b == NULL)
		return a;
	if (b->deadline < a->deadline) {
		struct rec *x = a;
		a = b;
		b = x;
	}
	b->ph_prev = a;
	b->ph_next = a->ph_child;
	if (a->ph_child != NULL)
		a->ph_child->ph_prev = b;
	a->ph_child = b;
	return a;
}

/* Two-pass merge of a sibling list into one tree (its root unlinked). */
static struct rec *ph_merge_pairs(struct rec *first)
{
	struct rec *stack = NULL;
	while (first != NULL) {
		struct rec *a = first, *b = a->ph_next;
		first = b != NULL ? b->ph_next : NULL;
		a->ph_next = a->ph_prev = NULL;
		if (b != NULL)
			b->ph_next = b->ph_prev = NULL;
		struct rec *m = ph_meld(a, b);
		m->ph_next = stack;
		stack = m;
	}
	struct rec *root = NULL;
	while (stack != NULL) {
		struct rec *m = stack;
		stack = m->ph_next;
		m->ph_next = NULL;
		root = ph_meld(root, m);
	}
	return root;
}

static void ph_insert(struct rec **root, struct rec *r)
{
	r->ph_child = r->ph_next = r->ph_prev = NULL;
	*root = ph_meld(*root, r);
}

static void ph_remove(struct rec **root, struct rec *r)
{
	if (r == *root) {
		*root = ph_merge_pairs(r->ph_child);
	} else {
		if (r->ph_prev->ph_child == r)
			r->ph_prev->ph_child = r->ph_next;
		else
			r->ph_prev->ph_next = r->ph_next;
		if (r->ph_next != NULL)
			r->ph_next->ph_prev = r->ph_prev;
		*root = ph_meld(*root, ph_merge_pairs(r->ph_child));
	}
	r->ph_child = r->ph_next = r->ph_prev = NULL;
}

void tmo__thr_set_in(struct tmo *e, struct rec *r, int where)
{
	if (r->in == IN_BLOCKED)
		ph_remove(&e->blocked, r);
	else if (r->in == IN_ENTERING)
		ph_remove(&e->entering, r);
	r->in = where;
	if (where == IN_BLOCKED)
		ph_insert(&e->blocked, r);
	else if (where == IN_ENTERING)
		ph_insert(&e->entering, r);
}

/* ---- turns ---------------------------------------------------------------- */

/* Whether p's thread is past its call: it used ENTRY_CPU_PROOF of CPU time
 * since it recorded its own, or it is blocked in the kernel.  p entered;
 * its thread is alive (p is not DONE, so not joined). */
static bool past_the_call(const struct rec *p)
{
	clockid_t cid;
	struct timespec ts;
	if (pthread_getcpuclockid(p->th, &cid) == 0 && clock_gettime(cid, &ts) == 0 &&
	    (int64_t)ts.tv_sec * TMO_NSEC_PER_SEC + ts.tv_nsec - p->entered_cpu >= ENTRY_CPU_PROOF)
		return true;
	return tmo__task_blocked(p->tid);
}

/* Under the mutex; r is in the heap and due.  Whether it may fire now, and
 * if not, what holds it back: *pred, the record to wait for until *until. */
enum turn tmo__thr_my_turn(struct tmo *e, const struct rec *r, struct rec **pred, int64_t *until)
{
	int64_t floor = r->deadline - THREAD_RESOLUTION_NS;
	if (tmo__heap_peek(&e->heap)->deadline < floor)
		return TURN_BLOCKED;
	int64_t now = 0;
	while (e->entering != NULL && e->entering->deadline < floor) {
		struct rec *p = e->entering;
		if (!atomic_load_explicit(&p->entered, memory_order_acquire)) {
			*pred = p;
			*until = (now ? now : tmo_now_ns()) + ENTRY_GRACE;
			return TURN_ENTERING;
		}
		if (now == 0)
			now = tmo_now_ns();
		if (now < p->entered_at + ENTRY_GRACE || !past_the_call(p)) {
			*pred = p;
			*until = (now < p->entered_at + ENTRY_GRACE ? p->entered_at : now) + ENTRY_GRACE;
			return TURN_ENTERING;
		}
		tmo__thr_set_in(e, p, IN_NONE); /* a long callback: it holds nobody back */
	}
	return TURN_GO;
}

/* Under the mutex, after the heap's top left: wake the blocked records
 * whose turn (as far as the heap goes) has come. */
static void next_turns(struct tmo *e)
{
	const struct tmo_heap_node *top = tmo__heap_peek(&e->heap);
	int64_t through = top != NULL ? top->deadline + THREAD_RESOLUTION_NS : INT64_MAX;
	while (e->blocked != NULL && e->blocked->deadline <= through) {
		struct rec *r = e->blocked;
		tmo__thr_set_in(e, r, IN_NONE);
		pthread_cond_signal(&r->cv);
	}
}

/* Under the mutex: take a WAITING record out of the heap and of `blocked`
 * (it fires, is cancelled, or is held by a cancel). */
void tmo__thr_unqueue(struct tmo *e, struct rec *r)
{
	tmo__thr_set_in(e, r, IN_NONE);
	if (tmo__heap_contains(&r->node)) {
		bool was_top = tmo__heap_peek(&e->heap) == &r->node;
		tmo__heap_remove(&e->heap, &r->node);
		if (was_top && e->blocked != NULL)
			next_turns(e);
	}
}
