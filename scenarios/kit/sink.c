/* The results sink: see report.h. */
#include "sink.h"

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
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "build_info.h"

/* Violations printed in full per run; the rest are counted. */
#define VIOLATIONS_SHOWN 20

struct sk_sink {
	struct sk_sink_opts opts;
	char *json_path, *csv_path;
	json_t *context, *benchmarks, *rows, *runs, *violations, *targets;
	int64_t family_offset; /* added to Google Benchmark family indices */
	/* What finished: the first *_done entries of rows, benchmarks and
	 * violations belong to runs that ended (sk_sink_end_run); a write
	 * leaves out the rest, which a run in progress is still adding to. */
	size_t rows_done, benchmarks_done, violations_done;
	int in_run; /* between sk_sink_begin_run and sk_sink_end_run */

	pthread_mutex_t mu; /* guards everything below and the json arrays */
	char scenario[64], engine[64];
	const struct sk_scenario *running; /* the scenario of the run in progress */
	int undeclared; /* rows refused in this run: metric or unit not declared */
	int64_t run_start_ns, last_progress_ns;
	int64_t run_violations;
	char skip_reason[256]; /* sk_skip() in this run; "" when none */
	int progress_line_open; /* a "\r" progress line is on the terminal */
	int tty;
};

static int64_t now_ns(void) { return tmo_now_ns(); }

static json_t *load_avg_json(void)
{
	double l[3];
	if (getloadavg(l, 3) != 3)
		return json_null();
	return json_pack("[f, f, f]", l[0], l[1], l[2]);
}

/* The machine a run measured: online CPUs, the CPU model (the first
 * "model name" of /proc/cpuinfo, where there is one) and the load average
 * when the run started; each write adds the load average at that time. */
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
	                      "load_avg_start", load_avg_json());
	json_object_set_new(m, "cpu_model", model[0] ? json_string(model) : json_null());
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

int sk_sink_end_run(struct sk_sink *r, int result, double seconds)
{
	pthread_mutex_lock(&r->mu);
	end_progress_line(r);
	if (r->run_violations > VIOLATIONS_SHOWN)
		fprintf(stderr, "[%s/%s] ... %lld more violations not shown\n", r->scenario, r->engine,
		        (long long)(r->run_violations - VIOLATIONS_SHOWN));
	int skipped = result == SK_SKIPPED;
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

/* Keep text fields comma- and newline-free so the CSV needs no quoting
 * (gnuplot's CSV reader does not understand quotes): a param's list
 * "threads=2,live=1000" is written "threads=2;live=1000" in the CSV. */
static void csv_field(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc(*s == ',' ? ';' : (*s == '\n' || *s == '\r') ? ' ' : *s, f);
}

/* The scenario declares METRIC with UNIT. */
static int declared(const struct sk_scenario *s, const char *metric, const char *unit)
{
	for (const struct sk_metric *m = s->metrics; m != NULL && m->name != NULL; m++)
		if (strcmp(m->name, metric) == 0)
			return strcmp(m->unit, unit ? unit : "") == 0;
	return 0;
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
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "scenario", r->scenario, "engine",
	                      run->ops->name, "metric", metric, "param", param ? param : "", "unit",
	                      unit ? unit : "");
	/* JSON has no NaN or infinity: a value that is not a number is null. */
	json_object_set_new(o, "value", isfinite(value) ? json_real(value) : json_null());
	json_array_append_new(r->rows, o);
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
	json_t *ctx = json_object_get(doc, "context");
	if (json_is_object(ctx)) {
		/* Google Benchmark's context (cpu, caches, load, build type) joins
		 * ours; ours wins on the keys both have (date, host). */
		const char *key;
		json_t *v;
		json_object_foreach(ctx, key, v)
		{
			if (json_object_get(r->context, key) == NULL)
				json_object_set(r->context, key, v);
		}
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
		json_object_set_new(b, "tmo_scenario", json_string(r->scenario));
		json_object_set_new(b, "tmo_engine", json_string(r->engine));
		json_array_append(r->benchmarks, b);
	}
	r->family_offset += max_family + 1;
	pthread_mutex_unlock(&r->mu);
	json_decref(doc);
}

/* A new array holding the first n elements of a (shared, not copied). */
static json_t *array_prefix(json_t *a, size_t n)
{
	json_t *p = json_array();
	for (size_t i = 0; i < n && i < json_array_size(a); i++)
		json_array_append(p, json_array_get(a, i));
	return p;
}

static int emit_json(FILE *f, void *arg)
{
	return json_dumpf(arg, f, JSON_INDENT(1) | JSON_REAL_PRECISION(10)) == 0 && fputc('\n', f) != EOF
	               ? 0
	               : -1;
}

static int emit_csv(FILE *f, void *arg)
{
	json_t *rows = arg, *row;
	size_t i;
	fputs("scenario,engine,metric,param,value,unit\n", f);
	json_array_foreach(rows, i, row)
	{
		const char *keys[] = {"scenario", "engine", "metric", "param"};
		for (int k = 0; k < 4; k++) {
			csv_field(f, json_string_value(json_object_get(row, keys[k])));
			fputc(',', f);
		}
		json_t *v = json_object_get(row, "value");
		if (json_is_real(v))
			fprintf(f, "%.10g", json_real_value(v));
		else
			fputs("nan", f);
		fputc(',', f);
		csv_field(f, json_string_value(json_object_get(row, "unit")));
		fputc('\n', f);
	}
	return ferror(f) ? -1 : 0;
}

/* PATH.tmp<pid>: where PATH's next version is written before the rename. */
static char *temp_name(const char *path)
{
	size_t n = strlen(path) + 32;
	char *t = malloc(n);
	if (t != NULL)
		snprintf(t, n, "%s.tmp%ld", path, (long)getpid());
	return t;
}

/* Write PATH whole or not at all: the text goes to PATH.tmp<pid>, is
 * flushed and fsync'd, and is renamed over PATH, so PATH holds either its
 * previous contents or the new ones, never a truncated file (a full disk, a
 * crash, an interrupt).  Any error is printed and returns -1; the temporary
 * file is removed. */
static int write_whole(const char *path, int (*emit)(FILE *, void *), void *arg)
{
	char *tmp = temp_name(path);
	if (tmp == NULL) {
		fprintf(stderr, "tmo-harness: cannot write %s: out of memory\n", path);
		return -1;
	}
	int rc = 0, err = 0;
	FILE *f = fopen(tmp, "w");
	if (f == NULL) {
		rc = -1;
		err = errno;
	} else {
		errno = 0;
		if (emit(f, arg) != 0 || fflush(f) != 0 || ferror(f)) {
			rc = -1;
			err = errno ? errno : EIO;
		} else if (fsync(fileno(f)) != 0 && errno != EINVAL) {
			/* EINVAL: a file that cannot be synced (a pipe); nothing to lose */
			rc = -1;
			err = errno;
		}
		if (fclose(f) != 0 && rc == 0) {
			rc = -1;
			err = errno;
		}
		if (rc == 0 && rename(tmp, path) != 0) {
			rc = -1;
			err = errno;
		}
		if (rc != 0)
			unlink(tmp);
	}
	if (rc != 0)
		fprintf(stderr, "tmo-harness: cannot write %s: %s\n", path, strerror(err));
	free(tmp);
	return rc;
}

/* Both files, from what finished (the *_done prefixes); `complete` and,
 * after a signal, `interrupted` say how far the run got. */
static int write_files(struct sk_sink *r, int complete, const char *signal_name)
{
	if (r->json_path == NULL)
		return 0;
	pthread_mutex_lock(&r->mu);
	json_object_set_new(json_object_get(json_object_get(r->context, "tmo"), "machine"),
	                    "load_avg_end", load_avg_json());
	json_t *rows = array_prefix(r->rows, r->rows_done);
	json_t *doc = json_pack("{s:O, s:b, s:o, s:o, s:O, s:o, s:O}", "context", r->context,
	                        "complete", complete, "benchmarks",
	                        array_prefix(r->benchmarks, r->benchmarks_done), "rows",
	                        json_incref(rows), "runs", r->runs, "violations",
	                        array_prefix(r->violations, r->violations_done), "targets",
	                        r->targets);
	if (doc != NULL && signal_name != NULL) {
		json_t *in = json_pack("{s:s}", "signal", signal_name);
		if (r->in_run) {
			json_object_set_new(in, "scenario", json_string(r->scenario));
			json_object_set_new(in, "engine", json_string(r->engine));
		}
		json_object_set_new(doc, "interrupted", in);
	}
	int rc = -1;
	if (doc == NULL)
		fprintf(stderr, "tmo-harness: cannot write %s: out of memory\n", r->json_path);
	else if (write_whole(r->json_path, emit_json, doc) == 0 &&
	         write_whole(r->csv_path, emit_csv, rows) == 0)
		rc = 0;
	json_decref(doc);
	json_decref(rows);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int sk_sink_write(struct sk_sink *r, int complete) { return write_files(r, complete, NULL); }

int sk_sink_write_interrupted(struct sk_sink *r, const char *signal_name)
{
	return write_files(r, 0, signal_name);
}

/* A destination must be a regular file (or not exist yet): the rename that
 * replaces it would otherwise replace a device (--json=/dev/null) or a
 * directory entry the user did not mean. */
static int check_destination(const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "tmo-harness: --json: %s exists and is not a regular file\n", path);
		return -1;
	}
	char *tmp = temp_name(path);
	int fd = tmp ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666) : -1;
	if (fd < 0) {
		fprintf(stderr, "tmo-harness: --json: cannot create files beside %s: %s\n", path,
		        strerror(tmp ? errno : ENOMEM));
		free(tmp);
		return -1;
	}
	close(fd);
	unlink(tmp);
	free(tmp);
	return 0;
}

int sk_sink_check_writable(struct sk_sink *r)
{
	if (r->json_path == NULL)
		return 0;
	return check_destination(r->json_path) == 0 && check_destination(r->csv_path) == 0 ? 0 : -1;
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
