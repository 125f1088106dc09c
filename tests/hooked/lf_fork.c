/*
 * Fork (CONTRACT.md "Lifecycle and misuse") while the timer thread is
 * between an allocation and its publication: a child's destroy must free
 * exactly what the engine holds, library allocations back to what they
 * were before the engine was made.  The timer thread's windows are short
 * (trim.c's arrays, fire.c's due arrays' growth) and a fork lands in one
 * rarely (lifecycle_fork/mpsc under ASan, CI run 46: "library allocations
 * 1 after destroy" in the child); here the hook (src/lf/hook.h, mem) holds
 * the timer thread inside one on every run.  The fork's prepare handler
 * (src/lf/rec.c, Fork) must wait for the window to close: when it finds
 * the engine's mem_lock held, its own hook (fork_wait) lets the timer
 * thread go on, and the fork comes after.
 *
 * Each case on mpsc and wheel.
 *  trim  512 timers fire; the timer thread, going to sleep with more free
 *        nodes than it keeps, trims and is held with its arrays allocated.
 *  due   the timer thread parked, 2,000 timers armed due at once; let go,
 *        it grows its due arrays for them and is held with the new ones
 *        allocated, the old not yet freed.
 * In the child: destroy returns 0 and the allocation count is back.  In
 * the parent: the prepare handler found the window open and waited
 * (fork_wait ran), every timer fires, destroy leaves no allocation.
 *
 * Built again with the prepare handler blind to mem_lock planted
 * (TMO_LF_PLANT_FORK_MEM: hooked/lf_fork-planted-mem): the fork copies the
 * window half done, and the child must report what its destroy left.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"
#include "hold.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define TRIM_N 512
#define DUE_N 2000 /* more than the due arrays' first size (tt.h, DUE_FIRST) */

static atomic_int waited; /* fork_wait ran */
static atomic_llong fires;

/* The prepare handler found the window open: the held timer thread goes on. */
static void let_go(struct tmo *e)
{
	(void)e;
	atomic_store(&waited, 1);
	atomic_store(&release, 1);
}

/* Fork with the timer thread held in its window; the child destroys its
 * copy and compares the allocation count with live0. */
static void fork_in_window(const char *what, struct tmo *e, int64_t live0)
{
	atomic_store(&waited, 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid < 0)
		return;
	if (pid == 0) {
		int bad = 0;
		if (tmo_destroy(&e) != 0) {
			fprintf(stderr, "lf_fork/%s: the child's destroy failed\n", what);
			bad = 1;
		}
		int64_t live = tmo_testing_live_allocs();
		if (live != live0) {
			fprintf(stderr, "lf_fork/%s: the child's destroy left %lld library allocations, "
			        "%lld before the engine was made\n", what, (long long)live,
			        (long long)live0);
			bad = 1;
		}
		fflush(NULL);
		_exit(bad);
	}
	atomic_store(&release, 1); /* planted: the fork did not wait */
	int status = 0;
	int exited = et_wait_child(pid, WAIT, &status);
	CHECK(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!atomic_load(&waited))
		fprintf(stderr, "lf_fork/%s: the fork did not wait for the timer thread's window\n",
		        what);
	CHECK(atomic_load(&waited));
}

static void one(const char *engine, int due)
{
	char what[32];
	snprintf(what, sizeof what, "%s/%s", due ? "due" : "trim", engine);
	int n = due ? DUE_N : TRIM_N;
	static struct tmo_timer t[DUE_N];
	hold_reset();
	atomic_store(&fires, 0);
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(engine, NULL, &e), 0);
	if (e == NULL)
		return;
	if (due)
		CHECK_EQ(tmo_testing_park(e, 1), 0);
	atomic_store(&hold, HOLD_MEM);
	for (int i = 0; i < n; i++) {
		tmo_timer_init(&t[i]);
		CHECK_EQ(tmo_arm(e, &t[i], 0, et_count_cb, &fires), 0);
	}
	if (due)
		CHECK_EQ(tmo_testing_park(e, 0), 0);
	int in = ET_WAIT_UNTIL(atomic_load(&held), WAIT);
	if (!in)
		fprintf(stderr, "lf_fork/%s: the timer thread never came to its window\n", what);
	CHECK(in);
	if (in)
		fork_in_window(what, e, live0);
	atomic_store(&release, 1);
	CHECK(et_wait_ge(&fires, n, WAIT));
	CHECK_EQ(tmo_destroy(&e), 0);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

static void trim(void)
{
	one("mpsc", 0);
	one("wheel", 0);
}

static void due(void)
{
	one("mpsc", 1);
	one("wheel", 1);
}

int main(void)
{
	atomic_store(&tmo__lf_hook_mem, hold_mem);
	atomic_store(&tmo__lf_hook_fork_wait, let_go);
	RUN(trim);
	RUN(due);
	return TEST_EXIT();
}
