/*
 * The per-thread context, frames and exceptions (include/tmo/scope.h): raise
 * and re-raise, rescue and ensure, masking, and the delivery of an expired
 * scope's interrupt.  The rules they share are in runtime.h.
 */
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "scope/runtime.h"

__attribute__((visibility("hidden"))) _Thread_local struct ctx tmo__tls;

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

struct ctx *tmo__ctx_setup(void)
{
	struct ctx *c = &tmo__tls;
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

_Noreturn void tmo__scope_fatal(const char *what)
{
	fprintf(stderr, "tmo scope: %s\n", what);
	fflush(stderr);
	abort();
}

/* `pending` := some scope on the chain expired and was not delivered.  Under
 * m, which a callback holds while it stores `pending` and then `fired`: a
 * scope read here as not fired has its `pending = 1` still to come, so the
 * value stored here never hides an expiry. */
void tmo__recompute_pending(struct ctx *c)
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

_Noreturn void tmo__raise_exc(struct ctx *c, const struct tmo_exc *exc)
{
	c->exc = *exc;
	struct frame *f = c->top;
	if (f == NULL) {
		fprintf(stderr, "tmo scope: uncaught exception (class %d, code %d): %s\n",
		        (int)exc->cls, exc->code, exc->message ? exc->message : "");
		tmo__scope_fatal("raise with no frame on this thread");
	}
	c->top = f->prev;
	c->mask = f->mask;
	longjmp(f->jb, 1);
}

/* Deliver the outermost expired scope's interrupt (see scope.h: it subsumes
 * the inner ones).  Expired: marked by its callback, or past its deadline
 * (see runtime.h). */
void tmo__deliver(struct ctx *c)
{
	struct tmo_scope *victim = NULL;
	int64_t now = tmo_now_ns();
	for (struct tmo_scope *s = c->scope; s != NULL; s = s->parent)
		if (!s->delivered &&
		    (atomic_load_explicit(&s->fired, memory_order_acquire) || s->deadline <= now))
			victim = s;
	if (victim == NULL) {
		tmo__recompute_pending(c);
		return;
	}
	victim->delivered = 1;
	c->stats.delivered++;
	tmo__recompute_pending(c);
	struct tmo_exc e = {TMO_EXC_TIMEOUT, TMO_ETIMEDOUT, TMO_EXPIRED_MESSAGE, victim->id};
	if (victim->mode == TMO_SCOPE_THROW)
		e.cls = TMO_EXC_THROW;
	else if (victim->mode == TMO_SCOPE_EXCEPTION)
		e.cls = TMO_EXC_INTERRUPT;
	tmo__raise_exc(c, &e);
}
void tmo_raise(enum tmo_exc_class cls, int code, const char *message)
{
	if (cls != TMO_EXC_STANDARD && cls != TMO_EXC_TIMEOUT && cls != TMO_EXC_INTERRUPT)
		tmo__scope_fatal("tmo_raise: class must be STANDARD, TIMEOUT or INTERRUPT");
	struct tmo_exc e = {cls, code, message, 0};
	tmo__raise_exc(&tmo__tls, &e);
}

void tmo_reraise(const struct tmo_exc *exc)
{
	if (exc == NULL)
		tmo__scope_fatal("tmo_reraise: NULL exception");
	tmo__raise_exc(&tmo__tls, exc);
}

/* ---- rescue and ensure ----------------------------------------------------- */

/* What rescue and ensure share: their frame, the block, and what it left. */
struct block_rec {
	struct frame f;
	tmo_block_fn *body;
	void *arg;
	intptr_t value;
	struct tmo_exc exc;
};

/* Run the block, called right after setjmp returned 0 in the frame's own
 * function: on return the frame is popped. */
static void block_run(struct ctx *c, struct block_rec *b)
{
	b->value = b->body(b->arg);
	c->top = b->f.prev;
}

struct rescue_rec {
	struct block_rec b;
	unsigned filter;
	tmo_handler_fn *handler;
	void *harg;
};

/* Returns 0 when body returned, 1 when the handler ran. */
static __attribute__((noinline)) int rescue_frame(struct ctx *c, struct rescue_rec *r)
{
	if (setjmp(r->b.f.jb) == 0) {
		block_run(c, &r->b);
		return 0;
	}
	/* Unwound to here; the raiser popped the frame. */
	if (!(r->filter & TMO_RESCUE_CLASS(c->exc.cls)))
		tmo__raise_exc(c, &c->exc);
	r->b.exc = c->exc;
	r->b.value = r->handler(&r->b.exc, r->harg);
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
	struct ctx *c = tmo__ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	struct rescue_rec r = {.b = {.body = body, .arg = arg}, .filter = filter,
	                       .handler = handler, .harg = harg};
	tmo__frame_push(c, &r.b.f);
	int rc = rescue_frame(c, &r);
	if (value != NULL)
		*value = r.b.value;
	return rc;
}

struct ensure_rec {
	struct block_rec b;
	tmo_ensure_fn *ensure;
	void *earg;
};

static __attribute__((noinline)) void ensure_frame(struct ctx *c, struct ensure_rec *r)
{
	if (setjmp(r->b.f.jb) == 0) {
		block_run(c, &r->b);
		c->mask = r->b.f.mask;
		r->ensure(r->earg);
		return;
	}
	/* Keep the exception: the ensure may raise and rescue internally. */
	r->b.exc = c->exc;
	r->ensure(r->earg);
	tmo__raise_exc(c, &r->b.exc);
}

int tmo_ensure(tmo_block_fn *body, void *arg, tmo_ensure_fn *ensure, void *earg,
               intptr_t *value)
{
	if (body == NULL || ensure == NULL)
		return TMO_ENULLCB;
	struct ctx *c = tmo__ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	struct ensure_rec r = {.b = {.body = body, .arg = arg}, .ensure = ensure, .earg = earg};
	tmo__frame_push(c, &r.b.f);
	ensure_frame(c, &r);
	if (value != NULL)
		*value = r.b.value;
	return 0;
}

/* ---- masking and the explicit check ------------------------------------ */

void tmo_check(void)
{
	struct ctx *c = &tmo__tls;
	if (atomic_load_explicit(&c->pending, memory_order_acquire) && c->mask == 0)
		tmo__deliver(c);
}

void tmo_mask(void)
{
	tmo__tls.mask++;
}

void tmo_unmask(void)
{
	struct ctx *c = &tmo__tls;
	if (c->mask <= 0)
		tmo__scope_fatal("tmo_unmask without a matching tmo_mask");
	if (--c->mask == 0)
		tmo_check();
}

int tmo_mask_depth(void)
{
	return tmo__tls.mask;
}

int tmo_interrupt_pending(void)
{
	return atomic_load_explicit(&tmo__tls.pending, memory_order_acquire);
}
