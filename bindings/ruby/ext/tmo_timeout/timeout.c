/*
 * Timeout on tmo's engines: ruby/timeout's public surface, with arm and
 * cancel in C.
 *
 *   Timeout.timeout(sec, klass = nil, message = nil) { |sec| ... }
 *   Timeout::Error < RuntimeError, Timeout::ExitException < Exception,
 *   Timeout::VERSION, and the private instance method #timeout for
 *   `include Timeout`.  Nothing else is public on Timeout (Tmo, beside it,
 *   names the engines and counts what the handoff did, for tests).
 *
 * A call arms a timer on the process's engine (watcher.c), runs the block
 * in the caller's thread and fiber, and cancels the timer in an ensure.  The
 * timer's callback hands the expiry to the watcher thread (handoff.h), which
 * raises in the caller: a Timeout::ExitException (klass nil) that only a
 * `rescue Exception` sees and that becomes Timeout::Error "execution
 * expired" at this call's boundary (Bug #8730), or klass's exception, which
 * passes on unchanged.  An ExitException that is not this call's own (an
 * outer call's, or one the block raised) passes on unchanged too.
 *
 * Inside a non-blocking fiber whose Fiber scheduler has timeout_after, the
 * scheduler times the block instead, as in ruby/timeout.
 *
 * No interrupt after the block returned: cancel's result says whether the
 * callback ran.  If it did, the caller withdraws the handoff (a CAS the
 * watcher's commit also races for); if the watcher committed first, its
 * interrupt is pending (or about to be) on this thread, and the caller takes
 * it back before the call returns (consume), whatever the thread's
 * Thread.handle_interrupt masks are.
 */
#include <math.h>
#include <ruby.h>
#include <ruby/fiber/scheduler.h>
#include <stdlib.h>
#include <string.h>

#include "handoff.h"
#include "watcher.h"

static VALUE eError, eExit, default_message;
static ID id_zero_p, id_gt, id_handle_interrupt, id_immediate, id_timeout_after;
/* TMO_RUBY_PLANT=late: a planted defect for the tests (the caller never
 * withdraws a fired handoff), which the deadline race must catch. */
static int plant_late;
/* TMO_RUBY_REFUSE=N (a test hook, not a defect): every N-th arm's first
 * try is answered TMO_EAGAIN before the engine sees it, as a lock-free
 * engine answers while its timer thread is starved (the nodes it must
 * give back wait for it: src/lf/pool.c); 0, unset, never. */
static unsigned long refuse_every, refuse_count;

/* ---- sec ----------------------------------------------------------------------- */

NORETURN(static void negative(void));
static void negative(void)
{
	rb_raise(rb_eArgError, "Timeout sec must be a non-negative number");
}

static int64_t float_ns(double d)
{
	if (d == 0)
		return 0;
	if (isnan(d)) /* ruby/timeout's NaN deadline is never reached */
		return TMO_TIMEOUT_MAX;
	if (d < 0)
		negative();
	if (d >= (double)TMO_TIMEOUT_MAX / 1e9)
		return TMO_TIMEOUT_MAX;
	int64_t ns = (int64_t)(d * 1e9);
	return ns > 0 ? ns : 1;
}

/* 0: no timeout (nil or zero).  As ruby/timeout: `sec.zero?` is asked of
 * anything but Integer and Float; a negative sec is an ArgumentError; what
 * is not Numeric cannot be a time interval (TypeError, as sleep says). */
static int64_t timeout_ns(VALUE sec)
{
	if (NIL_P(sec))
		return 0;
	if (FIXNUM_P(sec)) {
		long v = FIX2LONG(sec);
		if (v < 0)
			negative();
		return v >= TMO_TIMEOUT_MAX / TMO_NSEC_PER_SEC ? TMO_TIMEOUT_MAX
		                                               : (int64_t)v * TMO_NSEC_PER_SEC;
	}
	if (RB_FLOAT_TYPE_P(sec))
		return float_ns(RFLOAT_VALUE(sec));
	if (RTEST(rb_funcall(sec, id_zero_p, 0)))
		return 0;
	if (!rb_obj_is_kind_of(sec, rb_cNumeric))
		rb_raise(rb_eTypeError, "can't convert %" PRIsVALUE " into time interval",
		         rb_obj_class(sec));
	if (RTEST(rb_funcall(INT2FIX(0), id_gt, 1, sec)))
		negative();
	return float_ns(NUM2DBL(sec));
}

/* ---- arm, run, cancel ------------------------------------------------------------- */

/* An arm refused for now (TMO_EAGAIN: a lock-free engine whose timer thread
 * has not yet given back what it must, or a kernel limit another process
 * holds a moment) is asked again, as ruby/timeout's own never fails for
 * want of a thread: the caller's thread sleeps without the GVL (others run,
 * and give back what they hold), from 50 us doubling to 10 ms, up to
 * REFUSED_MAX_NS of asking; then the refusal is raised (Tmo::Error).  An
 * interrupt during a sleep passes on: nothing is armed then.  Before this,
 * a deadline race on the wheel in CI (32 threads, the timer thread starved
 * by a loaded VM) raised TMO_EAGAIN out of Timeout.timeout. */
#define REFUSED_MAX_NS (5 * TMO_NSEC_PER_SEC)

static int refused_wait(int64_t *waited_ns, long *sleep_us)
{
	if (*waited_ns >= REFUSED_MAX_NS)
		return 0;
	handoff_stats.arm_retries++;
	struct timeval tv = {0, *sleep_us};
	rb_thread_wait_for(tv);
	*waited_ns += (int64_t)*sleep_us * TMO_NSEC_PER_USEC;
	if (*sleep_us < 10000)
		*sleep_us *= 2;
	return 1;
}

static int arm_once(struct tmo *e, struct req *r, int64_t ns, int first)
{
	if (RB_UNLIKELY(refuse_every != 0) && first && ++refuse_count % refuse_every == 0)
		return TMO_EAGAIN;
	return tmo_arm(e, &r->timer, ns, handoff_expired, r);
}

struct call {
	struct req *r;
	VALUE sec;
	int returned; /* the block returned (not raise, throw, break, kill) */
};

static struct req *arm(int64_t ns, VALUE klass, VALUE message, int retry)
{
	int64_t waited = 0;
	long sleep_us = 50;
	for (int first = 1;; first = 0) {
		struct tmo *e = watcher_engine();
		struct req *r = req_get();
		r->refs = 2;
		r->thread = rb_thread_current();
		r->klass = klass;
		r->message = message;
		if (r->engine != e) { /* a timer belongs to the engine of its first arm */
			tmo_timer_init(&r->timer);
			r->engine = e;
		}
		__atomic_store_n(&r->state, REQ_ARMED, __ATOMIC_RELAXED);
		int rc = arm_once(e, r, ns, first);
		if (RB_LIKELY(rc == 0)) {
			handoff_stats.armed++;
			return r;
		}
		req_put(r, 2);
		if (rc == TMO_EFORKED && retry) { /* an engine from before fork() */
			watcher_forked();
			retry = 0;
			continue;
		}
		if (rc != TMO_EAGAIN || !refused_wait(&waited, &sleep_us))
			watcher_raise("arm", rc);
	}
}

static VALUE yield_sec(VALUE arg)
{
	struct call *c = (struct call *)arg;
	VALUE v = rb_yield(c->sec);
	c->returned = 1;
	return v;
}

/* This call's own interrupt ended the block. */
static VALUE expired(struct req *r)
{
	VALUE klass = r->klass, message = r->message;
	handoff_stats.timed_out++;
	req_put(r, 1);
	if (NIL_P(klass)) /* its cause is the ExitException ($! here) */
		rb_exc_raise(rb_class_new_instance(1, &message, eError));
	return Qnil; /* klass's exception passes on */
}

static VALUE pass_i(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, data))
{
	rb_thread_schedule(); /* lets the watcher run; checks interrupts */
	return Qnil;
}

static VALUE unmask_and_pass(VALUE cls)
{
	VALUE mask = rb_hash_new();
	rb_hash_aset(mask, cls, ID2SYM(id_immediate));
	return rb_block_call(rb_cThread, id_handle_interrupt, 1, &mask, pass_i, Qnil);
}

/* The watcher committed to raise r's exception in this thread, and the block
 * is over.  Take that interrupt back: wait for Thread#raise to be done, then
 * let interrupts of its class in (whatever the caller's masks) and drop it.
 * Once Thread#raise is done, one pass that brings nothing means it is not
 * pending any more (the block rescued it).  (Thread.pending_interrupt?(cls)
 * would say so directly, but Ruby 3.1 crashes in it whenever the queue holds
 * an exception object.)  Another interrupt that comes first is kept and
 * raised afterwards: it would have come anyway (a third at the same instant
 * is lost); a kill passes on at once. */
static VALUE consume(struct req *r)
{
	VALUE mine = r->exc, cls = rb_obj_class(mine), other = Qnil;
	for (;;) {
		int raised = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == REQ_RAISED;
		if (!raised && !watcher_running())
			break;
		int tag = 0;
		rb_protect(unmask_and_pass, cls, &tag);
		if (!tag) {
			if (raised)
				break;
			continue;
		}
		VALUE e = rb_errinfo();
		if (e == mine) {
			rb_set_errinfo(Qnil);
			handoff_stats.consumed++;
			break;
		}
		if (!is_exception(e)) {
			req_put(r, 1);
			rb_jump_tag(tag);
		}
		rb_set_errinfo(Qnil);
		if (NIL_P(other))
			other = e;
	}
	req_put(r, 1);
	if (!NIL_P(other))
		rb_exc_raise(other);
	return Qnil;
}

/* The ensure of every armed call: rb_ensure restores $! and passes on what
 * unwound the block after this returns; what this raises replaces it. */
static VALUE finish(VALUE arg)
{
	struct call *c = (struct call *)arg;
	struct req *r = c->r;
	int rc = tmo_cancel(r->engine, &r->timer);
	if (RB_LIKELY(rc == TMO_CANCEL_PREVENTED) || rc == TMO_EFORKED) {
		req_put(r, 2); /* the callback never runs (in this process) */
		return Qnil;
	}
	if (rc != TMO_CANCEL_FIRED && rc != TMO_CANCEL_WAITED)
		watcher_raise("cancel", rc); /* r leaks: its state is unknown */
	int st = REQ_FIRED;
	if (!plant_late && __atomic_compare_exchange_n(&r->state, &st, REQ_WITHDRAWN, 0,
	                                               __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		handoff_stats.withdrawn++;
		req_put(r, 1);
		return Qnil;
	}
	/* The watcher committed (st), unless the defect is planted. */
	int committed = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) >= REQ_COMMITTED;
	if (committed && !c->returned && rb_errinfo() == r->exc)
		return expired(r);
	if (plant_late) {
		req_put(r, 1);
		return Qnil;
	}
	return consume(r);
}

/* ---- a Fiber scheduler's timeout_after ---------------------------------------------- */

struct scheduled {
	VALUE scheduler, args[3], block;
};

static VALUE scheduled_call(VALUE arg)
{
	struct scheduled *s = (struct scheduled *)arg;
	return rb_funcall_with_block(s->scheduler, id_timeout_after, 3, s->args, s->block);
}

static VALUE scheduled_rescue(VALUE arg, VALUE e)
{
	struct scheduled *s = (struct scheduled *)arg;
	if (e == s->args[1]) /* this call's own ExitException */
		rb_exc_raise(rb_class_new_instance(1, &s->args[2], eError));
	rb_exc_raise(e);
	return Qnil;
}

/* As ruby/timeout: inside a non-blocking fiber whose scheduler has
 * timeout_after, the scheduler times the block: with klass, or with an
 * ExitException of this call's, turned into Timeout::Error here. */
static VALUE scheduled(VALUE scheduler, VALUE sec, VALUE klass, VALUE message)
{
	struct scheduled s = {scheduler, {sec, klass, message}, rb_block_proc()};
	if (!NIL_P(klass))
		return scheduled_call((VALUE)&s);
	s.args[1] = rb_class_new_instance(1, &message, eExit);
	return rb_rescue2(scheduled_call, (VALUE)&s, scheduled_rescue, (VALUE)&s, eExit, (VALUE)0);
}

static VALUE timeout_m(int argc, VALUE *argv, VALUE self)
{
	rb_check_arity(argc, 1, 3);
	VALUE sec = argv[0];
	VALUE klass = argc > 1 ? argv[1] : Qnil;
	VALUE message = argc > 2 && RTEST(argv[2]) ? argv[2] : default_message;
	int64_t ns = timeout_ns(sec);
	if (ns == 0)
		return rb_yield(sec);
	rb_need_block();
	VALUE scheduler = rb_fiber_scheduler_current();
	if (RB_UNLIKELY(!NIL_P(scheduler)) && rb_respond_to(scheduler, id_timeout_after))
		return scheduled(scheduler, sec, klass, message);
	struct call c = {arm(ns, klass, message, 1), sec, 0};
	return rb_ensure(yield_sec, (VALUE)&c, finish, (VALUE)&c);
}

/* ExitException#exception returns the exception itself, whatever it is
 * given (ruby/timeout's). */
static VALUE exit_exception(int argc, VALUE *argv, VALUE self) { return self; }

void Init_tmo_timeout(void)
{
	VALUE mTmo = rb_define_module("Tmo");
	VALUE mTimeout = rb_define_module("Timeout");
	/* The ruby/timeout release whose surface and behaviours this keeps. */
	rb_define_const(mTimeout, "VERSION", rb_obj_freeze(rb_str_new_cstr("0.6.1")));
	eExit = rb_define_class_under(mTimeout, "ExitException", rb_eException);
	rb_define_method(eExit, "exception", exit_exception, -1);
	eError = rb_define_class_under(mTimeout, "Error", rb_eRuntimeError);
	rb_define_singleton_method(mTimeout, "timeout", timeout_m, -1);
	rb_define_private_method(mTimeout, "timeout", timeout_m, -1);
	default_message = rb_obj_freeze(rb_str_new_cstr("execution expired"));
	rb_gc_register_mark_object(default_message);
	id_zero_p = rb_intern("zero?");
	id_gt = rb_intern(">");
	id_handle_interrupt = rb_intern("handle_interrupt");
	id_immediate = rb_intern("immediate");
	id_timeout_after = rb_intern("timeout_after");
	const char *plant = getenv("TMO_RUBY_PLANT");
	plant_late = plant != NULL && strcmp(plant, "late") == 0;
	const char *refuse = getenv("TMO_RUBY_REFUSE");
	refuse_every = refuse != NULL ? strtoul(refuse, NULL, 10) : 0;
	rb_define_const(mTmo, "PLANTED", plant_late ? rb_str_new_cstr("late") : Qnil);
	watcher_init(mTmo, eExit);
}
