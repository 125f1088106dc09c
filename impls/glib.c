/*
 * glib: a peer adapter over GLib 2.74's main loop: a GMainContext of the
 * engine's own, iterated by its loop thread; an arm creates a timeout
 * source (g_timeout_source_new, whole milliseconds rounded up) and
 * attaches it from whatever thread arms (g_source_attach is thread-safe
 * and wakes the context); a cancel destroys it (g_source_destroy, also
 * thread-safe).
 *
 * The shared design (records, the loop lock, exactly once, cancel's wait,
 * destroy, fork) is the peer core's: src/peer/peer.h.  The loop lock:
 * the context's poll function (g_main_context_set_poll_func) releases the
 * engine mutex around g_poll, and the loop thread holds it for the rest of
 * each g_main_context_iteration, so arms and cancels from other threads
 * (which call GLib under the mutex) find the context at rest in its poll.
 * What GLib lacks and the adapter adds: a destroyed source's callback may
 * already be running on the loop thread, and g_source_destroy does not
 * wait for it; cancel waits (the callback gate) and answers
 * TMO_CANCEL_SELF inside it.  GLib fires a timeout source when its
 * microsecond clock reaches the expiration computed at creation, so the
 * core's deadline check is a guard only.
 *
 * Costs: arm = the engine mutex (waited for while the loop thread runs a
 * turn), g_malloc of a GSource, g_source_attach (the context lock, a
 * write to the context's eventfd when the loop sleeps); cancel =
 * g_source_destroy (the context lock, a wake-up) and unref.  GLib
 * allocates per arm (not through tmo's allocator): no TMO_CAP_NO_ALLOC.
 *
 * fork(): every call in the child is refused (TMO_EFORKED, the core);
 * tmo_destroy there destroys the child's copies of the sources and unrefs
 * the context, which closes the child's copy of its eventfd (GLib polls
 * with poll(), so there is no kernel set shared with the parent).
 *
 * Resolution: 1 ms (timeout sources and the poll timeout are milliseconds).
 */
#include <glib.h>

#include "peer/peer.h"

/* GLib checks every attached source on every iteration: past this many
 * pending timers each arm would cost milliseconds, so arm answers
 * TMO_EAGAIN (measured: 1e6 sources made destroy's 1e6 arms run for
 * hours, each waiting for an O(sources) iteration). */
#define GLIB_MAX_PENDING 4096

struct lgl {
	GMainContext *ctx;
};

#define LIB(e) ((struct lgl *)(e)->lib)
#define SRC(e, r) ((GSource **)peer_area(e, r))

/* The engine whose loop thread this is (the poll function has no argument). */
static _Thread_local struct peer *glib_loop;

static gint lgl_poll(GPollFD *fds, guint n, gint timeout)
{
	peer_unlock(glib_loop);
	gint rc = g_poll(fds, n, timeout);
	peer_lock(glib_loop);
	return rc;
}

/* GLib dispatches the sources one iteration found ready in the order they
 * were attached, not by deadline; tmo__peer_fire puts them in order. */
static gboolean lgl_timeout(gpointer data)
{
	struct peer_rec *r = data;
	struct peer *e = r->eng;
	/* This source is done (FALSE below destroys it; GLib holds its own
	 * reference while dispatching): drop ours before a restart makes a new
	 * one. */
	g_source_unref(*SRC(e, r));
	*SRC(e, r) = NULL;
	tmo__peer_fire(e, r);
	return G_SOURCE_REMOVE;
}

static int lgl_init(struct peer *e)
{
	struct lgl *l = tmo__calloc(1, sizeof *l);
	if (l == NULL)
		return TMO_ENOMEM;
	l->ctx = g_main_context_new();
	g_main_context_set_poll_func(l->ctx, lgl_poll);
	e->lib = l;
	return 0;
}

static void lgl_stop(struct peer *e, struct peer_rec *r)
{
	GSource *s = *SRC(e, r);
	if (s == NULL)
		return; /* expired (its callback dropped it) */
	g_source_destroy(s);
	g_source_unref(s);
	*SRC(e, r) = NULL;
}

static void lgl_fini(struct peer *e)
{
	g_main_context_unref(LIB(e)->ctx);
	tmo__free(LIB(e));
}

/* In the child the context lock is free (the loop lock was taken at the
 * fork, so the loop thread was in g_poll or a callback): destroy the
 * child's copies of the sources, then the context. */
static void lgl_fini_forked(struct peer *e)
{
	tmo_list_for_each(r, &e->dead, struct peer_rec, link)
		lgl_stop(e, r);
	lgl_fini(e);
}

static int lgl_start(struct peer *e, struct peer_rec *r, int64_t now)
{
	int64_t left = r->deadline - now;
	int64_t ms = left > 0 ? (left + TMO_NSEC_PER_MSEC - 1) / TMO_NSEC_PER_MSEC : 0;
	/* A guint of milliseconds (49 days); longer waits are restarted by the
	 * deadline check when they expire. */
	if (ms > G_MAXUINT)
		ms = G_MAXUINT;
	GSource *s = g_timeout_source_new((guint)ms);
	g_source_set_callback(s, lgl_timeout, r, NULL);
	g_source_attach(s, LIB(e)->ctx);
	*SRC(e, r) = s;
	return 0;
}

static void lgl_wake(struct peer *e) { g_main_context_wakeup(LIB(e)->ctx); }

static void lgl_iterate(struct peer *e)
{
	glib_loop = e;
	g_main_context_iteration(LIB(e)->ctx, TRUE);
}

static const struct peer_backend lgl_backend = {
	.name = "glib",
	.area = sizeof(GSource *),
	.max_pending = GLIB_MAX_PENDING,
	.flags = PEER_ANY_THREAD,
	.init = lgl_init,
	.fini = lgl_fini,
	.start = lgl_start,
	.stop = lgl_stop,
	.wake = lgl_wake,
	.iterate = lgl_iterate,
	.fini_forked = lgl_fini_forked,
};

static int lgl_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own */
	return tmo__peer_create(&lgl_backend, out);
}

const struct tmo_engine_ops tmo__engine_glib = {
	.name = "glib",
	.summary = "GLib 2.74 GMainContext on one loop thread; arm = g_timeout_source_new + "
	           "g_source_attach from any thread, cancel = g_source_destroy; adapter adds "
	           "cancel's wait for a running callback",
	.caps = 0,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(lgl_create),
};
