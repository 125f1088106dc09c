/*
 * Timeout scopes (include/tmo/scope.h): tmo_scope_run, the engine callback
 * that marks a scope expired, scope ids and the per-thread stats.  The
 * context, frames and delivery are in frame.c; the rules in runtime.h.
 */
#include <stdatomic.h>

#include "scope/runtime.h"

/* Each thread takes ids ID_BLOCK at a time from one process-wide counter. */
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
			tmo__scope_fatal("engine cancel failed on a scope's timer (engine bug)");
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
		tmo__recompute_pending(c);
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
	struct ctx *c = tmo__ctx_get();
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
	tmo__frame_push(c, &s.f);
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
		tmo__raise_exc(c, &e); /* an outer scope's interrupt, or the block's error */
	if (exc != NULL)
		*exc = e;
	return TMO_ERAISED;
}

uint64_t tmo_scope_current(void)
{
	return tmo__tls.scope != NULL ? tmo__tls.scope->id : 0;
}

int tmo_scope_expired(uint64_t id)
{
	for (const struct tmo_scope *s = tmo__tls.scope; s != NULL; s = s->parent)
		if (s->id == id)
			return s->delivered || atomic_load_explicit(&s->fired, memory_order_acquire);
	return 0;
}

void tmo_scope_stats(struct tmo_scope_stats *out)
{
	*out = tmo__tls.stats;
}
