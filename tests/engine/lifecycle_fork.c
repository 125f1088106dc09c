/*
 * Fork (CONTRACT.md "Lifecycle and misuse"), on one engine:
 * `test_engine_lifecycle_fork ENGINE [CASE]` (main's start and the skip on a
 * shortage: lifecycle.h; each case's watchdog: cases.h).  One case per item:
 *
 *  fork            in a child, the inherited engine answers TMO_EFORKED to
 *                  arm, cancel, stats and park; tmo_destroy returns 0 and
 *                  frees the child's copy (library allocations and
 *                  descriptors back to what they were before the engine was
 *                  created); the parent's engine still fires its next timer
 *                  and destroys cleanly (a child that touched a shared epoll
 *                  set or the parent's kernel timers would stop it).
 *  fork_busy       the same while callbacks run on the engine's thread.
 *  fork_in_callback  a callback forks: in the child, the engine's thread
 *                  ends when the callback returns (the child exits 0) and
 *                  runs no other callback there.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "lifecycle.h"

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- fork ---------------------------------------------------------------------- */

/* Everything the child checks; it reports each failure on stderr and exits 1. */
static int child_checks(struct tmo *e, struct tmo_timer *pending, struct tmo_timer *fired,
                        int64_t live0, int fds0)
{
	int bad = 0;
	struct tmo_timer fresh = TMO_TIMER_INIT;
	struct tmo_stats st;
#define CHILD_EXPECT(call, want)                                                           \
	do {                                                                                   \
		int rc_ = (call);                                                              \
		if (rc_ != (want)) {                                                           \
			fprintf(stderr, "  child: %s -> %s, expected %s\n", #call,             \
			        et_result_name(rc_), et_result_name(want));                   \
			bad++;                                                                 \
		}                                                                              \
	} while (0)
	CHILD_EXPECT(tmo_arm(e, &fresh, 0, count_cb, NULL), TMO_EFORKED);
	CHILD_EXPECT(tmo_arm(e, pending, 0, count_cb, NULL), TMO_EFORKED);
	CHILD_EXPECT(tmo_cancel(e, pending), TMO_EFORKED);
	CHILD_EXPECT(tmo_cancel(e, fired), TMO_EFORKED);
	CHILD_EXPECT(tmo_cancel(e, &fresh), TMO_EFORKED);
	CHILD_EXPECT(tmo_stats(e, &st), TMO_EFORKED);
	CHILD_EXPECT(tmo_testing_park(e, 1), TMO_EFORKED);
	CHILD_EXPECT(tmo_testing_park(e, 0), TMO_EFORKED);
	CHILD_EXPECT(tmo_destroy(&e), 0);
	if (e != NULL) {
		fprintf(stderr, "  child: tmo_destroy left the handle set\n");
		bad++;
	}
	int64_t live = tmo_testing_live_allocs();
	if (live0 >= 0 && live != live0) {
		fprintf(stderr, "  child: library allocations %lld after destroy, %lld before the "
		        "engine was created: the child's copy was not freed\n",
		        (long long)live, (long long)live0);
		bad++;
	}
	int fds = fd_count();
	if (fds0 >= 0 && fds != fds0) {
		fprintf(stderr, "  child: %d descriptors after destroy, %d before the engine was "
		        "created\n", fds, fds0);
		bad++;
	}
#undef CHILD_EXPECT
	return bad;
}

static atomic_llong fk_fired, fk_pending_fired, fk_after, fk_busy;

/* Fork with `e` in the state the caller left it; run the child's checks,
 * then check the parent's engine: its pending timer is still cancellable,
 * a new timer fires, destroy is clean.  live0 < 0: skip the child's
 * allocation check (allocations made while the engine ran). */
static void fork_and_check(struct tmo *e, struct tmo_timer *pending, struct tmo_timer *fired,
                           int64_t live0, int fds0)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid < 0)
		return;
	if (pid == 0)
		_exit(child_checks(e, pending, fired, live0, fds0) == 0 ? 0 : 1);
	int status = 0;
	int exited = et_wait_child(pid, LIVENESS, &status);
	if (!exited)
		fprintf(stderr, "  fork: the child did not finish in %lld s (killed)\n",
		        (long long)(LIVENESS / SEC));
	CHECK(exited);
	CHECK(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* The parent's engine: a new, earlier deadline wakes its thread (libevent:
	 * through the notify descriptor in the epoll set the child shared). */
	static struct tmo_timer after;
	tmo_timer_init(&after);
	long long before = atomic_load(&fk_after);
	CHECK_EQ(arm(e, &after, MS, count_cb, &fk_after), 0);
	CHECK(et_wait_ge(&fk_after, before + 1, LIVENESS));
	CHECK(is_resolved(tmo_cancel(e, &after)));
	CHECK_EQ(tmo_cancel(e, pending), TMO_CANCEL_PREVENTED);
	CHECK_EQ(atomic_load(&fk_pending_fired), 0);
}

static void test_fork(void)
{
	CHECK_EQ(et_warm_up(), 0);
	int threads0 = et_thread_count();
	int fds0 = fd_count();
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo *e = new_engine();
	if (e == NULL)
		return;
	static struct tmo_timer pending, fired;
	tmo_timer_init(&pending);
	tmo_timer_init(&fired);
	CHECK_EQ(arm(e, &fired, 0, count_cb, &fk_fired), 0);
	CHECK(et_wait_ge(&fk_fired, 1, LIVENESS));
	CHECK(is_resolved(tmo_cancel(e, &fired)));
	CHECK_EQ(arm(e, &pending, 60 * SEC, count_cb, &fk_pending_fired), 0);
	fork_and_check(e, &pending, &fired, live0, fds0);
	/* twice: the first child changed nothing the second depends on */
	CHECK_EQ(arm(e, &pending, 60 * SEC, count_cb, &fk_pending_fired), 0);
	fork_and_check(e, &pending, &fired, live0, fds0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.fired, 3); /* fired, and `after` once per fork */
	CHECK_EQ(tmo_destroy(&e), 0);
	CHECK_EQ(et_wait_thread_count(threads0, LIVENESS), threads0);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	CHECK_EQ(fd_count(), fds0);
}

static void busy_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	et_spin_ns(200 * TMO_NSEC_PER_USEC);
	atomic_fetch_add(&fk_busy, 1);
}

/* Fork while the engine's thread runs callbacks and holds whatever it holds
 * between them: the child must not hang on a lock that thread held, and the
 * parent loses nothing. */
static void test_fork_busy(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 50 : 400, 100);
	struct tmo_timer *t = calloc((size_t)n, sizeof *t);
	static struct tmo_timer pending, fired;
	tmo_timer_init(&pending);
	tmo_timer_init(&fired);
	struct tmo *e = new_engine();
	if (e == NULL || t == NULL)
		return;
	atomic_store(&fk_busy, 0);
	CHECK_EQ(arm(e, &pending, 60 * SEC, count_cb, &fk_pending_fired), 0);
	for (int i = 0; i < n; i++)
		CHECK_EQ(arm(e, &t[i], (i % 20) * 100 * TMO_NSEC_PER_USEC, busy_cb, NULL), 0);
	/* Fork once the storm has begun, and again while it lasts (up to 3). */
	CHECK(et_wait_ge(&fk_busy, 1, LIVENESS));
	int forks = 0;
	do {
		fork_and_check(e, &pending, &fired, -1, -1);
		CHECK_EQ(arm(e, &pending, 60 * SEC, count_cb, &fk_pending_fired), 0);
		forks++;
	} while (atomic_load(&fk_busy) < n && forks < 3);
	CHECK(et_wait_ge(&fk_busy, n, LIVENESS));
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += !is_resolved(tmo_cancel(e, &t[i]));
	CHECK_EQ(bad, 0);
	CHECK_EQ(atomic_load(&fk_busy), n); /* every timer fired once in the parent */
	CHECK_EQ(tmo_cancel(e, &pending), TMO_CANCEL_PREVENTED);
	printf("  fork-busy: %d forks while %d callbacks ran\n", forks, n);
	CHECK_EQ(tmo_destroy(&e), 0);
	free(t);
}

/* A callback that forks.  In the child it returns into the engine's thread,
 * which is all the child has: that thread must end (the child exits 0), not
 * go on running the inherited engine's loop (firing copies of the parent's
 * timers, reading descriptors the parent shares). */
static pid_t fic_parent, fic_child;
static atomic_int fic_forked;
static int fic_pipe[2] = {-1, -1};

static void fic_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		return; /* the child: back into the engine's thread */
	fic_child = pid;
	atomic_store(&fic_forked, 1);
}

static void fic_later_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	if (getpid() != fic_parent) {
		char c = 'x'; /* ran in the child */
		(void)!write(fic_pipe[1], &c, 1);
	}
	atomic_fetch_add((atomic_llong *)arg, 1);
}

static void test_fork_in_callback(void)
{
	static atomic_llong later_fired;
	static struct tmo_timer forker, later;
	tmo_timer_init(&forker);
	tmo_timer_init(&later);
	atomic_store(&later_fired, 0);
	fic_parent = getpid();
	CHECK_EQ(pipe2(fic_pipe, O_CLOEXEC | O_NONBLOCK), 0);
	struct tmo *e = new_engine();
	if (e == NULL)
		return;
	CHECK_EQ(arm(e, &forker, 0, fic_cb, NULL), 0);
	/* Due while the child would still be running the engine's loop. */
	CHECK_EQ(arm(e, &later, 30 * MS, fic_later_cb, &later_fired), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&fic_forked), LIVENESS));
	if (atomic_load(&fic_forked)) {
		int status = 0;
		int exited = et_wait_child(fic_child, LIVENESS, &status);
		if (!exited)
			fprintf(stderr, "  fork-in-callback: the child was still running after %lld s "
			        "(its copy of the engine's thread went on; killed)\n",
			        (long long)(LIVENESS / SEC));
		CHECK(exited);
		CHECK(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK(et_wait_ge(&later_fired, 1, LIVENESS));
	CHECK(is_resolved(tmo_cancel(e, &later)));
	char c;
	CHECK_EQ(read(fic_pipe[0], &c, 1), -1); /* no callback ran in the child */
	CHECK(is_resolved(tmo_cancel(e, &forker)));
	CHECK_EQ(tmo_destroy(&e), 0);
	close(fic_pipe[0]);
	close(fic_pipe[1]);
}

int main(int argc, char **argv)
{
	lifecycle_begin(argc, argv, "engine_lifecycle_fork");
	et_case_watchdog(60);
	RUN(test_fork);
	RUN(test_fork_busy);
	RUN(test_fork_in_callback);
	return TEST_EXIT();
}
