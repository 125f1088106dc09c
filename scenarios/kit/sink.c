/* The results sink: see sink.h; writing its files is sink_files.c. */
#include "sink.h"
#include "sink_state.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "build_info.h"

static int64_t now_ns(void) { return tmo_now_ns(); }

json_t *sk_sink_load_avg(void)
{
	double l[3];
	if (getloadavg(l, 3) != 3)
		return json_null();
	return json_pack("[f, f, f]", l[0], l[1], l[2]);
}

/* The machine a run measured: online CPUs, the CPU model (the first
 * "model name" of /proc/cpuinfo, where there is one), the kernel and
 * architecture, and the load average when the run started; each write adds
 * the load average at that time. */
static json_t *machine_json(void)
{
	char model[256] = "";
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (f != NULL) {
		char line[512];
		while (fgets(line, sizeof line, f) != NULL) {
			char *colon = strchr(line, ':');
			if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
				snprintf(model, sizeof model, "%s", colon + 1 + (colon[1] == ' '));
				model[strcspn(model, "\n")] = '\0';
				break;
			}
		}
		fclose(f);
	}
	json_t *m = json_pack("{s:I, s:o}", "cpus_online", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN),
	                      "load_avg_start", sk_sink_load_avg());
	json_object_set_new(m, "cpu_model", model[0] ? json_string(model) : json_null());
	/* The kernel and architecture: system calls, futexes and timers cost
	 * what the kernel makes them (scripts/compare names a difference). */
	struct utsname u;
	if (uname(&u) == 0) {
		json_object_set_new(m, "kernel", json_sprintf("%s %s", u.sysname, u.release));
		json_object_set_new(m, "arch", json_string(u.machine));
	}
	return m;
}

/* A copy of PATH, or of what it points at when it is a symlink: the rename
 * that replaces the file must replace the file, not the link. */
static char *followed(const char *path)
{
	struct stat st;
	char *real = lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? realpath(path, NULL) : NULL;
	return real ? real : strdup(path);
}

struct sk_sink *sk_sink_open(const struct sk_sink_opts *opts)
{
	struct sk_sink *r = calloc(1, sizeof *r);
	if (r == NULL)
		return NULL;
	r->opts = *opts;
	pthread_mutex_init(&r->mu, NULL);
	r->tty = isatty(STDERR_FILENO);
	if (opts->json_path != NULL) {
		size_t n = strlen(opts->json_path);
		char *csv = malloc(n + 5);
		if (csv != NULL) {
			/* FILE.json -> FILE.csv; any other name gets ".csv" appended. */
			memcpy(csv, opts->json_path, n + 1);
			if (n > 5 && strcmp(opts->json_path + n - 5, ".json") == 0)
				strcpy(csv + n - 5, ".csv");
			else
				strcat(csv, ".csv");
		}
		r->json_path = followed(opts->json_path);
		r->csv_path = csv ? followed(csv) : NULL;
		free(csv);
		if (r->json_path == NULL || r->csv_path == NULL) {
			sk_sink_close(r);
			return NULL;
		}
	}
	char host[256] = "";
	gethostname(host, sizeof host - 1);
	char date[64] = "";
	time_t t = time(NULL);
	struct tm tm;
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	/* The seed is a string of decimal digits: it is a uint64_t, which a
	 * JSON integer (jansson's, and most readers' doubles) cannot hold. */
	char seed[24];
	snprintf(seed, sizeof seed, "%" PRIu64, opts->seed);
	r->context = json_pack("{s:s, s:s, s:{s:i, s:b, s:s, s:s, s:o}}", "date", date, "host_name",
	                       host, "tmo", "threads", opts->threads, "quick", opts->quick, "seed",
	                       seed, "commit", TMO_BUILD_COMMIT, "machine", machine_json());
	json_t *tmo = json_object_get(r->context, "tmo");
	if (opts->command != NULL)
		json_object_set_new(tmo, "command", json_string(opts->command));
	const char *scale = getenv("TMO_TEST_SCALE");
	if (scale != NULL)
		json_object_set_new(tmo, "TMO_TEST_SCALE", json_string(scale));
	json_t *engines = json_array();
	for (const struct tmo_engine_ops *const *e = tmo_engines(); *e != NULL; e++)
		json_array_append_new(engines, json_pack("{s:s, s:s, s:I, s:I}", "name", (*e)->name,
		                                         "summary", (*e)->summary, "caps",
		                                         (json_int_t)(*e)->caps, "resolution_ns",
		                                         (json_int_t)(*e)->resolution_ns));
	json_object_set_new(tmo, "engines", engines);
	r->benchmarks = json_array();
	r->rows = json_array();
	r->runs = json_array();
	r->violations = json_array();
	r->targets = json_array();
	if (r->targets == NULL || r->context == NULL || r->benchmarks == NULL || r->rows == NULL || r->runs == NULL ||
	    r->violations == NULL) {
		sk_sink_close(r);
		return NULL;
	}
	return r;
}

void sk_sink_close(struct sk_sink *r)
{
	if (r == NULL)
		return;
	json_decref(r->context);
	json_decref(r->benchmarks);
	json_decref(r->rows);
	json_decref(r->runs);
	json_decref(r->violations);
	json_decref(r->targets);
	free(r->json_path);
	free(r->csv_path);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

static void end_progress_line(struct sk_sink *r)
{
	if (r->progress_line_open) {
		fputc('\n', stderr);
		r->progress_line_open = 0;
	}
}

void sk_sink_begin_run(struct sk_sink *r, const struct sk_scenario *scenario, const char *engine)
{
	pthread_mutex_lock(&r->mu);
	snprintf(r->scenario, sizeof r->scenario, "%s", scenario->name);
	r->running = scenario;
	r->undeclared = 0;
	snprintf(r->engine, sizeof r->engine, "%s", engine);
	r->run_start_ns = r->last_progress_ns = now_ns();
	r->run_violations = 0;
	r->skip_reason[0] = 0;
	r->in_run = 1;
	pthread_mutex_unlock(&r->mu);
}

/* Append one row of the run in progress; r->mu held. */
static void add_row(struct sk_sink *r, const char *engine, const char *metric, const char *param,
                    double value, const char *unit)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "scenario", r->scenario, "engine", engine,
	                      "metric", metric, "param", param ? param : "", "unit", unit ? unit : "");
	/* JSON has no NaN or infinity: a value that is not a number is null. */
	json_object_set_new(o, "value", isfinite(value) ? json_real(value) : json_null());
	json_array_append_new(r->rows, o);
}

/* The scenario declares METRIC with UNIT. */
static int declared(const struct sk_scenario *s, const char *metric, const char *unit)
{
	for (const struct sk_metric *m = s->metrics; m != NULL && m->name != NULL; m++)
		if (strcmp(m->name, metric) == 0)
			return strcmp(m->unit, unit ? unit : "") == 0;
	return 0;
}

int sk_sink_end_run(struct sk_sink *r, int result, double seconds)
{
	pthread_mutex_lock(&r->mu);
	end_progress_line(r);
	if (r->run_violations > VIOLATIONS_SHOWN)
		fprintf(stderr, "[%s/%s] ... %lld more violations not shown\n", r->scenario, r->engine,
		        (long long)(r->run_violations - VIOLATIONS_SHOWN));
	int skipped = result == SK_SKIPPED;
	if (result >= 0 && declared(r->running, "violations", "count"))
		add_row(r, r->engine, "violations", "", result, "count");
	const char *status = skipped ? "skipped" : result < 0 ? "error" : result > 0 ? "violations" : "ok";
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:I, s:f}", "scenario", r->scenario, "engine",
	                      r->engine, "status", status, "result", result, "violations_reported",
	                      (json_int_t)r->run_violations, "seconds", seconds);
	if (skipped)
		json_object_set_new(o, "reason", json_string(r->skip_reason));
	else if (result < 0)
		json_object_set_new(o, "error", json_string(tmo_errname(result)));
	json_array_append_new(r->runs, o);
	r->rows_done = json_array_size(r->rows);
	r->benchmarks_done = json_array_size(r->benchmarks);
	r->violations_done = json_array_size(r->violations);
	r->in_run = 0;
	int undeclared = r->undeclared;
	pthread_mutex_unlock(&r->mu);
	return undeclared;
}

const struct sk_size *sk_sink_size(const struct sk_scenario *s, const char *name)
{
	for (const struct sk_size *z = s->sizes; z != NULL && z->name != NULL; z++)
		if (strcmp(z->name, name) == 0)
			return z;
	return NULL;
}

/* The running scenario's size NAME, or abort: set by sk_sink_begin_run
 * before the run function is called, so read without the lock. */
static const struct sk_size *size_or_abort(const struct sk_run *run, const char *name)
{
	const struct sk_scenario *s = run->report->running;
	const struct sk_size *z = s != NULL ? sk_sink_size(s, name) : NULL;
	if (z == NULL) {
		fprintf(stderr, "tmo-harness: scenario %s asks for the size %s, which its sizes table "
		                "does not declare\n",
		        s != NULL ? s->name : "(none running)", name);
		abort();
	}
	return z;
}

double sk_size(const struct sk_run *run, const char *name)
{
	const struct sk_size *z = size_or_abort(run, name);
	return run->quick ? z->quick : z->full;
}

int64_t sk_size_ns(const struct sk_run *run, const char *name)
{
	const struct sk_size *z = size_or_abort(run, name);
	int64_t per = strcmp(z->unit, "s") == 0    ? TMO_NSEC_PER_SEC
	              : strcmp(z->unit, "ms") == 0 ? TMO_NSEC_PER_MSEC
	              : strcmp(z->unit, "us") == 0 ? TMO_NSEC_PER_USEC
	                                           : 0;
	if (per == 0) {
		fprintf(stderr, "tmo-harness: scenario %s reads the size %s (%s) as a time\n",
		        run->report->running->name, name, z->unit);
		abort();
	}
	return (int64_t)((run->quick ? z->quick : z->full) * (double)per);
}

void sk_report(const struct sk_run *run, const char *metric, const char *param, double value,
                const char *unit)
{
	struct sk_sink *r = run->report;
	pthread_mutex_lock(&r->mu);
	if (!declared(r->running, metric, unit)) {
		end_progress_line(r);
		fprintf(stderr, "tmo-harness: [%s/%s] row refused: metric %s (%s) is not in the "
		                "scenario's metrics table\n",
		        r->scenario, run->ops->name, metric, unit ? unit : "");
		r->undeclared++;
		pthread_mutex_unlock(&r->mu);
		return;
	}
	add_row(r, run->ops->name, metric, param, value, unit);
	pthread_mutex_unlock(&r->mu);
}

void sk_violation(const struct sk_run *run, const char *fmt, ...)
{
	struct sk_sink *r = run->report;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&r->mu);
	r->run_violations++;
	if (r->run_violations <= VIOLATIONS_SHOWN) {
		end_progress_line(r);
		fprintf(stderr,
		        "VIOLATION [%s/%s] %s\n  reproduce: %s --impl=%s --scenario=%s --seed=%llu "
		        "--threads=%d%s\n",
		        r->scenario, run->ops->name, msg, r->opts.argv0, run->ops->name, r->scenario,
		        (unsigned long long)run->seed, run->threads, run->quick ? " --quick" : "");
		json_array_append_new(r->violations,
		                      json_pack("{s:s, s:s, s:s}", "scenario", r->scenario, "engine",
		                                run->ops->name, "message", msg));
	}
	pthread_mutex_unlock(&r->mu);
}

void sk_skip(const struct sk_run *run, const char *fmt, ...)
{
	struct sk_sink *r = run->report;
	va_list ap;
	pthread_mutex_lock(&r->mu);
	va_start(ap, fmt);
	vsnprintf(r->skip_reason, sizeof r->skip_reason, fmt, ap);
	va_end(ap);
	end_progress_line(r);
	fprintf(stderr, "SKIPPED [%s/%s] %s\n", r->scenario, run->ops->name, r->skip_reason);
	pthread_mutex_unlock(&r->mu);
}

void sk_progress(const struct sk_run *run, const char *what, double fraction)
{
	struct sk_sink *r = run->report;
	int64_t now = now_ns();
	/* A terminal gets a line rewritten 4 times a second; a log gets a new
	 * line every 2 s. */
	int64_t every = r->tty ? 250 * TMO_NSEC_PER_MSEC : 2 * TMO_NSEC_PER_SEC;
	pthread_mutex_lock(&r->mu);
	if (now - r->run_start_ns >= 2 * TMO_NSEC_PER_SEC && now - r->last_progress_ns >= every) {
		r->last_progress_ns = now;
		double pct = fraction < 0 ? 0 : fraction > 1 ? 100 : fraction * 100;
		fprintf(stderr, "%s[%s/%s] %s %3.0f%% (%.1f s)%s", r->tty ? "\r\033[K" : "", r->scenario,
		        r->engine, what, pct, (double)(now - r->run_start_ns) / 1e9, r->tty ? "" : "\n");
		r->progress_line_open = r->tty;
	}
	pthread_mutex_unlock(&r->mu);
}

void sk_sink_merge_gbench_locked(struct sk_sink *r, json_t *doc, json_t *tags)
{
	/* Google Benchmark's context (cpu, caches, load, build type) joins
	 * ours; ours wins on the keys both have (date, host). */
	const char *key;
	json_t *v;
	json_object_foreach(json_object_get(doc, "context"), key, v)
	{
		if (json_object_get(r->context, key) == NULL)
			json_object_set(r->context, key, v);
	}
	int64_t max_family = -1;
	json_t *b;
	size_t i;
	json_array_foreach(json_object_get(doc, "benchmarks"), i, b)
	{
		json_t *fi = json_object_get(b, "family_index");
		if (json_is_integer(fi)) {
			int64_t f = json_integer_value(fi);
			if (f > max_family)
				max_family = f;
			json_object_set_new(b, "family_index", json_integer(f + r->family_offset));
		}
		json_object_update(b, tags);
		json_array_append(r->benchmarks, b);
	}
	r->family_offset += max_family + 1;
}

void sk_sink_add_gbench_json(struct sk_sink *r, const char *json_text)
{
	/* Nothing ran (--benchmark_filter matched nothing): no document. */
	if (json_text == NULL || json_text[0] == '\0')
		return;
	json_error_t err;
	json_t *doc = json_loads(json_text, 0, &err);
	if (doc == NULL) {
		fprintf(stderr, "tmo-harness: Google Benchmark's JSON did not parse: %s (line %d)\n",
		        err.text, err.line);
		return;
	}
	pthread_mutex_lock(&r->mu);
	json_t *tags = json_pack("{s:s, s:s}", "tmo_scenario", r->scenario, "tmo_engine", r->engine);
	sk_sink_merge_gbench_locked(r, doc, tags);
	json_decref(tags);
	pthread_mutex_unlock(&r->mu);
	json_decref(doc);
}

size_t sk_sink_runs_done(struct sk_sink *r)
{
	pthread_mutex_lock(&r->mu);
	size_t n = json_array_size(r->runs);
	pthread_mutex_unlock(&r->mu);
	return n;
}

void sk_sink_add_target(struct sk_sink *r, const char *what, double measured, const char *op,
                       double want, const char *unit, const char *verdict)
{
	pthread_mutex_lock(&r->mu);
	json_t *o = json_pack("{s:s, s:s, s:f, s:s, s:s}", "target", what, "op", op, "wanted", want,
	                      "unit", unit, "verdict", verdict);
	json_object_set_new(o, "measured", isfinite(measured) ? json_real(measured) : json_null());
	json_array_append_new(r->targets, o);
	pthread_mutex_unlock(&r->mu);
}

const char *sk_sink_csv_path(const struct sk_sink *r) { return r->csv_path; }

int sk_sink_lookup(struct sk_sink *r, const char *scenario, const char *engine,
                  const char *metric, const char *param, double *value)
{
	int found = 0;
	pthread_mutex_lock(&r->mu);
	json_t *row;
	size_t i;
	json_array_foreach(r->rows, i, row)
	{
		if (strcmp(json_string_value(json_object_get(row, "scenario")), scenario) == 0 &&
		    strcmp(json_string_value(json_object_get(row, "engine")), engine) == 0 &&
		    strcmp(json_string_value(json_object_get(row, "metric")), metric) == 0 &&
		    strcmp(json_string_value(json_object_get(row, "param")), param) == 0) {
			json_t *v = json_object_get(row, "value");
			*value = json_is_real(v) ? json_real_value(v) : NAN;
			found = 1;
		}
	}
	pthread_mutex_unlock(&r->mu);
	return found;
}

double sk_figure(const struct sk_results *res, const char *scenario, const char *engine,
                 const char *metric, const char *param)
{
	double v;
	return sk_sink_lookup(res->sink, scenario, engine, metric, param, &v) ? v : NAN;
}
