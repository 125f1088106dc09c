/* Built by tests/install/check.sh against an installed tmo, found only
 * through pkg-config: the headers, the library and tmo.pc work together. */
#include <stdio.h>
#include <time.h>
#include <tmo/scope.h>
#include <tmo/tmo.h>
#include <tmo/wait.h>

static void cb(struct tmo_timer *t, void *a)
{
	(void)t;
	__atomic_fetch_add((int *)a, 1, __ATOMIC_RELEASE);
}

int main(void)
{
	struct tmo *e;
	int n = 0;
	struct tmo_timer t = TMO_TIMER_INIT;
	if (tmo_create("wheel", NULL, &e) != 0)
		return 1;
	if (tmo_arm(e, &t, TMO_NSEC_PER_MSEC, cb, &n) != 0)
		return 1;
	for (int i = 0; i < 2000 && __atomic_load_n(&n, __ATOMIC_ACQUIRE) == 0; i++) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	int rc = tmo_cancel(e, &t); /* FIRED: the callback has returned */
	n = __atomic_load_n(&n, __ATOMIC_ACQUIRE);
	printf("install consumer: fired %d, cancel -> %s\n", n, rc == TMO_CANCEL_FIRED ? "FIRED" : tmo_errname(rc));
	tmo_destroy(&e);
	/* tmo/wait.h is installed too: a try-pop of an empty queue times out. */
	struct tmo_queue q;
	struct tmo_qnode *got;
	if (tmo_queue_init(&q) != 0)
		return 1;
	int w = tmo_queue_pop(&q, 0, &got);
	tmo_queue_destroy(&q);
	return n == 1 && rc == TMO_CANCEL_FIRED && w == TMO_WAIT_TIMEDOUT ? 0 : 1;
}
