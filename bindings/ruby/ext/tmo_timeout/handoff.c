/* The handoff between engine callbacks and the Ruby watcher (handoff.h). */
#include "handoff.h"

#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct handoff_stats handoff_stats;

/* ---- the pool (GVL) ------------------------------------------------------- */

#define REQ_CHUNK 64

struct req_chunk {
	struct req_chunk *next;
	struct req reqs[REQ_CHUNK];
};

static struct req_chunk *chunks;
static struct req *pool;

static void req_grow(void)
{
	/* calloc, not xcalloc: a GC started here would mark a half-built chunk. */
	struct req_chunk *c = calloc(1, sizeof(*c));
	if (c == NULL)
		rb_memerror();
	for (int i = 0; i < REQ_CHUNK; i++) {
		struct req *r = &c->reqs[i];
		tmo_timer_init(&r->timer);
		r->thread = r->klass = r->message = r->exc = Qnil;
		r->next = pool;
		pool = r;
	}
	c->next = chunks;
	chunks = c;
}

struct req *req_get(void)
{
	if (pool == NULL)
		req_grow();
	struct req *r = pool;
	pool = r->next;
	r->next = NULL;
	return r;
}

void req_put(struct req *r, int refs)
{
	r->refs -= refs;
	if (r->refs > 0)
		return;
	r->thread = r->klass = r->message = r->exc = Qnil;
	__atomic_store_n(&r->state, REQ_IDLE, __ATOMIC_RELAXED);
	r->next = pool;
	pool = r;
}

void req_mark_all(void)
{
	for (struct req_chunk *c = chunks; c != NULL; c = c->next)
		for (int i = 0; i < REQ_CHUNK; i++) {
			struct req *r = &c->reqs[i];
			if (r->refs <= 0)
				continue;
			rb_gc_mark(r->thread);
			rb_gc_mark(r->klass);
			rb_gc_mark(r->message);
			rb_gc_mark(r->exc);
		}
}

/* ---- the fired stack and the watcher's wake-up ------------------------------ */

/* Pushed by engine callbacks (any thread), taken whole by the watcher. */
static struct req *fired;
/* The watcher's list: taken from `fired`, oldest first; a global so that a
 * watcher killed half-way leaves the rest to the next one (GVL). */
static struct req *local;
/* Futex word: bumped by every push and every wake. */
static uint32_t seq;
static int stop;

static void futex(uint32_t *word, int op, uint32_t val)
{
	syscall(SYS_futex, word, op, val, NULL, NULL, 0);
}

void handoff_expired(struct tmo_timer *t, void *arg)
{
	struct req *r = arg;
	(void)t;
	__atomic_store_n(&r->state, REQ_FIRED, __ATOMIC_RELEASE);
	__atomic_fetch_add(&handoff_stats.fired, 1, __ATOMIC_RELAXED);
	struct req *head = __atomic_load_n(&fired, __ATOMIC_RELAXED);
	do
		r->next = head;
	while (!__atomic_compare_exchange_n(&fired, &head, r, 1, __ATOMIC_RELEASE,
	                                    __ATOMIC_RELAXED));
	/* From here on r may already be back in the pool: touch only globals. */
	__atomic_fetch_add(&seq, 1, __ATOMIC_RELEASE);
	futex(&seq, FUTEX_WAKE_PRIVATE, 1);
}

struct req *handoff_next(void)
{
	if (local == NULL) {
		struct req *r = __atomic_exchange_n(&fired, NULL, __ATOMIC_ACQUIRE);
		while (r != NULL) { /* newest first: reverse */
			struct req *next = r->next;
			r->next = local;
			local = r;
			r = next;
		}
	}
	struct req *r = local;
	if (r != NULL)
		local = r->next;
	return r;
}

void handoff_unget(struct req *r)
{
	r->next = local;
	local = r;
}

int handoff_pending(void)
{
	return local != NULL || __atomic_load_n(&fired, __ATOMIC_ACQUIRE) != NULL;
}

void handoff_wait_prepare(void)
{
	__atomic_store_n(&stop, 0, __ATOMIC_RELAXED);
}

void *handoff_wait(void *unused)
{
	(void)unused;
	for (;;) {
		uint32_t seen = __atomic_load_n(&seq, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&fired, __ATOMIC_ACQUIRE) != NULL ||
		    __atomic_load_n(&stop, __ATOMIC_ACQUIRE))
			return NULL;
		futex(&seq, FUTEX_WAIT_PRIVATE, seen);
	}
}

void handoff_wake(void *unused)
{
	(void)unused;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&seq, 1, __ATOMIC_RELEASE);
	futex(&seq, FUTEX_WAKE_PRIVATE, INT32_MAX);
}

void handoff_reset(void)
{
	fired = NULL;
	local = NULL;
	seq = 0;
	stop = 0;
}
