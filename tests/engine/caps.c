/*
 * The promises of two capabilities, on one engine: `test_engine_caps
 * ENGINE`.  Counted on the arming thread over PAIRS arm+cancel pairs of one
 * timer after as many to warm up:
 *   TMO_CAP_NO_ALLOC    no library allocation (the fault hook counts them);
 *   TMO_CAP_NO_SYSCALL  fewer than one system call per 100 pairs (a seccomp
 *                       filter on that thread alone reports each of its
 *                       system calls to a supervisor thread, which counts
 *                       it and lets it continue).
 * Each probe first shows it counts (create's allocations; 100 getppid
 * calls); engines that do not declare the capability print their figure.
 * A declared NO_SYSCALL where no seccomp listener can be installed fails:
 * a declared promise must be checked.  Under TSan system calls are not
 * counted (the test says so): its runtime makes its own on the measured
 * thread, and one made before that thread has published the listener, or
 * while the runtime holds a lock the supervisor's instrumented code needs,
 * never returns.  The release and ASan builds count them.
 *
 * NO_ALLOC must hold however far the engine's loop thread lags: an engine
 * that also declares TMO_CAP_RUN_ON_LOOP has its loop thread held in a
 * function (tmo_testing_run_on_loop) after it started a timer that this
 * thread then cancels (the stop the loop thread owes); PAIRS arm+cancel
 * pairs made meanwhile must not allocate (they reuse the record whose stop
 * is owed), and a last arm made meanwhile fires once the loop is free.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"
#include "engine_test.h"

#define PAIRS 10000

static _Thread_local long thread_allocs;

static int count_allocs(enum tmo_fault_kind kind, void *ctx)
{
	(void)ctx;
	thread_allocs += kind == TMO_FAULT_ALLOC;
	return 0;
}

struct probe {
	struct tmo *e;
	atomic_int fd;        /* the filter's listener; -1 before, -2 none */
	atomic_int measured;  /* the measured thread has ended */
	atomic_long syscalls; /* counted by the supervisor */
	long allocs, probe_calls, calls, bad;
	int sc_errno; /* why no filter (0: it was installed) */
	int tsan;     /* not installed: a TSan build */
};

/* The timer's group total (et_counted_init): each pair's cancel must prevent its fire. */
static atomic_llong fired_total;

static long run_pairs(struct tmo *e, struct et_counted *c, long n)
{
	long bad = 0;
	for (long i = 0; i < n; i++)
		bad += tmo_arm(e, &c->t, TMO_NSEC_PER_SEC, et_counted_cb, c) != 0 ||
		       tmo_cancel(e, &c->t) != TMO_CANCEL_PREVENTED;
	return bad;
}

/* Every system call of the thread that installs it goes to the listener. */
static int install_filter(void)
{
	static struct sock_filter all[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF)};
	struct sock_fprog prog = {.len = 1, .filter = all};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
	                    SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
}

static void *measured(void *arg)
{
	struct probe *p = arg;
	struct et_counted r;
	et_counted_init(&r, 1, &fired_total);
	p->bad = run_pairs(p->e, &r, PAIRS); /* warm-up: the thread's first arms */
	long a0 = thread_allocs;
	p->bad += run_pairs(p->e, &r, PAIRS);
	p->allocs = thread_allocs - a0;
#ifdef TMO__UNDER_TSAN
	p->tsan = 1;
	atomic_store(&p->fd, -2);
	return NULL;
#endif
	int fd = install_filter();
	p->sc_errno = fd < 0 ? errno : 0;
	atomic_store(&p->fd, fd < 0 ? -2 : fd);
	if (fd < 0)
		return NULL;
	long s0 = atomic_load(&p->syscalls);
	for (int i = 0; i < 100; i++)
		syscall(SYS_getppid);
	long s1 = atomic_load(&p->syscalls);
	p->bad += run_pairs(p->e, &r, PAIRS);
	p->probe_calls = s1 - s0;
	p->calls = atomic_load(&p->syscalls) - s1;
	return NULL; /* its last system calls still go through the supervisor */
}

/* Counts the measured thread's system calls and lets each continue, until
 * that thread has ended. */
static void *supervise(void *arg)
{
	struct probe *p = arg;
	int fd;
	while ((fd = atomic_load(&p->fd)) == -1)
		sched_yield();
	while (fd >= 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int n = poll(&pfd, 1, 10);
		if (n == 0 && atomic_load(&p->measured))
			break;
		if (n <= 0 || !(pfd.revents & POLLIN)) {
			if (pfd.revents & (POLLHUP | POLLERR))
				break; /* no thread uses the filter any more */
			continue;
		}
		struct seccomp_notif req;
		memset(&req, 0, sizeof req);
		if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0)
			continue;
		atomic_fetch_add(&p->syscalls, 1);
		struct seccomp_notif_resp resp = {.id = req.id,
		                                  .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
		ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void check_caps(void)
{
	struct probe p = {.fd = -1};
	thread_allocs = 0;
	tmo_testing_set_fault(count_allocs, NULL);
	int rc = tmo_create_ops(et_ops, NULL, &p.e);
	CHECK_EQ(rc, 0);
	if (rc != 0)
		return;
	long create_allocs = thread_allocs;
	pthread_t sup, m;
	CHECK_EQ(pthread_create(&sup, NULL, supervise, &p), 0);
	CHECK_EQ(pthread_create(&m, NULL, measured, &p), 0);
	pthread_join(m, NULL);
	atomic_store(&p.measured, 1);
	pthread_join(sup, NULL);
	tmo_testing_set_fault(NULL, NULL);
	CHECK_EQ(tmo_destroy(&p.e), 0);
	int no_alloc = (et_ops->caps & TMO_CAP_NO_ALLOC) != 0;
	int no_sys = (et_ops->caps & TMO_CAP_NO_SYSCALL) != 0;
	printf("caps: create made %ld allocations; %d arm+cancel pairs made %ld (%s)\n",
	       create_allocs, PAIRS, p.allocs, no_alloc ? "declares no-alloc" : "not declared");
	CHECK(create_allocs > 0); /* the probe sees the library's allocations */
	CHECK_EQ(p.bad, 0);
	if (no_alloc)
		CHECK_EQ(p.allocs, 0);
	if (p.tsan) {
		printf("caps: TSan build: system calls not counted (the release and ASan builds "
		       "count them)\n");
		return;
	}
	if (p.sc_errno != 0) {
		printf("caps: no seccomp listener here (%s): system calls not counted\n",
		       strerror(p.sc_errno));
		CHECK(!no_sys); /* a declared promise must be checked */
		return;
	}
	printf("caps: 100 getppid counted %ld system calls; %d pairs made %ld (%s)\n",
	       p.probe_calls, PAIRS, p.calls, no_sys ? "declares no-syscall" : "not declared");
	CHECK(p.probe_calls >= 100); /* the probe sees the thread's system calls */
	if (no_sys)
		CHECK(p.calls * 100 < PAIRS);
}

static atomic_llong lag_fired;
static struct et_gate lag_gate;

/* The loop thread, held at the kit's gate (et_gate_cb) until it opens. */
static void hold_loop(void *arg) { et_gate_cb(NULL, arg); }

static void *lag_holder(void *arg)
{
	CHECK_EQ(tmo_testing_run_on_loop(arg, hold_loop, &lag_gate), 0);
	return NULL;
}

static void nothing(void *arg) { (void)arg; }

static void check_lagging_loop(void)
{
	if (!(et_ops->caps & TMO_CAP_NO_ALLOC) || !(et_ops->caps & TMO_CAP_RUN_ON_LOOP))
		return;
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create_ops(et_ops, NULL, &e), 0);
	if (e == NULL)
		return;
	struct et_counted r;
	et_counted_init(&r, 1, &lag_fired);
	CHECK_EQ(tmo_arm(e, &r.t, 60 * TMO_NSEC_PER_SEC, et_counted_cb, &r), 0);
	/* The loop thread takes in the arm before it runs a function. */
	CHECK_EQ(tmo_testing_run_on_loop(e, nothing, NULL), 0);
	pthread_t h;
	CHECK_EQ(pthread_create(&h, NULL, lag_holder, e), 0);
	while (!atomic_load(&lag_gate.in))
		sched_yield();
	CHECK_EQ(tmo_cancel(e, &r.t), TMO_CANCEL_PREVENTED); /* its stop is owed */
	thread_allocs = 0;
	tmo_testing_set_fault(count_allocs, NULL);
	long bad = run_pairs(e, &r, PAIRS);
	long allocs = thread_allocs;
	tmo_testing_set_fault(NULL, NULL);
	CHECK_EQ(tmo_arm(e, &r.t, TMO_NSEC_PER_MSEC, et_counted_cb, &r), 0);
	atomic_store(&lag_gate.open, 1);
	pthread_join(h, NULL);
	CHECK(et_wait_ge(&lag_fired, 1, 30 * TMO_NSEC_PER_SEC));
	CHECK_EQ(tmo_destroy(&e), 0);
	printf("caps: loop thread held with a stop owed: %d arm+cancel pairs made %ld "
	       "allocations; the last arm fired %lld time(s)\n",
	       PAIRS, allocs, atomic_load(&lag_fired));
	CHECK_EQ(bad, 0);
	CHECK_EQ(allocs, 0);
	CHECK_EQ(atomic_load(&lag_fired), 1);
}

int main(int argc, char **argv)
{
	et_init(argc, argv, "engine_caps");
	et_raise_sigpending(); /* the kernel-timer quota (posix) as high as allowed */
	check_caps();
	check_lagging_loop();
	return TEST_EXIT();
}
