/*
 * Timeout scopes (include/tmo/scope.h): frames, delivery, interruption
 * points, the condition variable and the queue.
 *
 * Implementation notes
 * --------------------
 * Per thread, one context (thread-local, initialised on first use): the chain
 * of handler frames (innermost first), the chain of running scopes, the mask
 * depth, the exception in flight, and the wake-up state that engine callbacks
 * and signallers touch: a mutex, a condvar on CLOCK_MONOTONIC, a `token` (a
 * signaller's wake-up) and `pending` (some scope expired and was not
 * delivered yet; a hint read without the lock by tmo_check()).
 *
 * Every blocking wait of the runtime parks on the waiting thread's OWN
 * condvar.  So an engine callback only ever locks the context of the thread
 * it targets, never a user's mutex: no lock-order cycle exists between a
 * callback and a waiter, and the context outlives every callback that can
 * reach it (the scope cancels its timer, waiting for a running callback,
 * before it returns).  Lock order: a user's (or queue's) mutex, then a
 * context's mutex; nothing takes them the other way round.
 *
 * Identity: scope ids come from one process-wide counter, taken by each
 * thread in blocks (ID_BLOCK at a time: one atomic add per block, not per
 * scope), so an id is never reused, in any thread, however the stack is.
 *
 * Which scope expired: its callback sets `fired`, but delivery does not trust
 * the order in which callbacks ran.  Engines with concurrent callbacks (the
 * thread engine) run an outer and an inner scope's callbacks together when
 * their deadlines are close or equal, and the inner one may store first.
 * deliver() therefore treats every scope whose deadline has passed by the
 * clock as expired too, and takes the outermost of them: an inner scope's
 * callback can only have run after its own deadline, so an outer scope with
 * an earlier (or equal) deadline is then expired as well.
 *
 * setjmp/longjmp: each function that calls setjmp keeps its state in a record
 * owned by its caller and only reads its (unchanged) parameters after a
 * longjmp, so no automatic variable of a setjmp-calling function is modified
 * between setjmp and longjmp (C11 7.13.2.1p3).  Raising copies the exception
 * into the context, pops the innermost frame, restores the mask depth the
 * frame was entered with, and jumps; every frame decides and passes on.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"
#include "tmo/scope.h"

struct frame {
	jmp_buf jb;
	struct frame *prev;
	int mask; /* mask depth at entry, restored when unwinding to here */
};

struct ctx {
	/* Thread-private (only the owning thread reads or writes these). */
	int inited;
	int mask;
	struct frame *top;
	struct tmo_scope *scope; /* innermost running scope */
	struct tmo_exc exc;      /* the exception being unwound */
	struct tmo_scope_stats stats;
	uint64_t next_id, id_end; /* this thread's block of scope ids */

	/* Shared with callbacks and signallers. */
	atomic_int pending; /* written under m; read without it as a hint */
	int token;          /* under m: a signaller woke this thread */
	pthread_mutex_t m;
	pthread_cond_t cv; /* only the owning thread waits on it */
};

struct tmo_scope {
	struct frame f;
	struct tmo_scope *parent;
	struct ctx *ctx;
	struct tmo *engine;
	uint64_t id;
	int64_t deadline; /* CLOCK_MONOTONIC ns; INT64_MAX: none */
	enum tmo_scope_mode mode;
	int armed;
	int delivered;    /* owner thread only */
	atomic_int fired; /* set by the engine callback */
	struct tmo_timer timer;
	tmo_block_fn *block;
	void *arg;
	intptr_t value;
};

struct tmo__waiter {
	struct tmo__waiter *next, *prev;
	struct ctx *c;
	int signalled; /* under the cond's mutex */
};

static _Thread_local struct ctx tls;

#define ID_BLOCK 4096u
static _Atomic uint64_t next_id_block = 1;

static uint64_t new_scope_id(struct ctx *c)
{
	if (c->next_id == c->id_end) {
		c->next_id = atomic_fetch_add_explicit(&next_id_block, ID_BLOCK, memory_order_relaxed);
		c->id_end = c->next_id + ID_BLOCK;
	}
	return c->next_id++;
}

/* ---- the thread context ------------------------------------------------ */

static pthread_key_t ctx_key;
static pthread_once_t ctx_key_once = PTHREAD_ONCE_INIT;
static int ctx_key_ok;

/* At thread exit: release the wake-up objects.  No callback can still reach
 * the context: a thread cannot exit inside a scope without unwinding it. */
static void ctx_release(void *p)
{
	struct ctx *c = p;
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->m);
	c->inited = 0;
}

static void ctx_key_init(void)
{
	ctx_key_ok = pthread_key_create(&ctx_key, ctx_release) == 0;
}

static struct ctx *ctx_get(void)
{
	struct ctx *c = &tls;
	if (c->inited)
		return c;
	pthread_once(&ctx_key_once, ctx_key_init);
	if (!ctx_key_ok)
		return NULL;
	if (pthread_mutex_init(&c->m, NULL) != 0)
		return NULL;
	if (tmo__cond_init_monotonic(&c->cv) != 0) {
		pthread_mutex_destroy(&c->m);
		return NULL;
	}
	if (pthread_setspecific(ctx_key, c) != 0) {
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->m);
		return NULL;
	}
	c->inited = 1;
	return c;
}

static _Noreturn void fatal(const char *what)
{
	fprintf(stderr, "tmo scope: %s\n", what);
	fflush(stderr);
	abort();
}

/* Wake the owner of c for a signaller's token. */
static void ctx_wake(struct ctx *c)
{
	pthread_mutex_lock(&c->m);
	c->token = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->m);
}

static int deliverable(struct ctx *c)
{
	return c->mask == 0 && atomic_load_explicit(&c->pending, memory_order_acquire);
}

/* Park the owner until a token, a deliverable interrupt, or the absolute
 * deadline (< 0: none).  Returns 1 when the deadline passed.  Callers re-check
 * their own condition: a return is a hint. */
static int park(struct ctx *c, int64_t deadline)
{
	int timedout = 0;
	pthread_mutex_lock(&c->m);
	while (!c->token && !deliverable(c)) {
		if (deadline < 0) {
			pthread_cond_wait(&c->cv, &c->m);
		} else {
			struct timespec ts = tmo__ts_from_ns(deadline);
			if (pthread_cond_timedwait(&c->cv, &c->m, &ts) == ETIMEDOUT) {
				timedout = 1;
				break;
			}
		}
	}
	c->token = 0;
	pthread_mutex_unlock(&c->m);
	return timedout;
}

/* `pending` := some scope on the chain expired and was not delivered.  Under
 * m, which a callback holds while it stores `pending` and then `fired`: a
 * scope read here as not fired has its `pending = 1` still to come, so the
 * value stored here never hides an expiry. */
static void recompute_pending(struct ctx *c)
{
	pthread_mutex_lock(&c->m);
	int p = 0;
	for (struct tmo_scope *s = c->scope; s != NULL; s = s->parent)
		if (atomic_load_explicit(&s->fired, memory_order_acquire) && !s->delivered)
			p = 1;
	atomic_store_explicit(&c->pending, p, memory_order_relaxed);
	pthread_mutex_unlock(&c->m);
}

/* ---- raising ------------------------------------------------------------ */

static _Noreturn void raise_exc(struct ctx *c, const struct tmo_exc *exc)
{
	c->exc = *exc;
	struct frame *f = c->top;
	if (f == NULL) {
		fprintf(stderr, "tmo scope: uncaught exception (class %d, code %d): %s\n",
		        (int)exc->cls, exc->code, exc->message ? exc->message : "");
		fatal("raise with no frame on this thread");
	}
	c->top = f->prev;
	c->mask = f->mask;
	longjmp(f->jb, 1);
}

/* Deliver the outermost expired scope's interrupt (see scope.h: it subsumes
 * the inner ones).  Expired: marked by its callback, or past its deadline
 * (see the notes at the top). */
static void deliver(struct ctx *c)
{
	struct tmo_scope *victim = NULL;
	int64_t now = tmo_now_ns();
	for (struct tmo_scope *s = c->scope; s != NULL; s = s->parent)
		if (!s->delivered &&
		    (atomic_load_explicit(&s->fired, memory_order_acquire) || s->deadline <= now))
			victim = s;
	if (victim == NULL) {
		recompute_pending(c);
		return;
	}
	victim->delivered = 1;
	c->stats.delivered++;
	recompute_pending(c);
	struct tmo_exc e = {TMO_EXC_TIMEOUT, TMO_ETIMEDOUT, TMO_EXPIRED_MESSAGE, victim->id};
	if (victim->mode == TMO_SCOPE_THROW)
		e.cls = TMO_EXC_THROW;
	else if (victim->mode == TMO_SCOPE_EXCEPTION)
		e.cls = TMO_EXC_INTERRUPT;
	raise_exc(c, &e);
}

void tmo_raise(enum tmo_exc_class cls, int code, const char *message)
{
	if (cls != TMO_EXC_STANDARD && cls != TMO_EXC_TIMEOUT && cls != TMO_EXC_INTERRUPT)
		fatal("tmo_raise: class must be STANDARD, TIMEOUT or INTERRUPT");
	struct tmo_exc e = {cls, code, message, 0};
	raise_exc(&tls, &e);
}

void tmo_reraise(const struct tmo_exc *exc)
{
	if (exc == NULL)
		fatal("tmo_reraise: NULL exception");
	raise_exc(&tls, exc);
}

/* ---- rescue and ensure ----------------------------------------------------- */

struct rescue_rec {
	struct frame f;
	unsigned filter;
	tmo_block_fn *body;
	void *arg;
	tmo_handler_fn *handler;
	void *harg;
	intptr_t value;
	struct tmo_exc exc;
};

/* Returns 0 when body returned, 1 when the handler ran. */
static __attribute__((noinline)) int rescue_frame(struct ctx *c, struct rescue_rec *r)
{
	if (setjmp(r->f.jb) == 0) {
		r->value = r->body(r->arg);
		c->top = r->f.prev;
		return 0;
	}
	/* Unwound to here; the raiser popped the frame. */
	if (!(r->filter & TMO_RESCUE_CLASS(c->exc.cls)))
		raise_exc(c, &c->exc);
	r->exc = c->exc;
	r->value = r->handler(&r->exc, r->harg);
	return 1;
}

#define CLASS_BITS TMO_RESCUE_ALL

int tmo_rescue(unsigned filter, tmo_block_fn *body, void *arg, tmo_handler_fn *handler,
               void *harg, intptr_t *value)
{
	if (body == NULL || handler == NULL)
		return TMO_ENULLCB;
	if (filter == 0 || (filter & ~(unsigned)CLASS_BITS) != 0)
		return TMO_EINVAL;
	struct ctx *c = ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	struct rescue_rec r = {.filter = filter, .body = body, .arg = arg,
	                       .handler = handler, .harg = harg};
	r.f.prev = c->top;
	r.f.mask = c->mask;
	c->top = &r.f;
	int rc = rescue_frame(c, &r);
	if (value != NULL)
		*value = r.value;
	return rc;
}

struct ensure_rec {
	struct frame f;
	tmo_block_fn *body;
	void *arg;
	tmo_ensure_fn *ensure;
	void *earg;
	intptr_t value;
	struct tmo_exc exc;
};

static __attribute__((noinline)) void ensure_frame(struct ctx *c, struct ensure_rec *r)
{
	if (setjmp(r->f.jb) == 0) {
		r->value = r->body(r->arg);
		c->top = r->f.prev;
		c->mask = r->f.mask;
		r->ensure(r->earg);
		return;
	}
	/* Keep the exception: the ensure may raise and rescue internally. */
	r->exc = c->exc;
	r->ensure(r->earg);
	raise_exc(c, &r->exc);
}

int tmo_ensure(tmo_block_fn *body, void *arg, tmo_ensure_fn *ensure, void *earg,
               intptr_t *value)
{
	if (body == NULL || ensure == NULL)
		return TMO_ENULLCB;
	struct ctx *c = ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	struct ensure_rec r = {.body = body, .arg = arg, .ensure = ensure, .earg = earg};
	r.f.prev = c->top;
	r.f.mask = c->mask;
	c->top = &r.f;
	ensure_frame(c, &r);
	if (value != NULL)
		*value = r.value;
	return 0;
}

/* ---- scopes --------------------------------------------------------------- */

/* Engine callback.  Touches only the scope's `fired` and its thread's
 * context; the scope cancels (and waits for) this callback before its memory
 * goes away.  `pending` is stored before `fired`, both under m: a thread
 * that sees the scope expired (tmo_scope_expired reads `fired`) sees the
 * interrupt pending too, so its next interruption point delivers it. */
static void scope_expired(struct tmo_timer *t, void *arg)
{
	struct tmo_scope *s = arg;
	struct ctx *c = s->ctx;
	(void)t;
	pthread_mutex_lock(&c->m);
	atomic_store_explicit(&c->pending, 1, memory_order_release);
	atomic_store_explicit(&s->fired, 1, memory_order_release);
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->m);
}

static __attribute__((noinline)) int scope_frame(struct ctx *c, struct tmo_scope *s)
{
	if (setjmp(s->f.jb) != 0)
		return 1;
	s->value = s->block(s->arg);
	c->top = s->f.prev;
	c->mask = s->f.mask;
	return 0;
}

/* Leave the scope: off the chain, timer cancelled (a running callback waited
 * for), an expiry not yet delivered discarded.  After this no callback can
 * touch *s and the thread sees no interrupt of s. */
static void scope_finish(struct ctx *c, struct tmo_scope *s)
{
	c->scope = s->parent;
	if (s->armed) {
		int r = tmo_cancel(s->engine, &s->timer);
		if (r < 0 || r == TMO_CANCEL_SELF)
			fatal("engine cancel failed on a scope's timer (engine bug)");
		s->armed = 0;
	}
	int fired = atomic_load_explicit(&s->fired, memory_order_acquire);
	if (fired || s->delivered)
		c->stats.expired++;
	if (fired && !s->delivered)
		c->stats.discarded++;
	/* Its callback may have raised the hint after the scope was delivered
	 * by the clock, or before the block returned: s is off the chain now. */
	if (fired)
		recompute_pending(c);
}

int tmo_scope_run(struct tmo *engine, int64_t timeout_ns, enum tmo_scope_mode mode,
                  tmo_block_fn *block, void *arg, intptr_t *value, struct tmo_exc *exc)
{
	if (block == NULL)
		return TMO_ENULLCB;
	if (timeout_ns < 0 || timeout_ns > TMO_TIMEOUT_MAX)
		return TMO_EBADTIMEOUT;
	if (mode != TMO_SCOPE_RAISE && mode != TMO_SCOPE_THROW && mode != TMO_SCOPE_EXCEPTION)
		return TMO_EINVAL;
	if (engine == NULL && timeout_ns > 0)
		return TMO_ENULLENGINE;
	/* On the thread that runs this engine's callbacks one at a time, the
	 * scope's own callback would wait for the block to end. */
	if (timeout_ns > 0 && tmo__thread_engine == engine &&
	    !(tmo_ops(engine)->caps & TMO_CAP_CONCURRENT_CALLBACKS))
		return TMO_EDEADLK;
	struct ctx *c = ctx_get();
	if (c == NULL)
		return TMO_ESYS;

	/* Field by field: a designated initializer would zero the jmp_buf too
	 * (~350 bytes, a measurable share of a scope that does not expire). */
	struct tmo_scope s;
	s.parent = c->scope;
	s.ctx = c;
	s.engine = engine;
	s.id = new_scope_id(c);
	s.deadline = INT64_MAX;
	s.mode = mode;
	s.armed = 0;
	s.delivered = 0;
	s.block = block;
	s.arg = arg;
	s.value = 0;
	atomic_init(&s.fired, 0);
	tmo_timer_init(&s.timer);
	s.f.prev = c->top;
	s.f.mask = c->mask;
	if (timeout_ns > 0) {
		/* Read before the arm: the engine's own deadline is no earlier. */
		s.deadline = tmo_now_ns() + timeout_ns;
		int rc = tmo_arm(engine, &s.timer, timeout_ns, scope_expired, &s);
		if (rc < 0)
			return rc;
		s.armed = 1;
	}
	/* An expiry before the block starts is fine: s is on the chain before
	 * the first interruption point can look for it. */
	c->scope = &s;
	c->top = &s.f;
	c->stats.scopes++;

	int unwound = scope_frame(c, &s);
	scope_finish(c, &s);
	if (!unwound) {
		if (value != NULL)
			*value = s.value;
		return 0;
	}
	struct tmo_exc e = c->exc;
	if (e.scope == s.id) {
		/* Our own interrupt, whatever the mode delivered it as. */
		if (exc != NULL) {
			struct tmo_exc t = {TMO_EXC_TIMEOUT, TMO_ETIMEDOUT, TMO_EXPIRED_MESSAGE, s.id};
			*exc = t;
		}
		return TMO_ETIMEDOUT;
	}
	if (c->top != NULL)
		raise_exc(c, &e); /* an outer scope's interrupt, or the block's error */
	if (exc != NULL)
		*exc = e;
	return TMO_ERAISED;
}

uint64_t tmo_scope_current(void)
{
	return tls.scope != NULL ? tls.scope->id : 0;
}

int tmo_scope_expired(uint64_t id)
{
	for (const struct tmo_scope *s = tls.scope; s != NULL; s = s->parent)
		if (s->id == id)
			return s->delivered || atomic_load_explicit(&s->fired, memory_order_acquire);
	return 0;
}

void tmo_scope_stats(struct tmo_scope_stats *out)
{
	*out = tls.stats;
}

int tmo_interrupt_pending(void)
{
	return atomic_load_explicit(&tls.pending, memory_order_acquire);
}

const char *tmo_scope_strerror(int err) { return tmo_strerror(err); }
const char *tmo_scope_errname(int err) { return tmo_errname(err); }

/* ---- interruption points ----------------------------------------------- */

void tmo_check(void)
{
	struct ctx *c = &tls;
	if (atomic_load_explicit(&c->pending, memory_order_acquire) && c->mask == 0)
		deliver(c);
}

void tmo_mask(void)
{
	tls.mask++;
}

void tmo_unmask(void)
{
	struct ctx *c = &tls;
	if (c->mask <= 0)
		fatal("tmo_unmask without a matching tmo_mask");
	if (--c->mask == 0)
		tmo_check();
}

int tmo_mask_depth(void)
{
	return tls.mask;
}

/* Absolute deadline for a wait's relative timeout; -1 for none. */
static int64_t wait_deadline(int64_t timeout_ns)
{
	return timeout_ns == TMO_WAIT_FOREVER ? -1 : tmo_now_ns() + timeout_ns;
}

static int bad_wait_timeout(int64_t timeout_ns)
{
	return timeout_ns != TMO_WAIT_FOREVER && (timeout_ns < 0 || timeout_ns > TMO_TIMEOUT_MAX);
}

int tmo_sleep(int64_t ns)
{
	if (ns < 0 || ns > TMO_TIMEOUT_MAX)
		return TMO_EBADTIMEOUT;
	tmo_check();
	if (ns == 0)
		return 0;
	struct ctx *c = ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	int64_t deadline = tmo_now_ns() + ns;
	for (;;) {
		park(c, deadline);
		tmo_check();
		if (tmo_now_ns() >= deadline)
			return 0;
	}
}

void tmo_cond_init(struct tmo_cond *cv)
{
	cv->head = cv->tail = NULL;
}

static void waiter_append(struct tmo_cond *cv, struct tmo__waiter *w)
{
	w->next = NULL;
	w->prev = cv->tail;
	if (cv->tail != NULL)
		cv->tail->next = w;
	else
		cv->head = w;
	cv->tail = w;
}

static void waiter_remove(struct tmo_cond *cv, struct tmo__waiter *w)
{
	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		cv->head = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	else
		cv->tail = w->prev;
}

enum { WAIT_INTERRUPTED = 2 };

/* Wait on cv with m held (released while parked, held on return).  Returns
 * TMO_WAIT_OK (signalled: checked first, so a signal is never dropped),
 * WAIT_INTERRUPTED (deliverable interrupt; the caller raises it after
 * putting its own state in order) or TMO_WAIT_TIMEDOUT. */
static int cond_wait_internal(struct ctx *c, struct tmo_cond *cv, pthread_mutex_t *m,
                              int64_t deadline)
{
	struct tmo__waiter w = {.c = c};
	waiter_append(cv, &w);
	for (;;) {
		pthread_mutex_unlock(m);
		int timedout = park(c, deadline);
		pthread_mutex_lock(m);
		if (w.signalled)
			return TMO_WAIT_OK; /* the signaller unlinked w */
		if (deliverable(c)) {
			waiter_remove(cv, &w);
			return WAIT_INTERRUPTED;
		}
		if (timedout || (deadline >= 0 && tmo_now_ns() >= deadline)) {
			waiter_remove(cv, &w);
			return TMO_WAIT_TIMEDOUT;
		}
	}
}

int tmo_cond_wait(struct tmo_cond *cv, pthread_mutex_t *m, int64_t timeout_ns)
{
	if (cv == NULL || m == NULL)
		return TMO_EINVAL;
	if (bad_wait_timeout(timeout_ns))
		return TMO_EBADTIMEOUT;
	struct ctx *c = ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	tmo_check();
	int64_t deadline = wait_deadline(timeout_ns);
	for (;;) {
		int r = cond_wait_internal(c, cv, m, deadline);
		if (r != WAIT_INTERRUPTED)
			return r;
		deliver(c); /* raises with m held, as documented */
		/* Delivery found nothing to raise (a hint raced): wait again. */
	}
}

/* The signaller holds the cond's mutex, so the waiter cannot leave
 * cond_wait_internal (nor its thread exit) while we touch its context. */
int tmo_cond_signal(struct tmo_cond *cv)
{
	struct tmo__waiter *w = cv->head;
	if (w == NULL)
		return 0;
	waiter_remove(cv, w);
	w->signalled = 1;
	ctx_wake(w->c);
	return 1;
}

int tmo_cond_broadcast(struct tmo_cond *cv)
{
	int n = 0;
	while (tmo_cond_signal(cv))
		n++;
	return n;
}

/* ---- the queue ----------------------------------------------------------- */

void tmo_qnode_init(struct tmo_qnode *node)
{
	if (node == NULL)
		return;
	node->next = NULL;
	__atomic_store_n(&node->queue, NULL, __ATOMIC_RELAXED);
}

int tmo_queue_init(struct tmo_queue *q)
{
	if (q == NULL)
		return TMO_EINVAL;
	if (pthread_mutex_init(&q->lock, NULL) != 0)
		return TMO_ESYS;
	tmo_cond_init(&q->nonempty);
	q->head = q->tail = NULL;
	q->len = 0;
	return 0;
}

void tmo_queue_destroy(struct tmo_queue *q)
{
	if (q == NULL)
		return;
	if (q->nonempty.head != NULL)
		fatal("tmo_queue_destroy with a waiter");
	for (struct tmo_qnode *n = q->head, *nx; n != NULL; n = nx) {
		nx = n->next;
		tmo_qnode_init(n); /* the caller's again, pushable */
	}
	q->head = q->tail = NULL;
	q->len = 0;
	pthread_mutex_destroy(&q->lock);
}

int tmo_queue_push(struct tmo_queue *q, struct tmo_qnode *node)
{
	if (q == NULL || node == NULL)
		return TMO_EINVAL;
	/* Claim the node with a CAS: a node's `queue` is cleared under the lock
	 * of the queue it is on, and two pushes of one node onto two queues
	 * hold different locks.  The loser is refused and changes nothing. */
	struct tmo_queue *none = NULL;
	if (!__atomic_compare_exchange_n(&node->queue, &none, q, 0, __ATOMIC_RELAXED,
	                                 __ATOMIC_RELAXED))
		return TMO_EARMED;
	pthread_mutex_lock(&q->lock);
	node->next = NULL;
	if (q->tail != NULL)
		q->tail->next = node;
	else
		q->head = node;
	q->tail = node;
	q->len++;
	tmo_cond_signal(&q->nonempty);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

static struct tmo_qnode *queue_take(struct tmo_queue *q)
{
	struct tmo_qnode *n = q->head;
	q->head = n->next;
	if (q->head == NULL)
		q->tail = NULL;
	q->len--;
	n->next = NULL;
	__atomic_store_n(&n->queue, NULL, __ATOMIC_RELAXED);
	return n;
}

int tmo_queue_pop(struct tmo_queue *q, int64_t timeout_ns, struct tmo_qnode **out)
{
	if (q == NULL || out == NULL)
		return TMO_EINVAL;
	if (bad_wait_timeout(timeout_ns))
		return TMO_EBADTIMEOUT;
	*out = NULL;
	tmo_check();
	struct ctx *c = NULL;
	int64_t deadline = -1;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		if (q->head != NULL) {
			*out = queue_take(q);
			pthread_mutex_unlock(&q->lock);
			return TMO_WAIT_OK;
		}
		if (timeout_ns == 0) {
			pthread_mutex_unlock(&q->lock);
			return TMO_WAIT_TIMEDOUT;
		}
		if (c == NULL) {
			c = ctx_get();
			if (c == NULL) {
				pthread_mutex_unlock(&q->lock);
				return TMO_ESYS;
			}
			deadline = wait_deadline(timeout_ns);
		}
		int r = cond_wait_internal(c, &q->nonempty, &q->lock, deadline);
		if (r == TMO_WAIT_OK)
			continue; /* signalled: take, or wait again if another popper won */
		if (r == TMO_WAIT_TIMEDOUT) {
			if (q->head != NULL)
				continue; /* a node that arrived wins over the timeout */
			pthread_mutex_unlock(&q->lock);
			return TMO_WAIT_TIMEDOUT;
		}
		/* Interrupted.  We were not signalled (that is checked first), so
		 * no signal is consumed: whoever was signalled takes the node. */
		pthread_mutex_unlock(&q->lock);
		deliver(c);
		/* Delivery found nothing to raise (a hint raced): wait again. */
		pthread_mutex_lock(&q->lock);
	}
}

int64_t tmo_queue_len(struct tmo_queue *q)
{
	if (q == NULL)
		return TMO_EINVAL;
	pthread_mutex_lock(&q->lock);
	int64_t n = (int64_t)q->len;
	pthread_mutex_unlock(&q->lock);
	return n;
}

int tmo_queue_remove(struct tmo_queue *q, struct tmo_qnode *node)
{
	if (q == NULL || node == NULL)
		return TMO_EINVAL;
	int found = 0;
	pthread_mutex_lock(&q->lock);
	if (__atomic_load_n(&node->queue, __ATOMIC_RELAXED) != q) {
		pthread_mutex_unlock(&q->lock); /* on no queue, or on another */
		return 0;
	}
	struct tmo_qnode *prev = NULL;
	for (struct tmo_qnode *n = q->head; n != NULL; prev = n, n = n->next) {
		if (n != node)
			continue;
		if (prev != NULL)
			prev->next = n->next;
		else
			q->head = n->next;
		if (q->tail == n)
			q->tail = prev;
		q->len--;
		n->next = NULL;
		__atomic_store_n(&n->queue, NULL, __ATOMIC_RELAXED);
		found = 1;
		break;
	}
	pthread_mutex_unlock(&q->lock);
	return found;
}
