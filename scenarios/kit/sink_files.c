/* The results sink's files: the JSON and the CSV beside it, each written
 * whole or not at all (see sink.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sink_state.h"

/* Keep text fields comma- and newline-free so the CSV needs no quoting
 * (gnuplot's CSV reader does not understand quotes): a param's list
 * "threads=2,live=1000" is written "threads=2;live=1000" in the CSV. */
static void csv_field(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc(*s == ',' ? ';' : (*s == '\n' || *s == '\r') ? ' ' : *s, f);
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
	                    "load_avg_end", sk_sink_load_avg());
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
