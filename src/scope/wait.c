/*
 * The waits (include/tmo/wait.h): sleep, the condition variable and the
 * queue.  Each blocks by parking the waiting thread on its own context's
 * condvar (runtime.h), so an engine callback or a signaller only ever locks
 * the context of the thread it wakes.
 */
#include <errno.h>
#include <stdatomic.h>

#include "scope/runtime.h"

struct tmo__waiter {
	struct tmo__waiter *next, *prev;
	struct ctx *c;
	int signalled; /* under the cond's mutex */
};

/* Wake the owner of c for a signaller's token. */
static void ctx_wake(struct ctx *c)
{
	pthread_mutex_lock(&c->m);
	c->token = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->m);
}

/* Park the owner until a token, a deliverable interrupt, or the absolute
 * deadline (< 0: none).  Returns 1 when the deadline passed.  Callers re-check
 * their own condition: a return is a hint. */
static int park(struct ctx *c, int64_t deadline)
{
	int timedout = 0;
	pthread_mutex_lock(&c->m);
	while (!c->token && !tmo__deliverable(c)) {
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
	struct ctx *c = tmo__ctx_get();
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
		if (tmo__deliverable(c)) {
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
	struct ctx *c = tmo__ctx_get();
	if (c == NULL)
		return TMO_ESYS;
	tmo_check();
	int64_t deadline = wait_deadline(timeout_ns);
	for (;;) {
		int r = cond_wait_internal(c, cv, m, deadline);
		if (r != WAIT_INTERRUPTED)
			return r;
		tmo__deliver(c); /* raises with m held, as documented */
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
		tmo__scope_fatal("tmo_queue_destroy with a waiter");
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

/* Unlink n, whose predecessor on q is prev (NULL: n is the head), and hand
 * it back initialised; q's lock held. */
static struct tmo_qnode *queue_unlink(struct tmo_queue *q, struct tmo_qnode *prev,
                                      struct tmo_qnode *n)
{
	if (prev != NULL)
		prev->next = n->next;
	else
		q->head = n->next;
	if (q->tail == n)
		q->tail = prev;
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
			*out = queue_unlink(q, NULL, q->head);
			pthread_mutex_unlock(&q->lock);
			return TMO_WAIT_OK;
		}
		if (timeout_ns == 0) {
			pthread_mutex_unlock(&q->lock);
			return TMO_WAIT_TIMEDOUT;
		}
		if (c == NULL) {
			c = tmo__ctx_get();
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
		tmo__deliver(c);
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
		if (n == node) {
			queue_unlink(q, prev, n);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&q->lock);
	return found;
}
