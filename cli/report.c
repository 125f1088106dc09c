/* The results sink: see report.h. */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

/* Violations printed in full per run; the rest are counted. */
#define VIOLATIONS_SHOWN 20

struct tmo_report {
	struct report_opts opts;
	char *json_path, *csv_path;
	json_t *context, *benchmarks, *rows, *runs, *violations, *targets;
	int64_t family_offset; /* added to Google Benchmark family indices */
	int64_t total_violations;

	pthread_mutex_t mu; /* guards everything below and the json arrays */
	char scenario[64], engine[64];
	int64_t run_start_ns, last_progress_ns;
	int64_t run_violations;
	int progress_line_open; /* a "\r" progress line is on the terminal */
	int tty;
};

static int64_t now_ns(void) { return tmo_now_ns(); }

struct tmo_report *report_open(const struct report_opts *opts)
{
	struct tmo_report *r = calloc(1, sizeof *r);
	if (r == NULL)
		return NULL;
	r->opts = *opts;
	pthread_mutex_init(&r->mu, NULL);
	r->tty = isatty(STDERR_FILENO);
	if (opts->json_path != NULL) {
		size_t n = strlen(opts->json_path);
		r->json_path = strdup(opts->json_path);
		r->csv_path = malloc(n + 5);
		if (r->json_path == NULL || r->csv_path == NULL) {
			report_close(r);
			return NULL;
		}
		/* FILE.json -> FILE.csv; any other name gets ".csv" appended. */
		memcpy(r->csv_path, opts->json_path, n + 1);
		if (n > 5 && strcmp(opts->json_path + n - 5, ".json") == 0)
			strcpy(r->csv_path + n - 5, ".csv");
		else
			strcat(r->csv_path, ".csv");
	}
	char host[256] = "";
	gethostname(host, sizeof host - 1);
	char date[64] = "";
	time_t t = time(NULL);
	struct tm tm;
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	r->context = json_pack("{s:s, s:s, s:{s:i, s:b, s:I}}", "date", date, "host_name", host,
	                       "tmo", "threads", opts->threads, "quick", opts->quick, "seed",
	                       (json_int_t)opts->seed);
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
		report_close(r);
		return NULL;
	}
	return r;
}

void report_close(struct tmo_report *r)
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

static void end_progress_line(struct tmo_report *r)
{
	if (r->progress_line_open) {
		fputc('\n', stderr);
		r->progress_line_open = 0;
	}
}

void report_begin_run(struct tmo_report *r, const char *scenario, const char *engine)
{
	pthread_mutex_lock(&r->mu);
	snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
	snprintf(r->engine, sizeof r->engine, "%s", engine);
	r->run_start_ns = r->last_progress_ns = now_ns();
	r->run_violations = 0;
	pthread_mutex_unlock(&r->mu);
}

void report_end_run(struct tmo_report *r, int result, double seconds)
{
	pthread_mutex_lock(&r->mu);
	end_progress_line(r);
	if (r->run_violations > VIOLATIONS_SHOWN)
		fprintf(stderr, "[%s/%s] ... %lld more violations not shown\n", r->scenario, r->engine,
		        (long long)(r->run_violations - VIOLATIONS_SHOWN));
	const char *status = result < 0 ? "error" : result > 0 ? "violations" : "ok";
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:I, s:f}", "scenario", r->scenario, "engine",
	                      r->engine, "status", status, "result", result, "violations_reported",
	                      (json_int_t)r->run_violations, "seconds", seconds);
	if (result < 0)
		json_object_set_new(o, "error", json_string(tmo_errname(result)));
	json_array_append_new(r->runs, o);
	pthread_mutex_unlock(&r->mu);
}

/* Keep text fields comma- and newline-free so the CSV needs no quoting
 * (gnuplot's CSV reader does not understand quotes): a param's list
 * "threads=2,live=1000" is written "threads=2;live=1000" in the CSV. */
static void csv_field(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc(*s == ',' ? ';' : (*s == '\n' || *s == '\r') ? ' ' : *s, f);
}

void tmo_report(const struct tmo_run *run, const char *metric, const char *param, double value,
                const char *unit)
{
	struct tmo_report *r = run->report;
	pthread_mutex_lock(&r->mu);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "scenario", r->scenario, "engine",
	                      run->ops->name, "metric", metric, "param", param ? param : "", "unit",
	                      unit ? unit : "");
	/* JSON has no NaN or infinity: a value that is not a number is null. */
	json_object_set_new(o, "value", isfinite(value) ? json_real(value) : json_null());
	json_array_append_new(r->rows, o);
	pthread_mutex_unlock(&r->mu);
}

void tmo_violation(const struct tmo_run *run, const char *fmt, ...)
{
	struct tmo_report *r = run->report;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&r->mu);
	r->run_violations++;
	r->total_violations++;
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

void tmo_progress(const struct tmo_run *run, const char *what, double fraction)
{
	struct tmo_report *r = run->report;
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

void report_add_gbench_json(struct tmo_report *r, const char *json_text)
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

int report_write(struct tmo_report *r)
{
	if (r->json_path == NULL)
		return 0;
	pthread_mutex_lock(&r->mu);
	json_t *doc = json_pack("{s:O, s:O, s:O, s:O, s:O, s:O}", "context", r->context,
	                        "benchmarks", r->benchmarks, "rows", r->rows, "runs", r->runs,
	                        "violations", r->violations, "targets", r->targets);
	int rc = 0;
	if (doc == NULL || json_dump_file(doc, r->json_path, JSON_INDENT(1) | JSON_REAL_PRECISION(10)) != 0) {
		fprintf(stderr, "tmo-harness: cannot write %s: %s\n", r->json_path, strerror(errno));
		rc = -1;
	}
	json_decref(doc);
	FILE *f = fopen(r->csv_path, "w");
	if (f == NULL) {
		fprintf(stderr, "tmo-harness: cannot write %s: %s\n", r->csv_path, strerror(errno));
		pthread_mutex_unlock(&r->mu);
		return -1;
	}
	fputs("scenario,engine,metric,param,value,unit\n", f);
	json_t *row;
	size_t i;
	json_array_foreach(r->rows, i, row)
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
	if (fclose(f) != 0) {
		fprintf(stderr, "tmo-harness: cannot write %s: %s\n", r->csv_path, strerror(errno));
		rc = -1;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

void report_add_target(struct tmo_report *r, const char *what, double measured, const char *op,
                       double want, const char *unit, const char *verdict)
{
	pthread_mutex_lock(&r->mu);
	json_t *o = json_pack("{s:s, s:s, s:f, s:s, s:s}", "target", what, "op", op, "wanted", want,
	                      "unit", unit, "verdict", verdict);
	json_object_set_new(o, "measured", isfinite(measured) ? json_real(measured) : json_null());
	json_array_append_new(r->targets, o);
	pthread_mutex_unlock(&r->mu);
}

const char *report_csv_path(const struct tmo_report *r) { return r->csv_path; }

int report_lookup(struct tmo_report *r, const char *scenario, const char *engine,
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

int64_t report_violations(const struct tmo_report *r) { return r->total_violations; }
