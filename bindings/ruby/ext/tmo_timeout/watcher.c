/*
 * The engine this process uses (TMO_ENGINE, default wheel) and the one Ruby
 * thread that turns its expiries into Thread#raise.
 *
 * fork(): engines created before fork() refuse every call in the child with
 * TMO_EFORKED (tmo.h), and the watcher thread does not exist there.  The
 * child's first Timeout.timeout creates a new engine and a new watcher.  The
 * parent's engine is left as it is in the child, never destroyed: a block
 * the forking thread was running at the fork still holds its timer there,
 * and its cancel must find the engine (it answers TMO_EFORKED: that deadline
 * never fires in the child).
 */
#include "watcher.h"

#include <pthread.h>
#include <ruby/thread.h>
#include <stdlib.h>

#include "handoff.h"

VALUE tmo_ruby_eError;

static struct {
	struct tmo *engine;
	int forked;  /* set by the fork handler in the child */
	int running; /* the watcher lives, or is being started */
	VALUE thread;
} g = {NULL, 0, 0, Qnil};

static VALUE eExit;
static ID id_raise, id_exception, id_handle_interrupt, id_immediate, id_name_set,
    id_group, id_enclosed_p, id_add, id_thread_variable_set;

void watcher_raise(const char *what, int rc)
{
	rb_raise(tmo_ruby_eError, "tmo: %s: %s (%s)", what, tmo_errname(rc), tmo_strerror(rc));
}

int watcher_running(void) { return g.running; }

/* ---- delivery (the watcher, GVL held) ---------------------------------------- */

static VALUE make_exc(VALUE arg)
{
	struct req *r = (struct req *)arg;
	VALUE exc;
	if (NIL_P(r->klass))
		exc = rb_class_new_instance(1, &r->message, eExit);
	else
		exc = rb_funcall(r->klass, id_exception, 1, r->message);
	if (!is_exception(exc))
		exc = rb_exc_new_cstr(rb_eTypeError, "exception class/object expected");
	return exc;
}

static VALUE raise_in(VALUE arg)
{
	struct req *r = (struct req *)arg;
	return rb_funcall(r->thread, id_raise, 1, r->exc);
}

/* Raise in r's thread unless the caller withdrew r.  The exception is made
 * first (that may run Ruby code, and another thread with it); only then the
 * compare-and-swap commits, and Thread#raise follows.  A klass whose
 * `exception` fails raises that error instead (as ruby/timeout does).
 * Returns a tag to jump to (the watcher was killed), negated when r was not
 * delivered, or 0. */
static int deliver(struct req *r)
{
	if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != REQ_FIRED)
		return 0;
	int tag = 0;
	VALUE exc = rb_protect(make_exc, (VALUE)r, &tag);
	if (tag) {
		exc = rb_errinfo();
		rb_set_errinfo(Qnil);
		if (!is_exception(exc))
			return -tag; /* killed: r is still FIRED, the next watcher takes it */
	}
	r->exc = exc;
	int expect = REQ_FIRED;
	if (!__atomic_compare_exchange_n(&r->state, &expect, REQ_COMMITTED, 0, __ATOMIC_ACQ_REL,
	                                 __ATOMIC_ACQUIRE))
		return 0; /* withdrawn while the exception was made */
	tag = 0;
	rb_protect(raise_in, (VALUE)r, &tag);
	__atomic_store_n(&r->state, REQ_RAISED, __ATOMIC_RELEASE);
	handoff_stats.delivered++;
	if (tag && is_exception(rb_errinfo())) {
		rb_set_errinfo(Qnil); /* Thread#raise failed: nothing to pass on */
		tag = 0;
	}
	return tag;
}

static VALUE watcher_loop(VALUE unused)
{
	for (;;) {
		struct req *r = handoff_next();
		if (r != NULL) {
			int tag = deliver(r);
			if (tag < 0) {
				handoff_unget(r);
				rb_jump_tag(-tag);
			}
			req_put(r, 1);
			if (tag)
				rb_jump_tag(tag);
			continue;
		}
		handoff_wait_prepare();
		rb_thread_call_without_gvl(handoff_wait, NULL, handoff_wake, NULL);
		rb_thread_check_ints();
	}
	return Qnil;
}

static VALUE watcher_gone(VALUE unused)
{
	g.running = 0;
	g.thread = Qnil;
	return Qnil;
}

static VALUE watcher_main(void *unused)
{
	return rb_ensure(watcher_loop, Qnil, watcher_gone, Qnil);
}

/* ---- starting the watcher ------------------------------------------------------ */

static VALUE create_i(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, data))
{
	return rb_thread_create(watcher_main, NULL);
}

/* A thread inherits its creator's Thread.handle_interrupt masks: create the
 * watcher inside `Object => :immediate`, so a caller's `:never` never keeps
 * it from being killed (at exit above all).  It leaves the caller's
 * ThreadGroup for the default one unless the group is enclosed (then it may
 * not leave, and stays). */
static VALUE start_thread(VALUE unused)
{
	VALUE mask = rb_hash_new();
	rb_hash_aset(mask, rb_cObject, ID2SYM(id_immediate));
	VALUE th = rb_block_call(rb_cThread, id_handle_interrupt, 1, &mask, create_i, Qnil);
	g.thread = th;
	rb_funcall(th, id_name_set, 1, rb_str_new_cstr("tmo Timeout watcher"));
	/* Test frameworks' thread-leak checks skip threads marked so. */
	rb_funcall(th, id_thread_variable_set, 2, ID2SYM(rb_intern("\0__detached_thread__")),
	           Qtrue);
	VALUE group = rb_funcall(th, id_group, 0);
	if (!NIL_P(group) && !RTEST(rb_funcall(group, id_enclosed_p, 0))) {
		VALUE dflt = rb_const_get(rb_path2class("ThreadGroup"), rb_intern("Default"));
		rb_funcall(dflt, id_add, 1, th);
	}
	return th;
}

static void start_watcher(void)
{
	/* Set first: a trap handler that runs while the thread is being made
	 * (Ruby code runs here) must not start a second one. */
	g.running = 1;
	handoff_stats.watchers++;
	int tag = 0;
	rb_protect(start_thread, Qnil, &tag);
	if (tag) {
		g.running = 0;
		rb_jump_tag(tag);
	}
}

/* ---- the engine ------------------------------------------------------------------ */

static void create_engine(void)
{
	const char *name = getenv("TMO_ENGINE");
	if (name == NULL || *name == '\0')
		name = "wheel";
	struct tmo *e;
	int rc = tmo_create(name, NULL, &e);
	if (rc != 0)
		rb_raise(tmo_ruby_eError, "tmo: cannot create engine '%s': %s (%s)", name,
		         tmo_errname(rc), tmo_strerror(rc));
	g.engine = e;
}

void watcher_forked(void)
{
	g.forked = 0;
	g.engine = NULL; /* the child's copy stays: see the top of this file */
	g.running = 0;
	g.thread = Qnil;
	handoff_reset();
}

struct tmo *watcher_engine(void)
{
	if (RB_UNLIKELY(g.forked))
		watcher_forked();
	if (RB_UNLIKELY(g.engine == NULL))
		create_engine();
	if (RB_UNLIKELY(!g.running))
		start_watcher();
	return g.engine;
}

static void atfork_child(void) { g.forked = 1; }

/* ---- Tmo: what the tests and the benchmark read ------------------------------------ */

static VALUE tmo_engines_m(VALUE self)
{
	VALUE out = rb_ary_new();
	for (const struct tmo_engine_ops *const *o = tmo_engines(); *o != NULL; o++)
		rb_ary_push(out, rb_str_new_cstr((*o)->name));
	return out;
}

static VALUE tmo_engine_m(VALUE self)
{
	struct tmo *e = watcher_engine();
	return rb_str_new_cstr(tmo_ops(e)->name);
}

static VALUE tmo_resolution_m(VALUE self)
{
	return LL2NUM(tmo_ops(watcher_engine())->resolution_ns);
}

static VALUE tmo_stats_m(VALUE self)
{
	VALUE h = rb_hash_new();
	const struct handoff_stats *s = &handoff_stats;
#define STAT(f) rb_hash_aset(h, ID2SYM(rb_intern(#f)), ULL2NUM(__atomic_load_n(&s->f, __ATOMIC_RELAXED)))
	STAT(armed);
	STAT(fired);
	STAT(withdrawn);
	STAT(delivered);
	STAT(consumed);
	STAT(timed_out);
	STAT(watchers);
	STAT(arm_retries);
#undef STAT
	rb_hash_aset(h, ID2SYM(rb_intern("handoff_pending")), handoff_pending() ? Qtrue : Qfalse);
	return h;
}

static VALUE tmo_watcher_m(VALUE self) { return g.thread; }

static void mark_root(void *unused)
{
	rb_gc_mark(g.thread);
	req_mark_all();
}

static const rb_data_type_t root_type = {
	.wrap_struct_name = "tmo_timeout_root",
	.function = {.dmark = mark_root},
};

void watcher_init(VALUE mTmo, VALUE exit_class)
{
	eExit = exit_class;
	id_raise = rb_intern("raise");
	id_exception = rb_intern("exception");
	id_handle_interrupt = rb_intern("handle_interrupt");
	id_immediate = rb_intern("immediate");
	id_name_set = rb_intern("name=");
	id_group = rb_intern("group");
	id_enclosed_p = rb_intern("enclosed?");
	id_add = rb_intern("add");
	id_thread_variable_set = rb_intern("thread_variable_set");
	rb_gc_register_mark_object(TypedData_Wrap_Struct(rb_cObject, &root_type, NULL));
	pthread_atfork(NULL, NULL, atfork_child);
	tmo_ruby_eError = rb_define_class_under(mTmo, "Error", rb_eStandardError);
	rb_define_module_function(mTmo, "engines", tmo_engines_m, 0);
	rb_define_module_function(mTmo, "engine", tmo_engine_m, 0);
	rb_define_module_function(mTmo, "resolution_ns", tmo_resolution_m, 0);
	rb_define_module_function(mTmo, "stats", tmo_stats_m, 0);
	rb_define_module_function(mTmo, "watcher", tmo_watcher_m, 0);
}
