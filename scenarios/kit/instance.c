/*
 * --repeat in processes (kit/sk.h: sk_instance_run, sk_instance_send).
 *
 * The harness starts itself for one instance of one scenario:
 *
 *   /proc/self/exe --impl=E --threads=N --seed=S [--quick] [--benchmark_*]
 *                  --scenario=NAME --repeat=1 --instance=I,FD --json=TMP
 *
 * The child runs that instance only, prints its tables on the shared
 * standard output, writes {result, skip reason, figures} to FD and its
 * Google Benchmark entries and violations to TMP (its ordinary results
 * file).  The parent reads both and removes TMP and the CSV beside it;
 * the engine's run merges TMP's entries into the report.  Ahead of the
 * runs (sk_instance_prerun) the harness starts instance 1 of every engine,
 * then 2 ...: each engine's instances then span the whole run, and a
 * machine that drifts over minutes shows in every engine's spread instead
 * of moving one engine's figures.  A pipe carries the figures because they are
 * the scenario's own struct: the same binary on both ends, so its layout
 * needs no format.  Why processes at all: on a shared VM a figure moves
 * between processes by more than between instances in one process (where
 * the engine's threads land, the pages it is given, the address layout:
 * results/2026-12-04-epyc2-fafcb22), and a verdict that pools one process's
 * repetitions mistakes that for a change.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sink_state.h"

extern char **environ;

/* What a child sends before its figures. */
struct instance_head {
	int result;
	char skip_reason[sizeof ((struct sk_sink *)0)->skip_reason];
};

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w, len -= (size_t)w;
	}
	return 0;
}

/* Reads up to len bytes (fewer at end of file); returns the count. */
static size_t read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, p + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

void sk_instance_send(const struct sk_run *run, int result, const void *figs, size_t len)
{
	struct instance_head h = {.result = result};
	pthread_mutex_lock(&run->report->mu);
	memcpy(h.skip_reason, run->report->skip_reason, sizeof h.skip_reason);
	pthread_mutex_unlock(&run->report->mu);
	if (write_all(run->instance_fd, &h, sizeof h) != 0 || write_all(run->instance_fd, figs, len) != 0)
		fprintf(stderr, "tmo-harness: instance %d: cannot send its figures: %s\n", run->instance,
		        strerror(errno));
	close(run->instance_fd);
}

/* A child's results into r: its benchmarks (tagged with the instance and
 * the process) and its violations. */
static void merge(struct sk_sink *r, json_t *doc, int index, pid_t pid)
{
	pthread_mutex_lock(&r->mu);
	json_t *tags = json_pack("{s:i, s:I}", "tmo_instance", index, "tmo_pid", (json_int_t)pid);
	sk_sink_merge_gbench_locked(r, doc, tags);
	json_decref(tags);
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(doc, "violations"), i, v)
	{
		json_object_set_new(v, "tmo_instance", json_integer(index));
		json_array_append(r->violations, v);
		r->run_violations++;
	}
	pthread_mutex_unlock(&r->mu);
}

/* The child's command: argv (the harness's, for one engine), then this
 * instance's options. */
static char **child_argv(const char *const *base, const char *scenario, int index, int fd,
                         const char *json, char opt[3][300])
{
	size_t n = 0;
	while (base[n] != NULL)
		n++;
	char **argv = calloc(n + 5, sizeof *argv);
	if (argv == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		argv[i] = (char *)base[i];
	snprintf(opt[0], sizeof opt[0], "--scenario=%s", scenario);
	snprintf(opt[1], sizeof opt[1], "--instance=%d,%d", index, fd);
	snprintf(opt[2], sizeof opt[2], "--json=%s", json);
	argv[n] = opt[0];
	argv[n + 1] = "--repeat=1";
	argv[n + 2] = opt[1];
	argv[n + 3] = opt[2];
	return argv;
}

/* Starts the child with the pipe's write end `fd` open in it; returns its
 * pid, or -1 (errno). */
static pid_t spawn(char **argv, int fd)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	/* fd is close-on-exec like every descriptor here: the child gets a
	 * copy that is not, under the same number.  (The harness blocks SIGINT
	 * and SIGTERM for its signal thread; the child, the same harness, sets
	 * up its own the same way.) */
	int tmp = fcntl(fd, F_DUPFD_CLOEXEC, 100);
	posix_spawn_file_actions_adddup2(&fa, tmp, fd);
	pid_t pid;
	fflush(stdout);
	fflush(stderr);
	int rc = tmp < 0 ? errno : posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (tmp >= 0)
		close(tmp);
	errno = rc;
	return rc == 0 ? pid : -1;
}

/* One instance that ran: how it ended, what it sent, its results. */
struct ran {
	char scenario[64], engine[64];
	int index;
	pid_t pid;      /* -1: it could not start (`why`) */
	int status;     /* waitpid's */
	char why[160];  /* when it could not start */
	char *sent;     /* instance_head and figures */
	size_t got;
	json_t *doc;    /* its results file, NULL when it did not parse */
	struct ran *next;
};
static struct ran *ready; /* started ahead (sk_instance_prerun), not yet run */

/* Everything the pipe carries, until the child closes it. */
static char *read_to_end(int fd, size_t *got)
{
	size_t cap = 4096;
	char *buf = malloc(cap);
	*got = 0;
	while (buf != NULL) {
		if (*got == cap) {
			char *more = realloc(buf, cap *= 2);
			if (more == NULL)
				break;
			buf = more;
		}
		size_t r = read_all(fd, buf + *got, cap - *got);
		*got += r;
		if (*got < cap)
			break;
	}
	return buf;
}

/* Starts one instance, waits for it, keeps what it left. */
static struct ran *start(const char *const *argv0, const char *scenario, const char *engine,
                         int index)
{
	struct ran *x = calloc(1, sizeof *x);
	if (x == NULL)
		return NULL;
	snprintf(x->scenario, sizeof x->scenario, "%s", scenario);
	snprintf(x->engine, sizeof x->engine, "%s", engine);
	x->index = index;
	x->pid = -1;
	const char *dir = getenv("TMPDIR");
	char json[256], csv[260], opt[3][300];
	snprintf(json, sizeof json, "%s/tmo-instance-XXXXXX.json", dir && *dir ? dir : "/tmp");
	int tfd = mkstemps(json, 5);
	int p[2] = {-1, -1};
	if (tfd < 0 || pipe2(p, O_CLOEXEC) != 0) {
		snprintf(x->why, sizeof x->why, "cannot make its %s: %s",
		         tfd < 0 ? "results file" : "pipe", strerror(errno));
		if (tfd >= 0)
			close(tfd), unlink(json);
		return x;
	}
	close(tfd);
	snprintf(csv, sizeof csv, "%.*s.csv", (int)(strlen(json) - 5), json);
	char **argv = child_argv(argv0, scenario, index, p[1], json, opt);
	x->pid = argv == NULL ? -1 : spawn(argv, p[1]);
	if (x->pid < 0)
		snprintf(x->why, sizeof x->why, "cannot start /proc/self/exe: %s", strerror(errno));
	free(argv);
	close(p[1]);
	if (x->pid > 0) {
		x->sent = read_to_end(p[0], &x->got);
		while (waitpid(x->pid, &x->status, 0) < 0 && errno == EINTR)
			;
		json_error_t err;
		x->doc = json_load_file(json, 0, &err);
	}
	close(p[0]);
	unlink(json);
	unlink(csv);
	return x;
}

void sk_instance_prerun(const char *const *argv, const char *scenario, const char *engine,
                        int index)
{
	struct ran *x = start(argv, scenario, engine, index), **tail = &ready;
	while (*tail != NULL)
		tail = &(*tail)->next;
	*tail = x;
}

static void drop(struct ran *x)
{
	free(x->sent);
	json_decref(x->doc);
	free(x);
}

void sk_instance_discard(void)
{
	while (ready != NULL) {
		struct ran *x = ready;
		ready = x->next;
		drop(x);
	}
}

int sk_instance_run(const struct sk_run *run, int index, void *figs, size_t len, int *sent)
{
	*sent = 0;
	char scenario[sizeof run->report->scenario]; /* the run in progress */
	pthread_mutex_lock(&run->report->mu);
	memcpy(scenario, run->report->scenario, sizeof scenario);
	pthread_mutex_unlock(&run->report->mu);
	struct ran *x = NULL;
	for (struct ran **p = &ready; *p != NULL; p = &(*p)->next) {
		if ((*p)->index == index && strcmp((*p)->scenario, scenario) == 0 &&
		    strcmp((*p)->engine, run->ops->name) == 0) {
			x = *p;
			*p = x->next;
			break;
		}
	}
	if (x == NULL)
		x = start(run->instance_argv, scenario, run->ops->name, index);
	if (x == NULL) {
		sk_violation(run, "instance %d: out of memory", index + 1);
		return 1;
	}
	int rc = 1;
	struct instance_head h;
	char how[96];
	if (x->pid < 0) {
		sk_violation(run, "instance %d: %s", index + 1, x->why);
		goto out;
	}
	if (WIFSIGNALED(x->status))
		snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(x->status),
		         strsignal(WTERMSIG(x->status)));
	else
		snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(x->status));
	if (x->doc != NULL)
		merge(run->report, x->doc, index, x->pid);
	if (x->sent == NULL || x->got != sizeof h + len) {
		sk_violation(run, "instance %d (process %d) ended with %s before sending its figures",
		             index + 1, (int)x->pid, how);
		goto out;
	}
	memcpy(&h, x->sent, sizeof h);
	memcpy(figs, x->sent + sizeof h, len);
	*sent = 1;
	rc = h.result;
	if (x->doc == NULL) {
		sk_violation(run, "instance %d (process %d, %s): its results file did not parse",
		             index + 1, (int)x->pid, how);
		rc += rc >= 0;
	}
	if (h.result == SK_SKIPPED)
		sk_skip(run, "%.*s", (int)sizeof h.skip_reason - 1, h.skip_reason);
out:
	drop(x);
	return rc;
}
