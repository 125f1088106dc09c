/*
 * Timeout scopes (include/tmo/scope.h), a scope's block and the waits its
 * interrupt reaches, on one engine: `test_engine_scope ENGINE [CASE]`.  A
 * block's value comes back, a timeout of 0 means no deadline, bad input is
 * refused before the block runs; a queue pop, a busy loop polling tmo_check,
 * a sleep and a condition wait (its mutex held again, its ensure run) are
 * interrupted at the deadline, and the queue's own timeout, order and misuse
 * answers are what include/tmo/wait.h says.  How the interrupt passes the
 * block's handlers: scope_delivery.c; which scope it belongs to:
 * scope_nesting.c; the deadlines: tests/kit/scope_test.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"
#include "scope_test.h"
#include "tmo/scope.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

static struct tmo *eng; /* the engine of every case (sc_begin creates it) */

/* ---- simple blocks ---------------------------------------------------------- */

static intptr_t ret42(void *arg) { (void)arg; return 42; }

static intptr_t must_not_run(void *arg)
{
	(*(int *)arg)++;
	return 0;
}

static void test_value_returned(void)
{
	intptr_t v = 0;
	struct tmo_exc e;
	CHECK_EQ(tmo_scope_run(eng, FAR, TMO_SCOPE_THROW, ret42, NULL, &v, &e), 0);
	CHECK_EQ(v, 42);
	/* A block that sleeps less than its deadline returns its value. */
	int64_t ns = 2 * MS;
	v = 0;
	CHECK_EQ(tmo_scope_run(eng, FAR, TMO_SCOPE_EXCEPTION, sc_sleep_then, &ns, &v, NULL), 0);
	CHECK_EQ(v, 7);
	CHECK(tmo_scope_current() == 0);
	CHECK_EQ(tmo_interrupt_pending(), 0);
}

static void test_zero_means_none(void)
{
	/* 0: no deadline at all; the engine is not even needed. */
	int64_t ns = 30 * MS;
	intptr_t v = 0;
	int64_t t0 = tmo_now_ns();
	CHECK_EQ(tmo_scope_run(eng, 0, TMO_SCOPE_THROW, sc_sleep_then, &ns, &v, NULL), 0);
	CHECK_EQ(v, 7);
	CHECK(sc_since(t0) >= 30 * MS);
	v = 0;
	CHECK_EQ(tmo_scope_run(NULL, 0, TMO_SCOPE_RAISE, ret42, NULL, &v, NULL), 0);
	CHECK_EQ(v, 42);
}

static void test_bad_input(void)
{
	int ran = 0;
	CHECK_EQ(tmo_scope_run(eng, -1, TMO_SCOPE_THROW, must_not_run, &ran, NULL, NULL),
	         TMO_EBADTIMEOUT);
	CHECK_EQ(tmo_scope_run(eng, INT64_MIN, TMO_SCOPE_THROW, must_not_run, &ran, NULL, NULL),
	         TMO_EBADTIMEOUT);
	CHECK_EQ(tmo_scope_run(eng, TMO_TIMEOUT_MAX + 1, TMO_SCOPE_THROW, must_not_run, &ran,
	                       NULL, NULL),
	         TMO_EBADTIMEOUT);
	CHECK_EQ(tmo_scope_run(eng, MS, TMO_SCOPE_THROW, NULL, NULL, NULL, NULL), TMO_ENULLCB);
	CHECK_EQ(tmo_scope_run(eng, MS, (enum tmo_scope_mode)0, must_not_run, &ran, NULL, NULL),
	         TMO_EINVAL);
	CHECK_EQ(tmo_scope_run(eng, MS, (enum tmo_scope_mode)4, must_not_run, &ran, NULL, NULL),
	         TMO_EINVAL);
	CHECK_EQ(tmo_scope_run(NULL, MS, TMO_SCOPE_THROW, must_not_run, &ran, NULL, NULL),
	         TMO_ENULLENGINE);
	CHECK_EQ(ran, 0);
	CHECK_EQ(tmo_sleep(-1), TMO_EBADTIMEOUT);
	struct tmo_queue q;
	struct tmo_qnode *n;
	CHECK_EQ(tmo_queue_init(&q), 0);
	CHECK_EQ(tmo_queue_pop(&q, -2, &n), TMO_EBADTIMEOUT);
	CHECK_EQ(tmo_queue_pop(&q, 0, NULL), TMO_EINVAL);
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_TIMEDOUT);
	CHECK(n == NULL);
	tmo_queue_destroy(&q);
	intptr_t v;
	CHECK_EQ(tmo_rescue(0, ret42, NULL, NULL, NULL, &v), TMO_ENULLCB);
	CHECK_EQ(tmo_rescue(TMO_RESCUE_CLASS(TMO_EXC_THROW), ret42, NULL,
	                    (tmo_handler_fn *)(void *)ret42, NULL, &v),
	         TMO_EINVAL);
	CHECK_EQ(tmo_rescue(0, ret42, NULL, (tmo_handler_fn *)(void *)ret42, NULL, &v),
	         TMO_EINVAL);
	CHECK_EQ(tmo_ensure(ret42, NULL, NULL, NULL, &v), TMO_ENULLCB);
	/* The scope outcomes are named by the library's one error table. */
	CHECK(strcmp(tmo_strerror(TMO_ETIMEDOUT), TMO_EXPIRED_MESSAGE) == 0);
	CHECK(strcmp(tmo_strerror(TMO_ERAISED), "an exception raised in the block left the scope") == 0);
	CHECK(strcmp(tmo_errname(TMO_ETIMEDOUT), "TMO_ETIMEDOUT") == 0);
	CHECK(strcmp(tmo_errname(TMO_ERAISED), "TMO_ERAISED") == 0);
}

/* ---- interruption points -------------------------------------------------- */

struct popper {
	struct tmo_queue q;
	int returned;
};

static intptr_t pop_forever(void *arg)
{
	struct popper *p = arg;
	struct tmo_qnode *n;
	tmo_queue_pop(&p->q, TMO_WAIT_FOREVER, &n);
	p->returned = 1;
	return 1;
}

static void test_pop_interrupted(void)
{
	struct popper p = {.returned = 0};
	CHECK_EQ(tmo_queue_init(&p.q), 0);
	for (int mode = TMO_SCOPE_RAISE; mode <= TMO_SCOPE_EXCEPTION; mode++) {
		struct tmo_exc e = {0};
		int64_t t0 = tmo_now_ns();
		int rc = tmo_scope_run(eng, DEADLINE, mode, pop_forever, &p, NULL, &e);
		int64_t el = sc_since(t0);
		CHECK_EQ(rc, TMO_ETIMEDOUT);
		CHECK_EQ(p.returned, 0);
		CHECK(el >= DEADLINE);
		CHECK(el < LONG_WAIT / 2);
		CHECK_EQ(e.cls, TMO_EXC_TIMEOUT);
		CHECK_EQ(e.code, TMO_ETIMEDOUT);
		CHECK(e.message != NULL && strcmp(e.message, "execution expired") == 0);
		CHECK(e.scope != 0);
	}
	CHECK_EQ(tmo_queue_len(&p.q), 0);
	tmo_queue_destroy(&p.q);
}

struct pusher_arg {
	struct tmo_queue *q;
	struct tmo_qnode node;
	int64_t delay;
};

static void *pusher(void *arg)
{
	struct pusher_arg *a = arg;
	struct timespec ts = {0, (long)a->delay};
	nanosleep(&ts, NULL);
	tmo_queue_push(a->q, &a->node);
	return NULL;
}

static void test_pop_own_timeout(void)
{
	struct tmo_queue q;
	struct tmo_qnode *n = (struct tmo_qnode *)&n;
	CHECK_EQ(tmo_queue_init(&q), 0);
	/* Its own timeout, outside any scope: a result, not an interrupt. */
	int64_t t0 = tmo_now_ns();
	CHECK_EQ(tmo_queue_pop(&q, DEADLINE, &n), TMO_WAIT_TIMEDOUT);
	CHECK(sc_since(t0) >= DEADLINE);
	CHECK(n == NULL);
	/* A node pushed by another thread while we wait is returned. */
	struct pusher_arg a = {.q = &q, .delay = 5 * MS};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, pusher, &a), 0);
	CHECK_EQ(tmo_queue_pop(&q, LONG_WAIT, &n), TMO_WAIT_OK);
	CHECK(n == &a.node);
	pthread_join(th, NULL);
	/* FIFO. */
	struct tmo_qnode x[3] = {TMO_QNODE_INIT, TMO_QNODE_INIT, TMO_QNODE_INIT};
	for (int i = 0; i < 3; i++)
		CHECK_EQ(tmo_queue_push(&q, &x[i]), 0);
	CHECK_EQ(tmo_queue_len(&q), 3);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_OK);
		CHECK(n == &x[i]);
	}
	/* remove: middle, tail (the tail pointer must follow), absent. */
	for (int i = 0; i < 3; i++)
		CHECK_EQ(tmo_queue_push(&q, &x[i]), 0);
	CHECK_EQ(tmo_queue_remove(&q, &x[1]), 1);
	CHECK_EQ(tmo_queue_remove(&q, &x[1]), 0);
	CHECK_EQ(tmo_queue_remove(&q, &x[2]), 1);
	CHECK_EQ(tmo_queue_push(&q, &x[1]), 0);
	CHECK_EQ(tmo_queue_len(&q), 2);
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_OK);
	CHECK(n == &x[0]);
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_OK);
	CHECK(n == &x[1]);
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_TIMEDOUT);
	tmo_queue_destroy(&q);
}

/* Bad input to the queue gets a named error and changes nothing: NULL queue
 * or node, a node pushed twice (onto the same queue or another one), a
 * node removed from a queue it is not on. */
static void test_queue_misuse(void)
{
	struct tmo_queue q, q2;
	struct tmo_qnode a = TMO_QNODE_INIT, b, *n;
	tmo_qnode_init(&b);
	CHECK_EQ(tmo_queue_init(NULL), TMO_EINVAL);
	CHECK_EQ(tmo_queue_init(&q), 0);
	CHECK_EQ(tmo_queue_init(&q2), 0);
	CHECK_EQ(tmo_queue_push(NULL, &a), TMO_EINVAL);
	CHECK_EQ(tmo_queue_push(&q, NULL), TMO_EINVAL);
	CHECK_EQ(tmo_queue_len(NULL), TMO_EINVAL);
	CHECK_EQ(tmo_queue_remove(NULL, &a), TMO_EINVAL);
	CHECK_EQ(tmo_queue_remove(&q, NULL), TMO_EINVAL);
	CHECK_EQ(tmo_queue_pop(NULL, 0, &n), TMO_EINVAL);
	tmo_queue_destroy(NULL); /* ignored */
	tmo_qnode_init(NULL);    /* ignored */
	CHECK_EQ(tmo_queue_len(&q), 0);

	/* The same node twice: refused, the queue as it was (a second push
	 * used to link the node to itself and lose what followed). */
	CHECK_EQ(tmo_queue_push(&q, &a), 0);
	CHECK_EQ(tmo_queue_push(&q, &b), 0);
	CHECK_EQ(tmo_queue_push(&q, &a), TMO_EARMED);
	CHECK_EQ(tmo_queue_push(&q2, &a), TMO_EARMED);
	CHECK_EQ(tmo_queue_len(&q), 2);
	CHECK_EQ(tmo_queue_len(&q2), 0);
	CHECK_EQ(tmo_queue_remove(&q2, &a), 0); /* on q, not q2: left alone */
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_OK);
	CHECK(n == &a);
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_OK);
	CHECK(n == &b);
	CHECK_EQ(tmo_queue_pop(&q, 0, &n), TMO_WAIT_TIMEDOUT);
	/* Popped, it may go anywhere again; removed too. */
	CHECK_EQ(tmo_queue_push(&q2, &a), 0);
	CHECK_EQ(tmo_queue_remove(&q2, &a), 1);
	CHECK_EQ(tmo_queue_push(&q, &a), 0);
	/* Destroy hands remaining nodes back, pushable again. */
	tmo_queue_destroy(&q);
	CHECK_EQ(tmo_queue_push(&q2, &a), 0);
	CHECK_EQ(tmo_queue_len(&q2), 1);
	tmo_queue_destroy(&q2);
}

static intptr_t busy_loop(void *arg)
{
	long *iters = arg;
	for (;;) {
		tmo_check();
		(*iters)++;
	}
	return 0;
}

static void test_busy_loop_interrupted(void)
{
	long iters = 0;
	int64_t t0 = tmo_now_ns();
	CHECK_EQ(tmo_scope_run(eng, DEADLINE, TMO_SCOPE_THROW, busy_loop, &iters, NULL, NULL),
	         TMO_ETIMEDOUT);
	CHECK(sc_since(t0) >= DEADLINE);
	CHECK(sc_since(t0) < LONG_WAIT);
	CHECK(iters > 0);
}

static void test_sleep_interrupted(void)
{
	int64_t ns = LONG_WAIT;
	int64_t t0 = tmo_now_ns();
	CHECK_EQ(tmo_scope_run(eng, DEADLINE, TMO_SCOPE_EXCEPTION, sc_sleep_then, &ns, NULL, NULL),
	         TMO_ETIMEDOUT);
	CHECK(sc_since(t0) >= DEADLINE);
	CHECK(sc_since(t0) < LONG_WAIT / 2);
}

/* A condition wait is interrupted, and raises with its mutex held again. */
struct cwait {
	pthread_mutex_t m;
	struct tmo_cond cv;
	int unlock_rc;
	int ensured;
};

static void cw_unlock(void *arg)
{
	struct cwait *w = arg;
	w->ensured++;
	w->unlock_rc = pthread_mutex_unlock(&w->m); /* EPERM if not held */
}

static intptr_t cw_wait(void *arg)
{
	struct cwait *w = arg;
	tmo_cond_wait(&w->cv, &w->m, TMO_WAIT_FOREVER);
	return 0;
}

static intptr_t cw_block(void *arg)
{
	struct cwait *w = arg;
	pthread_mutex_lock(&w->m);
	tmo_ensure(cw_wait, w, cw_unlock, w, NULL);
	return 0;
}

static void test_cond_interrupted(void)
{
	struct cwait w = {.unlock_rc = -1};
	pthread_mutexattr_t at;
	pthread_mutexattr_init(&at);
	pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&w.m, &at);
	pthread_mutexattr_destroy(&at);
	tmo_cond_init(&w.cv);
	int64_t t0 = tmo_now_ns();
	CHECK_EQ(tmo_scope_run(eng, DEADLINE, TMO_SCOPE_THROW, cw_block, &w, NULL, NULL),
	         TMO_ETIMEDOUT);
	CHECK(sc_since(t0) < LONG_WAIT / 2);
	CHECK_EQ(w.ensured, 1);
	CHECK_EQ(w.unlock_rc, 0);
	CHECK(w.cv.head == NULL); /* the interrupted waiter unlinked itself */
	/* Its own timeout. */
	pthread_mutex_lock(&w.m);
	CHECK_EQ(tmo_cond_wait(&w.cv, &w.m, 2 * MS), TMO_WAIT_TIMEDOUT);
	CHECK_EQ(pthread_mutex_unlock(&w.m), 0);
	pthread_mutex_destroy(&w.m);
}

int main(int argc, char **argv)
{
	sc_begin(argc, argv, "engine_scope", &eng);
	RUN(test_value_returned);
	RUN(test_zero_means_none);
	RUN(test_bad_input);
	RUN(test_pop_interrupted);
	RUN(test_pop_own_timeout);
	RUN(test_queue_misuse);
	RUN(test_busy_loop_interrupted);
	RUN(test_sleep_interrupted);
	RUN(test_cond_interrupted);
	return sc_end(&eng);
}
