/*
 * Bad input, through the public entry points, on one engine:
 * `test_engine_badinput ENGINE`.  Each row feeds one bad input and expects
 * its NAMED error (enum tmo_error), and that nothing crashed or changed:
 * after a rejected call the engine and the timer still behave.  A few valid
 * boundary rows (TMO_TIMEOUT_MAX is accepted) guard against rejecting too
 * much.
 *
 * Misuse gets its named error too: destroy and park from the engine's own
 * callback (TMO_EDEADLK), and every call on an engine inherited across
 * fork() (TMO_EFORKED, computed in the child and sent back through a pipe).
 *
 * Prints the table twice: aligned text, and markdown after the marker line
 * "<!-- tmo badinput table: ENGINE -->" (for the README).
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define LONG_TIMEOUT (60 * TMO_NSEC_PER_SEC)

struct row {
	const char *input;
	int expected, got;
};
static struct row rows[64];
static int nrows;

/* Cancel results share 0..3 with success: rows whose input is a cancel
 * print them as cancel results. */
static const char *code_name(const char *input, int rc)
{
	if (rc >= 0 && strncmp(input, "cancel", 6) == 0)
		return et_result_name(rc) /* "PREVENTED" */;
	return rc == 0 ? "TMO_OK" : tmo_errname(rc);
}

static void row(const char *input, int expected, int got)
{
	if (nrows < (int)(sizeof rows / sizeof rows[0]))
		rows[nrows++] = (struct row){input, expected, got};
	if (expected != got) {
		fprintf(stderr, "badinput: %s: expected %s, got %s (%d)\n", input,
		        code_name(input, expected), code_name(input, got), got);
		tmo_test_failures++;
	}
}

static atomic_int fires;
static void cb(struct tmo_timer *t, void *arg) { atomic_fetch_add(&fires, 1); }

static struct tmo *make(void)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(et_ops, NULL, &e);
	CHECK_EQ(rc, 0);
	return e;
}

static void bad_timeouts(struct tmo *e)
{
	struct tmo_timer t = TMO_TIMER_INIT;
	row("arm, timeout -1", TMO_EBADTIMEOUT, tmo_arm(e, &t, -1, cb, NULL));
	row("arm, timeout INT64_MIN", TMO_EBADTIMEOUT, tmo_arm(e, &t, INT64_MIN, cb, NULL));
	row("arm, timeout TMO_TIMEOUT_MAX + 1", TMO_EBADTIMEOUT,
	    tmo_arm(e, &t, TMO_TIMEOUT_MAX + 1, cb, NULL));
	row("arm, timeout INT64_MAX", TMO_EBADTIMEOUT, tmo_arm(e, &t, INT64_MAX, cb, NULL));
	/* a rejected arm leaves the timer idle */
	row("cancel after a rejected arm", TMO_ENOTARMED, tmo_cancel(e, &t));
	/* the boundary itself is valid (deadline math must not overflow) */
	row("arm, timeout TMO_TIMEOUT_MAX (valid)", TMO_OK,
	    tmo_arm(e, &t, TMO_TIMEOUT_MAX, cb, NULL));
	row("cancel of that arm (valid)", TMO_CANCEL_PREVENTED, tmo_cancel(e, &t));
}

static void bad_pointers(struct tmo *e)
{
	struct tmo_timer t = TMO_TIMER_INIT;
	row("arm, NULL callback", TMO_ENULLCB, tmo_arm(e, &t, MS, NULL, NULL));
	row("arm, NULL timer", TMO_ENULLTIMER, tmo_arm(e, NULL, MS, cb, NULL));
	row("cancel, NULL timer", TMO_ENULLTIMER, tmo_cancel(e, NULL));
	row("arm, NULL engine", TMO_ENULLENGINE, tmo_arm(NULL, &t, MS, cb, NULL));
	row("cancel, NULL engine", TMO_ENULLENGINE, tmo_cancel(NULL, &t));
	row("stats, NULL engine", TMO_ENULLENGINE, tmo_stats(NULL, &(struct tmo_stats){0}));
	row("stats, NULL output", TMO_EINVAL, tmo_stats(e, NULL));
	row("park, NULL engine", TMO_ENULLENGINE, tmo_testing_park(NULL, 1));
	row("cancel of a never-armed timer", TMO_ENOTARMED, tmo_cancel(e, &t));
	/* after all of that the timer still works */
	row("arm after the rejections (valid)", TMO_OK, tmo_arm(e, &t, LONG_TIMEOUT, cb, NULL));
	row("cancel of that arm (valid)", TMO_CANCEL_PREVENTED, tmo_cancel(e, &t));
}

/* Timers handed to engines here outlive them (static), so a misbehaving
 * engine cannot turn a failed row into a use of a dead stack frame. */
static struct tmo_timer mt1, mt2;

static void misuse(struct tmo *a, struct tmo *b)
{
	struct tmo_timer *t = &mt1;
	CHECK_EQ(tmo_arm(a, t, LONG_TIMEOUT, cb, NULL), 0);
	row("arm of an armed timer (double arm)", TMO_EARMED, tmo_arm(a, t, MS, cb, NULL));
	row("cancel via engine B of a timer armed on A", TMO_EWRONGENGINE, tmo_cancel(b, t));
	/* the rejected calls did not disturb the original arm */
	row("cancel via engine A after those (valid)", TMO_CANCEL_PREVENTED, tmo_cancel(a, t));
	row("cancel twice (second)", TMO_ENOTARMED, tmo_cancel(a, t));
	/* A timer belongs to the engine of its first arm (tmo.h): arming it on
	 * another engine is refused whether the first arm is pending or not, so
	 * one timer is never in two engines. */
	CHECK_EQ(tmo_arm(a, t, LONG_TIMEOUT, cb, NULL), 0);
	row("arm on engine B of a timer pending on A", TMO_EWRONGENGINE,
	    tmo_arm(b, t, LONG_TIMEOUT, cb, NULL));
	row("cancel via engine A after that (valid)", TMO_CANCEL_PREVENTED, tmo_cancel(a, t));

	/* after a fire and its resolution, the timer is idle again */
	t = &mt2;
	atomic_store(&fires, 0);
	CHECK_EQ(tmo_arm(a, t, 0, cb, NULL), 0);
	ET_WAIT_UNTIL(atomic_load(&fires) != 0, 3 * TMO_NSEC_PER_SEC);
	int rc = tmo_cancel(a, t);
	CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED);
	row("arm on engine B after the fire on A, without re-init", TMO_EWRONGENGINE,
	    tmo_arm(b, t, LONG_TIMEOUT, cb, NULL));
	row("cancel via engine B of the timer fired on A", TMO_EWRONGENGINE, tmo_cancel(b, t));
	tmo_timer_init(t);
	row("arm on engine B after tmo_timer_init (valid)", TMO_OK,
	    tmo_arm(b, t, LONG_TIMEOUT, cb, NULL));
	row("cancel via engine A of the timer now armed on B", TMO_EWRONGENGINE,
	    tmo_cancel(a, t));
	row("cancel via engine B (valid)", TMO_CANCEL_PREVENTED, tmo_cancel(b, t));
}

/* Destroy and park from inside the engine's own callback. */
static struct {
	struct tmo *e;
	int rc_destroy, rc_park;
	atomic_llong done;
} cbm;

static void misuse_cb(struct tmo_timer *t, void *arg)
{
	struct tmo *self = cbm.e;
	cbm.rc_destroy = tmo_destroy(&self);
	cbm.rc_park = tmo_testing_park(cbm.e, 1);
	atomic_store(&cbm.done, 1);
}

static struct tmo_timer mt3, mt4;

static void from_callback(struct tmo *a)
{
	cbm.e = a;
	cbm.rc_destroy = cbm.rc_park = 100;
	CHECK_EQ(tmo_arm(a, &mt3, 0, misuse_cb, NULL), 0);
	CHECK(et_wait_ge(&cbm.done, 1, 5 * TMO_NSEC_PER_SEC));
	row("destroy from inside the engine's own callback", TMO_EDEADLK, cbm.rc_destroy);
	row("park from inside the engine's own callback", TMO_EDEADLK, cbm.rc_park);
	int rc = tmo_cancel(a, &mt3);
	CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED);
	/* the engine is still usable */
	row("arm after those (valid)", TMO_OK, tmo_arm(a, &mt3, LONG_TIMEOUT, cb, NULL));
	row("cancel of that arm (valid)", TMO_CANCEL_PREVENTED, tmo_cancel(a, &mt3));
}

/* Every call on an engine inherited across fork(), made in the child. */
static void forked_child(struct tmo *a)
{
	enum { N = 6 };
	static const char *const what[N] = {
		"arm in a child process (engine inherited across fork)",
		"cancel in a child process of a timer pending at fork",
		"stats in a child process",
		"park in a child process",
		"arm of the pending timer in a child process",
		"destroy in a child process (valid: frees the child's copy)",
	};
	static const int expect[N] = {TMO_EFORKED, TMO_EFORKED, TMO_EFORKED,
	                              TMO_EFORKED, TMO_EFORKED, TMO_OK};
	int got[N];
	for (int i = 0; i < N; i++)
		got[i] = 100; /* "no answer": the child died or hung */
	CHECK_EQ(tmo_arm(a, &mt4, LONG_TIMEOUT, cb, NULL), 0);
	int p[2];
	CHECK_EQ(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct tmo_timer fresh = TMO_TIMER_INIT;
		struct tmo_stats st;
		struct tmo *c = a;
		int rc[N];
		rc[0] = tmo_arm(a, &fresh, MS, cb, NULL);
		rc[1] = tmo_cancel(a, &mt4);
		rc[2] = tmo_stats(a, &st);
		rc[3] = tmo_testing_park(a, 1);
		rc[4] = tmo_arm(a, &mt4, MS, cb, NULL);
		rc[5] = tmo_destroy(&c);
		_exit(write(p[1], rc, sizeof rc) == (ssize_t)sizeof rc ? 0 : 1);
	}
	close(p[1]);
	int status = 0;
	if (pid > 0 && !et_wait_child(pid, 10 * TMO_NSEC_PER_SEC, &status))
		fprintf(stderr, "badinput: the forked child did not finish (killed)\n");
	if (read(p[0], got, sizeof got) != (ssize_t)sizeof got)
		fprintf(stderr, "badinput: no answer from the forked child\n");
	close(p[0]);
	for (int i = 0; i < N; i++)
		row(what[i], expect[i], got[i]);
	/* the parent's engine, timer and pending arm are untouched */
	row("cancel in the parent of the timer pending at fork (valid)", TMO_CANCEL_PREVENTED,
	    tmo_cancel(a, &mt4));
}

static void lifecycle(void)
{
	struct tmo *e = NULL;
	struct tmo_timer t = TMO_TIMER_INIT;
	row("create, unknown engine name", TMO_ENOENGINE, tmo_create("no-such-engine", NULL, &e));
	CHECK(e == NULL);
	row("create, NULL engine name", TMO_ENOENGINE, tmo_create(NULL, NULL, &e));
	row("create, NULL ops", TMO_ENOENGINE, tmo_create_ops(NULL, NULL, &e));
	row("create, NULL output", TMO_EINVAL, tmo_create_ops(et_ops, NULL, NULL));
	struct tmo_config cfg = {.resolution_ns = -1, .flags = 0};
	row("create, resolution_ns -1", TMO_EINVAL, tmo_create_ops(et_ops, &cfg, &e));
	CHECK(e == NULL);
	cfg = (struct tmo_config){.resolution_ns = INT64_MIN, .flags = 0};
	row("create, resolution_ns INT64_MIN", TMO_EINVAL, tmo_create_ops(et_ops, &cfg, &e));
	cfg = (struct tmo_config){.resolution_ns = TMO_NSEC_PER_SEC + 1, .flags = 0};
	row("create, resolution_ns above 1 s", TMO_EINVAL, tmo_create_ops(et_ops, &cfg, &e));
	cfg = (struct tmo_config){.resolution_ns = 0, .flags = 1};
	row("create, flags 1", TMO_EINVAL, tmo_create_ops(et_ops, &cfg, &e));
	cfg = (struct tmo_config){.resolution_ns = 0, .flags = 0x80000000u};
	row("create, flags 0x80000000", TMO_EINVAL, tmo_create_ops(et_ops, &cfg, &e));
	CHECK(e == NULL);

	row("create with defaults (valid)", TMO_OK, tmo_create_ops(et_ops, NULL, &e));
	row("destroy (valid)", TMO_OK, tmo_destroy(&e));
	CHECK(e == NULL);
	row("arm after destroy (handle was set to NULL)", TMO_ENULLENGINE,
	    tmo_arm(e, &t, MS, cb, NULL));
	row("cancel after destroy", TMO_ENULLENGINE, tmo_cancel(e, &t));
	row("destroy twice", TMO_ENULLENGINE, tmo_destroy(&e));
	row("destroy, NULL handle pointer", TMO_ENULLENGINE, tmo_destroy(NULL));
}

static void print_tables(void)
{
	printf("%-58s %-18s %-18s %s\n", "input", "expected", "got", "ok");
	for (int i = 0; i < nrows; i++)
		printf("%-58s %-18s %-18s %s\n", rows[i].input,
		       code_name(rows[i].input, rows[i].expected), code_name(rows[i].input, rows[i].got), rows[i].expected == rows[i].got ? "ok" : "FAIL");
	printf("\n<!-- tmo badinput table: %s -->\n", et_name);
	printf("| input | expected | got |\n|---|---|---|\n");
	for (int i = 0; i < nrows; i++)
		printf("| %s | `%s` | `%s`%s |\n", rows[i].input,
		       code_name(rows[i].input, rows[i].expected), code_name(rows[i].input, rows[i].got), rows[i].expected == rows[i].got ? "" : " **FAIL**");
	printf("<!-- end tmo badinput table -->\n");
}

static void on_alarm(int sig)
{
	static const char msg[] = "badinput: did not finish in 60 s (a misuse row deadlocked?)\n";
	(void)sig;
	(void)!write(2, msg, sizeof msg - 1);
	_exit(1);
}

int main(int argc, char **argv)
{
	et_init(argc, argv, "engine_badinput");
	signal(SIGALRM, on_alarm);
	alarm(60);
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo *a = make(), *b = make();
	if (a && b) {
		bad_timeouts(a);
		bad_pointers(a);
		misuse(a, b);
		from_callback(a);
		forked_child(a);
		struct tmo_stats st;
		CHECK_EQ(tmo_stats(a, &st), 0);
		CHECK_EQ(st.pending, 0);
		CHECK_EQ(tmo_stats(b, &st), 0);
		CHECK_EQ(st.pending, 0);
	}
	if (a)
		CHECK_EQ(tmo_destroy(&a), 0);
	if (b)
		CHECK_EQ(tmo_destroy(&b), 0);
	lifecycle();
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	CHECK_EQ(atomic_load(&fires), 1); /* only the one deliberate fire */
	print_tables();
	printf("%d rows, %d failures\n", nrows, tmo_test_failures);
	return TEST_EXIT();
}
