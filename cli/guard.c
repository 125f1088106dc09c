/* The guards that keep a run's results (see cli.h): the watchdog, the
 * signal thread, standard output that must not be lost. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* A hung engine must fail the run (and CI) with a message, not hang it. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *scenario, *engine;
	int64_t deadline; /* 0: no run in progress */
	int quit;
} dog = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0};

static void *watchdog_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&dog.mu);
	while (!dog.quit) {
		if (dog.deadline != 0 && tmo_now_ns() >= dog.deadline) {
			fprintf(stderr,
			        "\ntmo-harness: [%s/%s] still running after the watchdog's limit: aborting "
			        "(a hung engine or scenario)\n",
			        dog.scenario, dog.engine);
			fflush(stdout);
			_exit(1);
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&dog.cv, &dog.mu, &ts);
	}
	pthread_mutex_unlock(&dog.mu);
	return NULL;
}

void cli_watchdog_arm(const char *scenario, const char *engine, int64_t limit_ns)
{
	pthread_mutex_lock(&dog.mu);
	dog.scenario = scenario;
	dog.engine = engine;
	dog.deadline = limit_ns ? tmo_now_ns() + limit_ns : 0;
	pthread_mutex_unlock(&dog.mu);
}

/* ---- output that must not be lost -------------------------------------------------- */


/* Standard output was closed when the harness started (fd 1 now holds
 * /dev/null, so no file the harness opens can take its place). */
static int stdout_closed;

void cli_hold_standard_fds(void)
{
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
			int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
			if (got != fd && got >= 0)
				close(got);
			if (fd == 1)
				stdout_closed = 1;
		}
}

/* The exit status once everything is printed: `rc`, or 1 when standard
 * output could not take it all (a full disk, a closed stdout): results
 * that were not written are lost results, never a silent 0. */
int cli_finish_output(int rc)
{
	errno = 0;
	int err = fflush(stdout) != 0 || ferror(stdout);
	int e = errno;
	if (err && e == 0) {
		/* The write that failed is gone with its errno: one more byte
		 * (a newline on a stream that already lost text) says why. */
		clearerr(stdout);
		if (fputc('\n', stdout) == EOF || fflush(stdout) != 0)
			e = errno;
	}
	/* Output lost is a failure, also of runs that were all skipped. */
	int lost = rc > 1 && rc != EXIT_ALL_SKIPPED ? rc : 1;
	if (stdout_closed) {
		fprintf(stderr, "tmo-harness: standard output is closed: nothing printed reached it\n");
		return lost;
	}
	if (err) {
		fprintf(stderr, "tmo-harness: write error on standard output%s%s\n", e ? ": " : "",
		        e ? strerror(e) : "");
		return lost;
	}
	return rc;
}

/* SIGINT and SIGTERM are blocked in every thread and taken by one thread
 * (sigwait), which writes what finished with "complete": false and exits
 * 128 + the signal (130, 143); 1 if that write failed.  Once the final
 * results are written (finish.rep NULL) it only exits.  A second signal
 * during the write kills the process at once (default action). */
static struct {
	pthread_mutex_t mu;
	struct sk_sink *rep;
	const char *json;
	sigset_t set;
} finish = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *signal_main(void *arg)
{
	(void)arg;
	int sig;
	if (sigwait(&finish.set, &sig) != 0)
		return NULL;
	pthread_sigmask(SIG_UNBLOCK, &finish.set, NULL);
	const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
	int status = 128 + sig;
	pthread_mutex_lock(&finish.mu);
	fflush(stdout);
	if (finish.rep != NULL && finish.json != NULL) {
		fprintf(stderr,
		        "\ntmo-harness: %s: writing the %zu finished runs to %s (\"complete\": false)\n",
		        name, sk_sink_runs_done(finish.rep), finish.json);
		if (sk_sink_write_interrupted(finish.rep, name) != 0)
			status = 1;
	} else {
		fprintf(stderr, "\ntmo-harness: %s: stopped\n", name);
	}
	_exit(status);
}

static pthread_t dog_th;
static int dog_started;

void cli_watchdog_start(void)
{
	dog_started = pthread_create(&dog_th, NULL, watchdog_main, NULL) == 0;
}

void cli_watchdog_stop(void)
{
	if (!dog_started)
		return;
	pthread_mutex_lock(&dog.mu);
	dog.quit = 1;
	pthread_cond_signal(&dog.cv);
	pthread_mutex_unlock(&dog.mu);
	pthread_join(dog_th, NULL);
}

int cli_signals_start(struct sk_sink *rep, const char *json)
{
	/* A signal ignored on entry (nohup, a background job of a script) stays
	 * ignored, as the shell that ignored it meant. */
	sigemptyset(&finish.set);
	static const int caught[] = {SIGINT, SIGTERM};
	for (int i = 0; i < 2; i++) {
		struct sigaction old;
		if (sigaction(caught[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaddset(&finish.set, caught[i]);
	}
	pthread_sigmask(SIG_BLOCK, &finish.set, NULL);
	finish.rep = rep;
	finish.json = json;
	pthread_t sig_th;
	if (pthread_create(&sig_th, NULL, signal_main, NULL) != 0)
		return -1;
	pthread_detach(sig_th);
	return 0;
}

int cli_signals_finish(int (*write)(struct sk_sink *, int), struct sk_sink *rep)
{
	pthread_mutex_lock(&finish.mu);
	int rc = write(rep, 1);
	finish.rep = NULL;
	pthread_mutex_unlock(&finish.mu);
	return rc;
}
