/*
 * Ruby Timeout's cases as data, for timeout scopes (include/tmo/scope.h):
 * Bug #8730's block and truth table, the edge-of-deadline block, and nested
 * scopes.
 * Header-only; the skip-rescue scenario (scenarios/skip_rescue.c) and the
 * scope tests (tests/engine/scope_delivery.c, scope_nesting.c) both run them,
 * so each is written once.
 *
 * Bug #8730: the block Ruby's test_skip_rescue runs, and what a caller of
 * each timeout-scope mode must see under each inner handler (CONTRACT.md
 * "Timeout scopes").
 *
 * The block, in Ruby:
 *
 *   Timeout.timeout(deadline) do
 *     begin
 *       begin; sleep(long); after_sleep += 1; ensure; ensured += 1; end
 *     rescue FILTER => e       # StandardError, or Exception
 *       saw += 1; raise if reraise
 *       99
 *     end
 *   end
 *
 * Rules: the deadline passes while the block sleeps; the ensure runs exactly
 * once and the code after the sleep never runs, in every mode.
 */
#ifndef SK_RUBY_TIMEOUT_H
#define SK_RUBY_TIMEOUT_H

#include <stdint.h>
#include <string.h>

#include "tmo/scope.h"

/* One run of the block: its handler, and what happened inside. */
struct sk_8730 {
	unsigned filter;            /* the rescue's TMO_RESCUE_* filter */
	int reraise;                /* the rescue re-raises what it caught */
	int64_t sleep_ns;           /* the interrupted sleep (far past the deadline) */
	int saw;                    /* times the rescue ran */
	enum tmo_exc_class saw_cls; /* what it caught */
	int ensured;                /* times the ensure ran */
	int after_sleep;            /* the code after the sleep ran */
};

static inline intptr_t sk_8730_sleep(void *arg)
{
	struct sk_8730 *c = arg;
	tmo_sleep(c->sleep_ns);
	c->after_sleep++;
	return 1;
}

static inline void sk_8730_ensure(void *arg) { ((struct sk_8730 *)arg)->ensured++; }

static inline intptr_t sk_8730_body(void *arg)
{
	intptr_t v = 0;
	tmo_ensure(sk_8730_sleep, arg, sk_8730_ensure, arg, &v);
	return v;
}

static inline intptr_t sk_8730_handler(const struct tmo_exc *e, void *arg)
{
	struct sk_8730 *c = arg;
	c->saw++;
	c->saw_cls = e->cls;
	if (c->reraise)
		tmo_reraise(e);
	return 99;
}

/* The block itself: tmo_block_fn for tmo_scope_run, arg a struct sk_8730. */
static inline intptr_t sk_8730_block(void *arg)
{
	struct sk_8730 *c = arg;
	intptr_t v = 0;
	tmo_rescue(c->filter, sk_8730_body, c, sk_8730_handler, c, &v);
	return v;
}

/* The inner handlers, in Ruby. */
struct sk_8730_handler {
	const char *ruby;
	unsigned filter;
	int reraise;
};
static const struct sk_8730_handler sk_8730_handlers[3] = {
	{"rescue => e", TMO_RESCUE_STANDARD, 0},
	{"rescue Exception => e", TMO_RESCUE_ALL, 0},
	{"rescue Exception; raise", TMO_RESCUE_ALL, 1},
};

/* What the caller gets, in words: the rescue's 99 ("block's result"), the
 * timeout error, or (never expected) the block running on. */
static inline const char *sk_8730_outcome(int rc, intptr_t v)
{
	if (rc == TMO_ETIMEDOUT)
		return "timeout error";
	if (rc == 0 && v == 99)
		return "block's result";
	if (rc == 0)
		return "block ran on";
	return "other error";
}

/* The truth table, [mode - TMO_SCOPE_RAISE][handler]: whether the rescue
 * sees the timeout, and what the caller gets. */
struct sk_8730_expect {
	int saw;
	const char *caller;
};
static const struct sk_8730_expect sk_8730_expected[3][3] = {
	/* raise: Bug #8730 — any rescue swallows it */
	{{1, "block's result"}, {1, "block's result"}, {1, "timeout error"}},
	/* throw: no rescue sees it */
	{{0, "timeout error"}, {0, "timeout error"}, {0, "timeout error"}},
	/* exception: only rescue Exception sees it */
	{{0, "timeout error"}, {1, "block's result"}, {1, "timeout error"}},
};

/* The class a rescue sees in MODE. */
static inline enum tmo_exc_class sk_8730_class(int mode)
{
	return mode == TMO_SCOPE_RAISE ? TMO_EXC_TIMEOUT : TMO_EXC_INTERRUPT;
}

/* One run came out as the table says for (mode, handler h): the rescue saw
 * what it should (of the mode's class), the ensure ran once, the code after
 * the sleep never, the caller got the expected outcome, a timeout carries
 * TMO_EXPIRED_MESSAGE, and no interrupt is left pending. */
static inline int sk_8730_as_expected(int mode, int h, const struct sk_8730 *c, int rc,
                                      intptr_t value, const struct tmo_exc *e)
{
	const struct sk_8730_expect *x = &sk_8730_expected[mode - TMO_SCOPE_RAISE][h];
	return c->saw == x->saw && c->ensured == 1 && c->after_sleep == 0 &&
	       strcmp(sk_8730_outcome(rc, value), x->caller) == 0 &&
	       (!c->saw || c->saw_cls == sk_8730_class(mode)) &&
	       (rc != TMO_ETIMEDOUT ||
	        (e->message != NULL && strcmp(e->message, TMO_EXPIRED_MESSAGE) == 0)) &&
	       tmo_interrupt_pending() == 0;
}

/* The edge of the deadline: a block that spins until just about the
 * deadline (checking for the interrupt with tmo_check() when `checks`), then
 * finishes.  Rule: once it finished, no interrupt may reach it (a late
 * interrupt is a scope that expired after its block returned). */
struct sk_edge {
	int64_t until; /* CLOCK_MONOTONIC ns the spin ends */
	int checks;    /* call tmo_check() while spinning */
	int finished;  /* the block ran to its end */
};

static inline intptr_t sk_edge_block(void *arg)
{
	struct sk_edge *e = arg;
	while (tmo_now_ns() < e->until)
		if (e->checks)
			tmo_check();
	e->finished = 1;
	return 3;
}

/* Nested scopes.  The outer block, with an ensure (ensure_outer), runs an
 * inner scope (through `run_inner`, the caller's way to enter one) around
 *
 *   begin; begin; sleep(long); ensure; ensure_inner += 1; end
 *   rescue => e; rescued += 1; end          # a standard rescue
 *
 * then sleeps after_sleep_ns (an interruption point: a late interrupt of
 * the inner scope would land there), sets after_ok and returns 5.  Each
 * block records its scope's id. */
struct sk_nest {
	int (*run_inner)(struct sk_nest *n, tmo_block_fn *block); /* with inner_timeout, inner_mode */
	void *ctx;                                               /* the caller's, for run_inner */
	enum tmo_scope_mode inner_mode;
	int64_t inner_timeout, sleep_ns, after_sleep_ns;
	uint64_t outer, inner; /* scope ids */
	int inner_rc;          /* what the inner scope returned */
	int inner_returned;    /* the outer block ran on after the inner scope */
	int after_ok;          /* ... and past its sleep */
	int rescued, ensure_inner, ensure_outer;
};

static inline void sk_nest_ensure_inner(void *arg) { ((struct sk_nest *)arg)->ensure_inner++; }
static inline void sk_nest_ensure_outer(void *arg) { ((struct sk_nest *)arg)->ensure_outer++; }

static inline intptr_t sk_nest_rescued(const struct tmo_exc *e, void *arg)
{
	(void)e;
	((struct sk_nest *)arg)->rescued++;
	return 0;
}

static inline intptr_t sk_nest_sleep(void *arg)
{
	struct sk_nest *n = arg;
	n->inner = tmo_scope_current();
	tmo_sleep(n->sleep_ns);
	return 0;
}

static inline intptr_t sk_nest_inner_body(void *arg)
{
	intptr_t v = 0;
	tmo_ensure(sk_nest_sleep, arg, sk_nest_ensure_inner, arg, &v);
	return v;
}

static inline intptr_t sk_nest_inner_block(void *arg)
{
	intptr_t v = 0;
	tmo_rescue(TMO_RESCUE_STANDARD, sk_nest_inner_body, arg, sk_nest_rescued, arg, &v);
	return v;
}

static inline intptr_t sk_nest_outer_body(void *arg)
{
	struct sk_nest *n = arg;
	n->outer = tmo_scope_current();
	n->inner_rc = n->run_inner(n, sk_nest_inner_block);
	n->inner_returned = 1;
	tmo_sleep(n->after_sleep_ns);
	n->after_ok = 1;
	return 5;
}

/* The outer scope's block. */
static inline intptr_t sk_nest_outer_block(void *arg)
{
	intptr_t v = 0;
	tmo_ensure(sk_nest_outer_body, arg, sk_nest_ensure_outer, arg, &v);
	return v;
}

#endif
