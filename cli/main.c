/*
 * tmo-harness: runs scenarios (scenarios/NAME.c) against engines (impls/NAME.c).
 * `./harness --help` is the manual.  Exit status: 0 all runs clean, 1 a
 * violation, a run that could not run, or results that could not be
 * written, 2 bad command line, 3 an --impl=PATH.so that is no engine
 * (tmo/engine.h: the error's name and why), 77 every run skipped (a per-user resource
 * other processes hold), 130/143 interrupted (what finished is kept).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "digits.h"
#include "kit/gbench.h"
#include "kit/sk.h"
#include "targets.h"
#include "tmo/engine.h"

#define MAX_SEL 64

/* The watchdog's limit per scenario x engine run, far above any healthy run
 * (the race scenario's time cap is 120 s). */
#ifndef WATCHDOG_QUICK_S
#define WATCHDOG_QUICK_S 600
#endif
#define WATCHDOG_FULL_S 1800

static const struct option longopts[] = {
	{"impl", required_argument, NULL, 'i'},   {"scenario", required_argument, NULL, 's'},
	{"threads", required_argument, NULL, 't'}, {"json", required_argument, NULL, 'j'},
	{"quick", no_argument, NULL, 'q'},         {"seed", required_argument, NULL, 'S'},
	{"list", no_argument, NULL, 'l'},          {"help", no_argument, NULL, 'h'},
	{"repeat", required_argument, NULL, 'r'},  {"list-metrics", no_argument, NULL, 'm'},
	{NULL, 0, NULL, 0},
};

/* ARG is a long option that takes a value and was not given one with '=':
 * the next element is its value (e.g. "--threads 4"). */
static int value_follows(const char *arg)
{
	if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0' || strchr(arg, '=') != NULL)
		return 0;
	for (const struct option *o = longopts; o->name != NULL; o++)
		if (o->has_arg == required_argument && strncmp(o->name, arg + 2, strlen(arg + 2)) == 0)
			return 1;
	return 0;
}

/* The command line, parsed. */
struct opts {
	const char *impl, *scen, *json;
	uint64_t threads, seed, repeat;
	int quick, list, list_metrics;
	/* Google Benchmark's flags and ours, each with argv[0] first.  Static
	 * storage: the vectors live as long as the process, so the early
	 * returns leak nothing (LeakSanitizer, asan step). */
	char **ours, **gbs;
	int nours, ngbs;
};

/* Google Benchmark's flags go to it, the rest to getopt_long.  Returns 0, or
 * the exit status of a bad command line. */
static int split_args(int argc, char **argv, struct opts *o)
{
	static char **ours, **gbs;
	ours = calloc((size_t)argc + 1, sizeof *ours);
	gbs = calloc((size_t)argc + 1, sizeof *gbs);
	int nours = 0, ngbs = 0, options_end = 0;
	ours[nours++] = gbs[ngbs++] = argv[0];
	for (int i = 1; i < argc; i++) {
		if (options_end || (i > 1 && value_follows(argv[i - 1]))) {
			ours[nours++] = argv[i];
		} else if (strcmp(argv[i], "--") == 0) {
			options_end = 1;
			ours[nours++] = argv[i];
		} else if (argv[i][0] == '-' && argv[i][1] != '-' && argv[i][1] != '\0') {
			/* Every option is long: "-xy" is the unknown option "-x". */
			char opt[3] = {'-', argv[i][1], '\0'};
			return cli_usage_error("unknown option '%s' (options are long: --impl=NAME ...)", opt);
		} else if (strncmp(argv[i], "--benchmark_", 12) == 0) {
			/* The harness owns the output: its console table and --json. */
			if (strncmp(argv[i], "--benchmark_out", 15) == 0 ||
			    strncmp(argv[i], "--benchmark_format", 18) == 0)
				return cli_usage_error("'%s': results go to --json=FILE (Google Benchmark's "
				                       "JSON is in it)",
				                       argv[i]);
			gbs[ngbs++] = argv[i];
		} else {
			ours[nours++] = argv[i];
		}
	}
	o->ours = ours, o->gbs = gbs, o->nours = nours, o->ngbs = ngbs;
	return 0;
}

/* An option with a number (digits only, cli/digits.h): its value, or the
 * exit status of a bad one, named: "--seed=' -1': not a number ...". */
static int number(const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
	enum cli_num r = cli_parse_u64(optarg, min, max, out);
	if (r == CLI_NUM_OK)
		return 0;
	char fmt[224];
	snprintf(fmt, sizeof fmt, "--%s='%%s': %s: want an integer %llu..%llu", name,
	         cli_num_words(r), (unsigned long long)min, (unsigned long long)max);
	return cli_usage_error(fmt, optarg);
}

/* getopt_long over our options.  Returns -1 to go on, or an exit status. */
static int parse_options(struct opts *o)
{
	opterr = 0;
	int c, rc = 0;
	while (rc == 0 && (c = getopt_long(o->nours, o->ours, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': o->impl = optarg; break;
		case 's': o->scen = optarg; break;
		case 'j': o->json = optarg; break;
		case 'q': o->quick = 1; break;
		case 'l': o->list = 1; break;
		case 'm': o->list_metrics = 1; break;
		case 'h': cli_usage(stdout); return cli_finish_output(0);
		case 't': rc = number("threads", 1, 256, &o->threads); break;
		case 'r': rc = number("repeat", 1, 100, &o->repeat); break;
		case 'S': rc = number("seed", 0, UINT64_MAX, &o->seed); break;
		case ':': return cli_usage_error("option '%s' needs a value", o->ours[optind - 1]);
		default:
			/* Short options were refused above: optopt set means a long
			 * option that takes no value was given one. */
			for (const struct option *l = longopts; optopt != 0 && l->name != NULL; l++)
				if (l->val == optopt)
					return cli_usage_error("option '--%s' takes no value", l->name);
			return cli_usage_error("unknown or ambiguous option '%s'", o->ours[optind - 1]);
		}
	}
	if (rc != 0)
		return rc;
	if (optind < o->nours)
		return cli_usage_error("unexpected argument '%s'", o->ours[optind]);
	if (sk_gb_init(o->ngbs, o->gbs) != 0)
		return cli_usage_error("%s", "Google Benchmark flags above refused");
	return -1;
}

/* The names a selection chooses from: engines or scenarios. */
struct menu {
	const char *kind;                 /* "engine" */
	const char *option;               /* "--impl" */
	const void *const *all;           /* NULL-terminated */
	const char *(*name)(const void *);
	/* A word that names a file (engines: a shared object), or NULL. */
	const void *(*load)(const char *path);
};
static const char *engine_name(const void *e) { return ((const struct tmo_engine_ops *)e)->name; }
static const char *scenario_name(const void *s) { return ((const struct sk_scenario *)s)->name; }

/* --impl=PATH.so: the engine in that shared object (tmo/engine.h), or NULL
 * after naming why (exit EXIT_LOAD). */
static const void *engine_load(const char *path)
{
	const struct tmo_engine_ops *ops;
	char why[512];
	int rc = tmo_engine_load(path, &ops, why, sizeof why);
	if (rc == 0)
		return ops;
	fprintf(stderr, "tmo-harness: --impl=%s: %s: %s\n", path, tmo_load_errname(rc), why);
	return NULL;
}

/* One word of a selection: a name in m->all, or (m->load) a file.  Returns
 * it, or NULL after printing why (*rc: -1, exit 2; -EXIT_LOAD: the file is
 * no engine). */
static const void *find_word(const struct menu *m, const char *tok, int *rc)
{
	if (m->load != NULL && tmo_engine_is_path(tok)) {
		const void *loaded = m->load(tok);
		*rc = loaded == NULL ? -EXIT_LOAD : 0;
		return loaded;
	}
	for (const void *const *e = m->all; *e != NULL; e++)
		if (strcmp(m->name(*e), tok) == 0)
			return *e;
	fprintf(stderr, "tmo-harness: unknown %s '%s' (%ss:", m->kind, tok, m->kind);
	for (const void *const *e = m->all; *e != NULL; e++)
		fprintf(stderr, " %s", m->name(*e));
	fprintf(stderr, ")\n");
	*rc = -1;
	return NULL;
}

/* Split a comma list; "all" (or no list) selects everything; a word that
 * names a file is loaded (m->load).  Returns the count, or after printing
 * an error -1 (exit 2) or -EXIT_LOAD (the file is no engine). */
static int choose(const struct menu *m, const char *list, const void **out)
{
	int n = 0, rc = 0;
	if (list == NULL || strcmp(list, "all") == 0) {
		for (const void *const *e = m->all; *e != NULL && n < MAX_SEL; e++)
			out[n++] = *e;
		return n;
	}
	char *copy = strdup(list), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		const void *e = find_word(m, tok, &rc);
		int dup = 0;
		for (int i = 0; e != NULL && i < n; i++) {
			dup |= out[i] == e;
			if (out[i] != e && strcmp(m->name(out[i]), m->name(e)) == 0) {
				/* two shared objects with one name: their rows would mix */
				fprintf(stderr, "tmo-harness: %s '%s' given twice (%s)\n", m->kind,
				        m->name(e), tok);
				rc = -1;
			}
		}
		if (e != NULL && rc == 0 && !dup && n < MAX_SEL)
			out[n++] = e;
	}
	free(copy);
	if (rc != 0)
		return rc;
	if (n == 0)
		fprintf(stderr, "tmo-harness: %s names no %s\n", m->option, m->kind);
	return n == 0 ? -1 : n;
}

/* The command line as the JSON records it: "./harness" and the arguments. */
static char *command_line(int argc, char **argv)
{
	size_t cmdlen = 16;
	for (int i = 0; i < argc; i++)
		cmdlen += strlen(argv[i]) + 1;
	char *command = calloc(1, cmdlen);
	strcpy(command, "./harness");
	for (int i = 1; i < argc; i++) {
		strcat(command, " ");
		strcat(command, argv[i]);
	}
	return command;
}

/* What a scenario x engine run came to, for the summary. */
struct outcome {
	const char *scenario, *engine;
	int result;
	double seconds;
};

/* What was selected, and where the runs' outcomes go. */
struct plan {
	const struct tmo_engine_ops *engines[MAX_SEL];
	const struct sk_scenario *scenarios[MAX_SEL];
	int nengines, nscen;
	struct outcome *outcomes;
	int nout, failed, skipped;
};

/* One scenario against one engine; the results are written after it, so a
 * crash or the watchdog leaves the runs that finished ("complete": false). */
static void run_one(const struct opts *o, struct plan *p, struct sk_sink *rep,
                    const struct sk_scenario *sc, const struct tmo_engine_ops *ops)
{
	struct sk_run run = {ops, (int)o->threads, o->quick, o->seed, rep, (int)o->repeat};
	printf("\n==== %s / %s ====\n", sc->name, ops->name);
	sk_sink_begin_run(rep, sc, ops->name);
	cli_watchdog_arm(sc->name, ops->name,
	                 (o->quick ? WATCHDOG_QUICK_S : WATCHDOG_FULL_S) * TMO_NSEC_PER_SEC);
	int64_t t0 = tmo_now_ns();
	int result = sc->run(&run);
	cli_watchdog_arm(NULL, NULL, 0);
	double secs = (double)(tmo_now_ns() - t0) / 1e9;
	if (sk_sink_end_run(rep, result, secs) != 0)
		p->failed = 1; /* rows refused: printed as they came */
	if (result == SK_SKIPPED)
		p->skipped++;
	else if (result < 0)
		fprintf(stderr, "[%s/%s] could not run: %s (%s)\n", sc->name, ops->name,
		        tmo_errname(result), tmo_strerror(result));
	if (result != 0 && result != SK_SKIPPED)
		p->failed = 1;
	p->outcomes[p->nout++] = (struct outcome){sc->name, ops->name, result, secs};
	if (sk_sink_write(rep, 0) != 0)
		p->failed = 1;
}

static void print_summary(const struct plan *p)
{
	printf("\n==== summary ====\n");
	printf("%-12s %-10s %-12s %8s\n", "scenario", "engine", "result", "seconds");
	for (int i = 0; i < p->nout; i++) {
		const struct outcome *x = &p->outcomes[i];
		char res[48];
		if (x->result == SK_SKIPPED)
			snprintf(res, sizeof res, "skipped");
		else if (x->result < 0)
			snprintf(res, sizeof res, "%s", tmo_errname(x->result));
		else if (x->result > 0)
			snprintf(res, sizeof res, "%d violations", x->result);
		else
			snprintf(res, sizeof res, "ok");
		printf("%-12s %-10s %-12s %8.2f\n", x->scenario, x->engine, res, x->seconds);
	}
}

/* The verdict line and the exit status of a finished plan. */
static int verdict(const struct opts *o, const struct plan *p)
{
	int all_skipped = !p->failed && p->nout > 0 && p->skipped == p->nout;
	if (p->failed)
		printf("FAILED: see the violations / errors above\n");
	else if (all_skipped)
		printf("every run skipped: see SKIPPED above for why\n");
	else if (p->skipped)
		printf("all runs clean, %d skipped (see SKIPPED above)\n", p->skipped);
	else
		printf("all runs clean\n");
	if (!p->failed && strcmp(o->scen, CLI_DEFAULT_SCENARIO) == 0 &&
	    tmo_engine_find(p->engines[0]->name) != NULL)
		printf("next: ./harness --list (engines, scenarios); ./harness --impl=%s "
		       "--scenario=throughput --quick\n",
		       p->engines[0]->name);
	return p->failed ? 1 : all_skipped ? EXIT_ALL_SKIPPED : 0;
}

/* Every selected scenario against every selected engine, then the summary,
 * the targets and the final results.  Returns the exit status. */
static int run_plan(const struct opts *o, struct plan *p, struct sk_sink *rep)
{
	if (cli_signals_start(rep, o->json) != 0) {
		fprintf(stderr, "tmo-harness: cannot start the signal thread\n");
		return 1;
	}
	p->outcomes = calloc((size_t)(p->nscen * p->nengines), sizeof *p->outcomes);
	cli_watchdog_start();
	for (int s = 0; s < p->nscen; s++)
		for (int e = 0; e < p->nengines; e++)
			run_one(o, p, rep, p->scenarios[s], p->engines[e]);
	cli_watchdog_stop();
	print_summary(p);
	targets_print(rep, p->scenarios, p->nscen, p->engines, p->nengines);
	if (cli_signals_finish(sk_sink_write, rep) != 0) /* again: with the targets, complete */
		p->failed = 1;
	if (o->json != NULL)
		printf("\nresults: %s and %s\n", o->json, sk_sink_csv_path(rep));
	int rc = verdict(o, p);
	free(p->outcomes);
	return rc;
}

/* The selection, the report and the runs.  Returns the exit status. */
static int harness(int argc, char **argv, const struct opts *o)
{
	static const struct menu engines = {"engine", "--impl", NULL, engine_name, engine_load};
	static const struct menu scenarios = {"scenario", "--scenario", (const void *const *)sk_scenarios,
	                                      scenario_name, NULL};
	struct menu em = engines;
	em.all = (const void *const *)tmo_engines();
	struct plan p = {.nout = 0};
	p.nengines = choose(&em, o->impl, (const void **)p.engines);
	if (p.nengines == 0)
		fprintf(stderr, "tmo-harness: no engine is built (impls/ is empty)\n");
	if (p.nengines == -EXIT_LOAD)
		return EXIT_LOAD;
	if (p.nengines <= 0 || (p.nscen = choose(&scenarios, o->scen, (const void **)p.scenarios)) < 0)
		return 2;
	const char *scale = getenv("TMO_TEST_SCALE");
	if (scale != NULL)
		printf("TMO_TEST_SCALE=%s: scenario sizes are scaled by it (sanitizer runs)\n", scale);
	char *command = command_line(argc, argv);
	struct sk_sink_opts ro = {o->json, "./harness", (int)o->threads, o->quick, o->seed, command};
	struct sk_sink *rep = sk_sink_open(&ro);
	int rc;
	if (rep == NULL) {
		fprintf(stderr, "tmo-harness: out of memory\n");
		rc = 1;
	} else if (sk_sink_check_writable(rep) != 0) {
		/* An unwritable --json is a bad command line: found out before
		 * running, without touching the file. */
		rc = cli_usage_error("--json=%s: cannot write the results there", o->json);
	} else {
		rc = run_plan(o, &p, rep);
	}
	sk_sink_close(rep);
	free(command);
	return rc;
}

int main(int argc, char **argv)
{
	cli_hold_standard_fds();
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct opts o = {.scen = CLI_DEFAULT_SCENARIO, .threads = 2, .seed = 1, .repeat = 1};
	int rc = split_args(argc, argv, &o);
	if (rc == 0)
		rc = parse_options(&o);
	if (rc >= 0)
		return rc;
	/* The declarations are checked before anything runs: a target naming
	 * a metric no scenario reports is the harness's bug, exit 1. */
	if (targets_check(sk_scenarios, stderr) != 0) {
		fprintf(stderr, "tmo-harness: the scenarios' metric or target tables are wrong\n");
		return 1;
	}
	if (o.list) {
		cli_list();
		return cli_finish_output(0);
	}
	if (o.list_metrics) {
		targets_list_metrics(sk_scenarios, stdout);
		return cli_finish_output(0);
	}
	rc = harness(argc, argv, &o);
	free(o.ours);
	free(o.gbs);
	return cli_finish_output(rc);
}
