/*
 * Timeout scopes (include/tmo/scope.h), how the interrupt travels through the
 * block's own handlers, on one engine: `test_engine_scope_delivery ENGINE
 * [CASE]`.  Each mode (raise, throw, exception) under each handler of Bug
 * #8730's table (scenarios/kit/ruby_timeout.h); the block's own errors pass
 * the boundary unchanged; a masked block gets the interrupt when it unmasks
 * to depth 0; every ensure runs exactly once; and a scope that returns at the
 * edge of its deadline leaves no interrupt behind.  The deadlines:
 * tests/kit/scope_test.h.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"
#include "kit/ruby_timeout.h"
#include "scope_test.h"
#include "tmo/scope.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

static struct tmo *eng; /* the engine of every case (sc_begin creates it) */

/* ---- the three modes: Ruby's test_skip_rescue and its siblings ------------ */

/* One run of the Bug #8730 block (scenarios/kit/ruby_timeout.h, which the
 * skip-rescue scenario runs too) in MODE under handler h of its table; the
 * table says what the rescue and the caller must see. */
static void skip_case(enum tmo_scope_mode mode, int h)
{
	const struct sk_8730_handler *hd = &sk_8730_handlers[h];
	struct sk_8730 s = {.filter = hd->filter, .reraise = hd->reraise, .sleep_ns = LONG_WAIT};
	intptr_t v = -1;
	struct tmo_exc e = {0};
	int64_t t0 = tmo_now_ns();
	int rc = tmo_scope_run(eng, DEADLINE, mode, sk_8730_block, &s, &v, &e);
	int before = tmo_test_failures;
	CHECK(sc_since(t0) < LONG_WAIT / 2);
	CHECK(sk_8730_as_expected(mode, h, &s, rc, v, &e));
	if (tmo_test_failures != before)
		fprintf(stderr, "  in mode %d, %s: rescue saw %d, ensure ran %d, after sleep %d, "
		                "caller got %s\n",
		        mode, hd->ruby, s.saw, s.ensured, s.after_sleep, sk_8730_outcome(rc, v));
}

static void test_modes(void)
{
	/* raise: Bug #8730 reproduced — every rescue swallows the timeout;
	 * throw: test_skip_rescue — no rescue sees it, ensure once, timeout out;
	 * exception: standard rescue skips it; rescue-all sees it. */
	for (int mode = TMO_SCOPE_RAISE; mode <= TMO_SCOPE_EXCEPTION; mode++)
		for (int h = 0; h < 3; h++)
			skip_case(mode, h);
	/* exception, rescuing the timeout class only: not the interrupt. */
	struct sk_8730 s = {.filter = TMO_RESCUE_TIMEOUT, .sleep_ns = LONG_WAIT};
	struct tmo_exc e = {0};
	intptr_t v = -1;
	CHECK_EQ(tmo_scope_run(eng, DEADLINE, TMO_SCOPE_EXCEPTION, sk_8730_block, &s, &v, &e),
	         TMO_ETIMEDOUT);
	CHECK_EQ(s.saw, 0);
	CHECK_EQ(s.ensured, 1);
	CHECK_EQ(s.after_sleep, 0);
	CHECK_EQ(tmo_interrupt_pending(), 0);
}

/* The block's own errors pass through the boundary unchanged. */
static intptr_t raise_own_timeout(void *arg)
{
	tmo_raise(TMO_EXC_TIMEOUT, 123, "mine");
}

static intptr_t raise_standard(void *arg)
{
	tmo_raise(TMO_EXC_STANDARD, 5, "boom");
}

static intptr_t count_handler(const struct tmo_exc *e, void *arg)
{
	(*(int *)arg)++;
	return e->code;
}

static intptr_t nested_own_timeout(void *arg)
{
	intptr_t v = 0;
	/* Inner scope passes the block's own timeout error to the outer one. */
	int rc = tmo_scope_run(eng, FAR, TMO_SCOPE_THROW, raise_own_timeout, NULL, &v, NULL);
	*(int *)arg = rc; /* not reached */
	return 0;
}

static void test_own_errors_pass(void)
{
	struct tmo_exc e = {0};
	CHECK_EQ(tmo_scope_run(eng, FAR, TMO_SCOPE_THROW, raise_own_timeout, NULL, NULL, &e),
	         TMO_ERAISED);
	CHECK_EQ(e.cls, TMO_EXC_TIMEOUT);
	CHECK_EQ(e.code, 123);
	CHECK(e.scope == 0);
	CHECK(strcmp(e.message, "mine") == 0);
	CHECK_EQ(tmo_scope_run(eng, FAR, TMO_SCOPE_EXCEPTION, raise_standard, NULL, NULL, &e),
	         TMO_ERAISED);
	CHECK_EQ(e.cls, TMO_EXC_STANDARD);
	CHECK_EQ(e.code, 5);
	int marker = 0;
	CHECK_EQ(tmo_scope_run(eng, FAR, TMO_SCOPE_RAISE, nested_own_timeout, &marker, NULL,
	                       &e),
	         TMO_ERAISED);
	CHECK_EQ(marker, 0);
	CHECK_EQ(e.code, 123);
	/* A rescue outside the scope catches what the scope passed on. */
	int seen = 0;
	intptr_t v = 0;
	CHECK_EQ(tmo_rescue(TMO_RESCUE_TIMEOUT, nested_own_timeout, &marker, count_handler, &seen,
	                    &v),
	         1);
	CHECK_EQ(seen, 1);
	CHECK_EQ(v, 123);
}

/* ---- masking -------------------------------------------------------------- */

struct masked {
	int before_unmask, after_unmask, inner_unmask_passed;
	int64_t slept;
	int pending_seen;
};

static intptr_t masked_block(void *arg)
{
	struct masked *m = arg;
	tmo_mask();
	tmo_mask();
	int64_t t0 = tmo_now_ns();
	tmo_sleep(3 * DEADLINE); /* not cut short: masked */
	m->slept = sc_since(t0);
	/* The callback normally ran long ago; wait for it (bounded) rather
	 * than assume it on a loaded machine. */
	int64_t end = tmo_now_ns() + LONG_WAIT;
	while (!tmo_scope_expired(tmo_scope_current()) && tmo_now_ns() < end)
		tmo_sleep(MS);   /* masked: an interruption point that delivers nothing */
	tmo_check();             /* masked: delivers nothing */
	m->pending_seen = tmo_interrupt_pending();
	tmo_unmask();            /* depth 1: still masked */
	m->inner_unmask_passed = 1;
	m->before_unmask = 1;
	tmo_unmask();            /* depth 0: delivered here */
	m->after_unmask = 1;
	return 0;
}

static void test_masking(void)
{
	struct masked m = {0};
	CHECK_EQ(tmo_mask_depth(), 0);
	CHECK_EQ(tmo_scope_run(eng, DEADLINE, TMO_SCOPE_THROW, masked_block, &m, NULL, NULL),
	         TMO_ETIMEDOUT);
	CHECK(m.slept >= 3 * DEADLINE);
	CHECK_EQ(m.pending_seen, 1);
	CHECK_EQ(m.inner_unmask_passed, 1);
	CHECK_EQ(m.before_unmask, 1);
	CHECK_EQ(m.after_unmask, 0);
	CHECK_EQ(tmo_mask_depth(), 0); /* unwinding restored the depth */
	CHECK_EQ(tmo_interrupt_pending(), 0);
}

/* ---- ensure exactly once ---------------------------------------------------- */

struct ens {
	int count[4];
	int depth;
};

static void ens_fn(void *arg);
static intptr_t ens_body(void *arg);

struct ens_level {
	struct ens *e;
	int level;
};

static void ens_fn(void *arg)
{
	struct ens_level *l = arg;
	l->e->count[l->level]++;
}

static intptr_t ens_body(void *arg)
{
	struct ens_level *l = arg;
	if (l->level == 3) {
		tmo_sleep(l->e->depth ? LONG_WAIT : 0);
		return 11;
	}
	struct ens_level next = {l->e, l->level + 1};
	intptr_t v = 0;
	tmo_ensure(ens_body, &next, ens_fn, &next, &v);
	return v;
}

static void test_ensure_once(void)
{
	for (int mode = TMO_SCOPE_RAISE; mode <= TMO_SCOPE_EXCEPTION; mode++) {
		for (int interrupt = 0; interrupt <= 1; interrupt++) {
			struct ens e = {.depth = interrupt};
			struct ens_level top = {&e, 0};
			intptr_t v = 0;
			int rc = tmo_scope_run(eng, interrupt ? DEADLINE : FAR, mode, ens_body,
			                       &top, &v, NULL);
			CHECK_EQ(rc, interrupt ? TMO_ETIMEDOUT : 0);
			if (!interrupt)
				CHECK_EQ(v, 11);
			for (int i = 1; i <= 3; i++)
				CHECK_EQ(e.count[i], 1);
		}
	}
}

/* ---- no late interrupt ------------------------------------------------------ */

struct edge_run {
	int iterations;
	int returned, expired, late, inconsistent;
};

static intptr_t edge_outer(void *arg)
{
	struct edge_run *r = arg;
	uint64_t x = 88172645463325252ull;
	for (int i = 0; i < r->iterations; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t timeout = 200 * TMO_NSEC_PER_USEC + (int64_t)(x % (800 * TMO_NSEC_PER_USEC));
		/* Return within +-100 us of the deadline. */
		struct sk_edge e = {.checks = (int)(x >> 40) & 1};
		e.until = tmo_now_ns() + timeout - 100 * TMO_NSEC_PER_USEC +
		               (int64_t)((x >> 20) % (200 * TMO_NSEC_PER_USEC));
		intptr_t v = 0;
		int rc = tmo_scope_run(eng, timeout, TMO_SCOPE_THROW, sk_edge_block, &e, &v, NULL);
		if (rc == 0) {
			r->returned++;
			if (!e.finished || v != 3)
				r->inconsistent++;
		} else if (rc == TMO_ETIMEDOUT) {
			r->expired++;
			if (e.finished)
				r->inconsistent++; /* it finished, yet the caller saw a timeout */
		} else {
			r->inconsistent++;
		}
		/* Any interrupt from here on is late: the outer scope has no
		 * deadline, so it would be the inner one's. */
		if (tmo_interrupt_pending())
			r->late++;
		tmo_check();
		tmo_sleep(0);
	}
	return 0;
}

static void test_no_late_interrupt(void)
{
	struct edge_run r = {.iterations = 300};
	struct tmo_exc e;
	struct tmo_scope_stats s0, s1;
	tmo_scope_stats(&s0);
	/* The outer scope (no deadline) is a frame that would catch a late
	 * interrupt: then its tmo_scope_run returns instead of completing. */
	int rc = tmo_scope_run(eng, 0, TMO_SCOPE_THROW, edge_outer, &r, NULL, &e);
	CHECK_EQ(rc, 0);
	CHECK_EQ(r.late, 0);
	CHECK_EQ(r.inconsistent, 0);
	CHECK_EQ(r.returned + r.expired, r.iterations);
	/* Every expiry was either delivered (the caller saw the timeout) or
	 * discarded (the block had returned first): none left over. */
	tmo_scope_stats(&s1);
	CHECK_EQ(s1.scopes - s0.scopes, r.iterations + 1);
	CHECK_EQ(s1.delivered - s0.delivered, r.expired);
	CHECK_EQ(s1.expired - s0.expired, (s1.delivered - s0.delivered) + (s1.discarded - s0.discarded));
	printf("  edge: %d returned (%llu of them after their timer fired: discarded), %d expired, "
	       "0 late of %d\n",
	       r.returned, (unsigned long long)(s1.discarded - s0.discarded), r.expired, r.iterations);
}

int main(int argc, char **argv)
{
	sc_begin(argc, argv, "engine_scope_delivery", &eng);
	RUN(test_modes);
	RUN(test_own_errors_pass);
	RUN(test_masking);
	RUN(test_ensure_once);
	RUN(test_no_late_interrupt);
	return sc_end(&eng);
}
