/* The process's engine and its Ruby watcher thread (watcher.c). */
#ifndef TMO_RUBY_WATCHER_H
#define TMO_RUBY_WATCHER_H

#include <ruby.h>
#include <tmo/tmo.h>

/* Tmo::Error: an engine that cannot be created or refuses an arm. */
extern VALUE tmo_ruby_eError;

/* Init: the GC root, the fork handler, Tmo's module functions. */
void watcher_init(VALUE mTmo, VALUE eExit);

/* The engine, with the watcher running: creates either when missing (the
 * first call, a call after fork(), a call after the watcher was killed).
 * Raises Tmo::Error when the engine cannot be created. */
struct tmo *watcher_engine(void);

/* After tmo_arm answered TMO_EFORKED: forget the parent's engine and
 * watcher, as the fork handler does. */
void watcher_forked(void);

/* Non-zero while the watcher thread lives (or is being started). */
int watcher_running(void);

/* v is an exception: what rb_protect's errinfo is after a raise (a kill or a
 * throw leaves other things there, some of them not objects at all). */
static inline int is_exception(VALUE v)
{
	return !RB_SPECIAL_CONST_P(v) && RB_BUILTIN_TYPE(v) == RUBY_T_OBJECT &&
	       RTEST(rb_obj_is_kind_of(v, rb_eException));
}

/* Raise Tmo::Error for tmo error rc from `what`. */
NORETURN(void watcher_raise(const char *what, int rc));

#endif
