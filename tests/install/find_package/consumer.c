/* Built by tests/install/find_package.sh against an installed tmo found
 * only through find_package(tmo): the static library links with the
 * private libraries tmoConfig.cmake finds, and the wheel engine (the
 * lock-free core: CK, the timer thread) arms and cancels. */
#include <stdio.h>
#include <tmo/tmo.h>

static void cb(struct tmo_timer *t, void *a)
{
	(void)t;
	__atomic_fetch_add((int *)a, 1, __ATOMIC_RELAXED);
}

int main(void)
{
	struct tmo *e;
	struct tmo_timer t = TMO_TIMER_INIT;
	int n = 0;
	int rc = tmo_create("wheel", NULL, &e);
	if (rc != 0) {
		printf("find_package consumer: create: %s\n", tmo_errname(rc));
		return 1;
	}
	/* An hour away: the cancel comes first, and the callback never runs. */
	int a = tmo_arm(e, &t, 3600 * TMO_NSEC_PER_SEC, cb, &n);
	int c = tmo_cancel(e, &t);
	tmo_destroy(&e);
	n = __atomic_load_n(&n, __ATOMIC_RELAXED);
	printf("find_package consumer: arm -> %s, cancel -> %s, fired %d\n", tmo_errname(a),
	       c == TMO_CANCEL_PREVENTED ? "PREVENTED" : tmo_errname(c), n);
	return a == 0 && c == TMO_CANCEL_PREVENTED && n == 0 ? 0 : 1;
}
