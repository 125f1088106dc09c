#include "cases.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h" /* tmo__cond_init_monotonic */

static const char *only;       /* et_cases_from_args: NULL, every case */
static int watchdog_s;         /* et_case_watchdog: 0, none */
static const char *volatile now = "?";

/* The watchdog is a thread of its own, not an alarm: ThreadSanitizer
 * defers a signal's handler while the thread it lands on blocks in an
 * intercepted call (a mutex lock), so under TSan an alarm never fired on
 * the deadlock it was there for.  Under wd.mu: the case it watches (NULL:
 * none) and when that case must have returned (CLOCK_MONOTONIC). */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *name;
	struct timespec deadline;
	int seconds; /* the watch's length, for the message */
	int started;
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void *watchdog_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd.mu);
	for (;;) {
		if (wd.name == NULL) {
			pthread_cond_wait(&wd.cv, &wd.mu);
			continue;
		}
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (before(&t, &wd.deadline)) {
			struct timespec dl = wd.deadline;
			pthread_cond_timedwait(&wd.cv, &wd.mu, &dl);
			continue; /* re-read: the case may have returned, another begun */
		}
		char msg[200];
		int n = snprintf(msg, sizeof msg, "case %s did not finish in %d s (a deadlock?)\n",
		                 wd.name, wd.seconds);
		if (n > 0)
			(void)!write(2, msg, (size_t)n);
		_exit(1);
	}
	return NULL;
}

void et_case_watchdog(int seconds)
{
	watchdog_s = seconds > 0 ? seconds : 0;
	if (watchdog_s == 0 || wd.started)
		return;
	pthread_t th;
	/* pthread_create returns its error; it does not set errno */
	int rc = tmo__cond_init_monotonic(&wd.cv) != 0 ? -1
	                                                : pthread_create(&th, NULL, watchdog_main, NULL);
	if (rc != 0) {
		fprintf(stderr, "et_case_watchdog: cannot start the watchdog thread: %s\n",
		        rc > 0 ? strerror(rc) : "no CLOCK_MONOTONIC condition variable");
		_exit(1);
	}
	pthread_detach(th);
	wd.started = 1;
}

/* Watch case `name` for watchdog_s seconds from now; NULL: stop watching.
 * Only while watchdog_s > 0, so the thread has started. */
static void watch(const char *name)
{
	pthread_mutex_lock(&wd.mu);
	wd.name = name;
	wd.seconds = watchdog_s;
	clock_gettime(CLOCK_MONOTONIC, &wd.deadline);
	wd.deadline.tv_sec += watchdog_s;
	pthread_cond_signal(&wd.cv);
	pthread_mutex_unlock(&wd.mu);
}

void et_cases_from_args(int argc, char **argv) { only = argc > 2 ? argv[2] : NULL; }

const char *et_case_now(void) { return now; }

void et_run_case(const char *name, void (*fn)(void))
{
	if (only != NULL && strstr(name, only) == NULL)
		return;
	now = name;
	if (watchdog_s)
		watch(name);
	int failures = tmo_test_failures;
	fn();
	if (watchdog_s)
		watch(NULL);
	now = "?";
	printf("%s %s\n", tmo_test_failures == failures ? "PASS" : "FAIL", name);
	fflush(stdout);
}
