/*
 * What the tests of where free nodes go share (unit/lf_spare, unit/lf_keep):
 * held arms of 60 s (never due there), made here or in a new thread, and
 * the arena index of the node a timer's arm holds.
 */
#ifndef TMO_TEST_LF_NODES_H
#define TMO_TEST_LF_NODES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
#include "lf/lf.h"

static void no_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	abort(); /* 60 s: never due here */
}

/* The arena index of t's node. */
static inline uint32_t node_of(struct tmo_timer *t)
{
	return lf_word_idx(atomic_load(lf_timer_word(t)));
}

struct job {
	struct tmo *e;
	struct tmo_timer *ts;
	int n, armed;
};

/* Arm j->n timers until one is refused; cancel none. */
static inline void *arm_all(void *arg)
{
	struct job *j = arg;
	for (j->armed = 0; j->armed < j->n; j->armed++)
		if (tmo_arm(j->e, &j->ts[j->armed], 60 * TMO_NSEC_PER_SEC, no_cb, NULL) != 0)
			break;
	return NULL;
}

/* fn(j) in a new thread, which then exits. */
static inline void in_thread_do(void *(*fn)(void *), struct job *j)
{
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, fn, j), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
}

static inline void in_thread(struct job *j) { in_thread_do(arm_all, j); }

static inline int cancel_all(struct tmo *e, struct tmo_timer *ts, int n)
{
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += tmo_cancel(e, &ts[i]) != TMO_CANCEL_PREVENTED;
	return bad;
}

#endif
