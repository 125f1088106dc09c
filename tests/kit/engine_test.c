#include "engine_test.h"

#include "check.h"
#include "core/internal.h" /* tmo__task_blocked */
#include "tmo/engine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *et_name;
const struct tmo_engine_ops *et_ops;
const struct tmo_engine_ops *const *et_extra_engines;
static uint64_t et_seed = 0x7107c0ffee5eedULL;

void et_init(int argc, char **argv, const char *test)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s ENGINE\nengines:", argv[0]);
		for (const struct tmo_engine_ops *const *e = tmo_engines(); *e; e++)
			fprintf(stderr, " %s", (*e)->name);
		fprintf(stderr, "\n");
		exit(2);
	}
	et_name = argv[1];
	if (tmo_engine_is_path(et_name)) {
		/* An engine from outside the library (tmo/engine.h): run as its
		 * table's name; a file that is no engine is the named refusal. */
		char why[512];
		int rc = tmo_engine_load(et_name, &et_ops, why, sizeof why);
		if (rc != 0) {
			fprintf(stderr, "%s: %s: %s: %s\n", test, et_name, tmo_load_errname(rc), why);
			exit(3);
		}
		et_name = et_ops->name;
	}
	if (et_ops == NULL)
		et_ops = tmo_engine_find(et_name);
	for (const struct tmo_engine_ops *const *x = et_extra_engines; et_ops == NULL && x && *x;
	     x++)
		if (strcmp((*x)->name, et_name) == 0)
			et_ops = *x;
	if (et_ops == NULL) {
		fprintf(stderr, "%s: no engine named '%s' in the registry\n", test, et_name);
		exit(2);
	}
	const char *s = getenv("TMO_TEST_SEED");
	if (s && *s)
		et_seed = strtoull(s, NULL, 0);
	printf("%s on engine '%s': caps 0x%x, resolution %lld ns, scale %.3g, seed 0x%llx\n", test,
	       et_name, et_ops->caps, (long long)et_ops->resolution_ns, sk_scale(),
	       (unsigned long long)et_seed);
	fflush(stdout);
	/* An engine whose kernel facility is missing here (io_uring disabled):
	 * every engine test is skipped, with the reason (exit 77). */
	struct tmo *probe = NULL;
	if (tmo_create_ops(et_ops, NULL, &probe) == TMO_EUNAVAIL) {
		printf("SKIP: engine '%s' is unavailable here: TMO_EUNAVAIL (%s)\n", et_name,
		       tmo_strerror(TMO_EUNAVAIL));
		exit(77);
	}
	if (probe != NULL)
		tmo_destroy(&probe);
}

long et_scaled(long n, long min)
{
	long v = (long)((double)n * sk_scale());
	return v < min ? min : v;
}

int et_thread_per_timer(void) { return (et_ops->caps & TMO_CAP_THREAD_PER_TIMER) != 0; }

void et_sleep_ns(int64_t ns)
{
	if (ns <= 0)
		return;
	struct timespec ts = {(time_t)(ns / TMO_NSEC_PER_SEC), (long)(ns % TMO_NSEC_PER_SEC)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void et_spin_ns(int64_t ns)
{
	int64_t end = tmo_now_ns() + ns;
	while (tmo_now_ns() < end)
		;
}

int et_wait_child(pid_t pid, int64_t timeout_ns, int *status)
{
	int64_t end = tmo_now_ns() + timeout_ns;
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 1;
		if (r < 0 && errno != EINTR)
			return 0;
		if (tmo_now_ns() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, status, 0);
			return 0;
		}
		et_sleep_ns(TMO_NSEC_PER_MSEC);
	}
}

int et_wait_ge(atomic_llong *v, long long target, int64_t timeout_ns)
{
	return ET_WAIT_UNTIL(atomic_load(v) >= target, timeout_ns);
}

static atomic_llong warm_fired;
static void warm_cb(struct tmo_timer *t, void *arg) { atomic_fetch_add(&warm_fired, 1); }

int et_warm_up(void)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(et_ops, NULL, &e);
	if (rc != 0)
		return rc;
	struct tmo_timer t = TMO_TIMER_INIT;
	if (tmo_arm(e, &t, 0, warm_cb, NULL) == 0) {
		et_wait_ge(&warm_fired, 1, TMO_NSEC_PER_SEC);
		tmo_cancel(e, &t);
	}
	tmo_destroy(&e);
	/* Joined threads can stay listed a moment after the join returns. */
	return ET_WAIT_UNTIL(et_engine_threads() == 0, 10 * TMO_NSEC_PER_SEC) ? 0 : TMO_ETIMEDOUT;
}

int et_thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int et_wait_thread_count(int want, int64_t timeout_ns)
{
	int n = -1;
	ET_WAIT_UNTIL_EVERY((n = et_thread_count()) == want, timeout_ns, TMO_NSEC_PER_MSEC);
	return n;
}

int et_thread_ids(pid_t *out, int max)
{
	DIR *d = opendir("/proc/self/task");
	if (d == NULL)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL && n < max)
		if (de->d_name[0] != '.')
			out[n++] = (pid_t)atoi(de->d_name);
	closedir(d);
	return n;
}

int et_engine_thread_ids(pid_t *out, int max)
{
	pid_t ids[1024];
	int m = et_thread_ids(ids, 1024), n = 0;
	for (int i = 0; i < m && n < max; i++) {
		char path[64], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)ids[i]);
		FILE *f = fopen(path, "re");
		if (f == NULL)
			continue; /* gone meanwhile */
		if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, "tmo-", 4) == 0)
			out[n++] = ids[i];
		fclose(f);
	}
	return n;
}

int et_engine_threads(void)
{
	pid_t ids[1024];
	return et_engine_thread_ids(ids, 1024);
}

pid_t et_new_thread(const pid_t *before, int n)
{
	pid_t now[256];
	int m = et_thread_ids(now, 256);
	for (int i = 0; i < m; i++) {
		int old = 0;
		for (int j = 0; j < n && !old; j++)
			old = now[i] == before[j];
		if (!old)
			return now[i];
	}
	return 0;
}

bool et_thread_blocked(pid_t tid)
{
	return tmo__task_blocked(tid);
}

bool et_wait_blocked(pid_t tid, int looks, int64_t timeout_ns)
{
	int64_t end = tmo_now_ns() + timeout_ns;
	int streak = 0;
	while (streak < looks && tmo_now_ns() < end) {
		et_sleep_ns(TMO_NSEC_PER_MSEC);
		streak = et_thread_blocked(tid) ? streak + 1 : 0;
	}
	return streak == looks;
}

int et_kernel_timer_count(void)
{
	FILE *f = fopen("/proc/self/timers", "r");
	if (!f)
		return -1;
	char line[256];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strncmp(line, "ID:", 3) == 0;
	fclose(f);
	return n;
}

int et_sigq_full(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	char line[256];
	long used = 0, limit = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "SigQ: %ld/%ld", &used, &limit) == 2)
			break;
	fclose(f);
	/* a 1% margin: other processes' usage moves while we look */
	return limit > 0 && used >= limit - limit / 100;
}

int et_sigq_taken_by_others(int *own, unsigned long long *limit)
{
	struct rlimit rl;
	*own = et_kernel_timer_count();
	*limit = getrlimit(RLIMIT_SIGPENDING, &rl) == 0 ? (unsigned long long)rl.rlim_cur : 0;
	return *own >= 0 && *limit > 0 && (unsigned long long)*own < *limit / 2;
}

void et_skip_if_shortage(const struct tmo_engine_ops *ops, int rc, const char *what)
{
	if (rc != TMO_EAGAIN)
		return;
	int own = 0;
	unsigned long long limit = 0;
	int quota = strcmp(ops->name, "posix") == 0 && et_sigq_taken_by_others(&own, &limit);
	if (quota)
		printf("SKIP: %s refused with TMO_EAGAIN while this process holds %d kernel timers "
		       "of its RLIMIT_SIGPENDING %llu: the user's quota, shared by all the user's "
		       "processes, is used up by others\n",
		       what, own, limit);
	else if (ops->caps & TMO_CAP_THREAD_PER_TIMER)
		printf("SKIP: %s refused with TMO_EAGAIN: out of threads\n", what);
	else
		return; /* not a shared kernel resource: the caller's check fails */
	fflush(stdout);
	_exit(77);
}

struct tmo *et_create_or_skip(const struct tmo_engine_ops *ops, const char *what)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(ops, NULL, &e);
	et_skip_if_shortage(ops, rc, what);
	CHECK_EQ(rc, 0);
	return e;
}

int et_arm_or_skip(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                   void *arg, const char *what)
{
	int rc = tmo_arm(e, t, timeout_ns, cb, arg);
	et_skip_if_shortage(tmo_ops(e), rc, what);
	return rc;
}

void et_raise_sigpending(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_SIGPENDING, &rl) != 0)
		return;
	struct rlimit want = {1u << 22, 1u << 22};
	if (rl.rlim_cur < want.rlim_cur && setrlimit(RLIMIT_SIGPENDING, &want) != 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_SIGPENDING, &rl);
	}
}

void et_rng_seed(struct sk_rng *r, uint64_t stream)
{
	sk_rng_init(r, et_seed ^ (stream * UINT64_C(0x9e3779b97f4a7c15)));
}

int et_cancel_settled(struct tmo *e, struct tmo_timer *t)
{
	int rc = tmo_cancel(e, t);
	return rc == TMO_CANCEL_WAITED ? tmo_cancel(e, t) : rc;
}

void et_count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
}

void et_counted_init(struct et_counted *s, int n, atomic_llong *total)
{
	memset(s, 0, (size_t)n * sizeof *s);
	for (int i = 0; i < n; i++)
		s[i].total = total;
}

void et_counted_cb(struct tmo_timer *t, void *arg)
{
	struct et_counted *s = arg;
	(void)t;
	atomic_fetch_add(&s->fires, 1);
	atomic_fetch_add(s->total, 1);
}

int et_main_end(int64_t base)
{
	CHECK_EQ(tmo_testing_live_allocs(), base);
	return TEST_EXIT();
}

void et_gate_cb(struct tmo_timer *t, void *arg)
{
	struct et_gate *g = arg;
	(void)t;
	atomic_store(&g->in, 1);
	while (!atomic_load(&g->open))
		et_sleep_ns(100 * TMO_NSEC_PER_USEC);
}

const char *et_result_name(int rc)
{
	switch (rc) {
	case TMO_CANCEL_PREVENTED:
		return "PREVENTED";
	case TMO_CANCEL_FIRED:
		return "FIRED";
	case TMO_CANCEL_WAITED:
		return "WAITED";
	case TMO_CANCEL_SELF:
		return "SELF";
	default:
		return tmo_errname(rc);
	}
}
