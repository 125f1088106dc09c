/* See targets.h.  The targets are the scenarios' data (struct sk_target);
 * this file only evaluates them.  The instruction count per arm+cancel
 * (<= 80, wheel) is scripts/instructions' figure, not a row here. */
#include "targets.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A metric the scenario declares, or NULL. */
static const struct sk_metric *declared(const struct sk_scenario *s, const char *metric)
{
	for (const struct sk_metric *m = s->metrics; m != NULL && m->name != NULL; m++)
		if (strcmp(m->name, metric) == 0)
			return m;
	return NULL;
}

static int check_one(const struct sk_scenario *s, FILE *err)
{
	int bad = 0;
	if (s->metrics == NULL) {
		fprintf(err, "scenario %s: declares no metrics\n", s->name);
		return 1;
	}
	for (const struct sk_metric *m = s->metrics; m->name != NULL; m++)
		if (m->unit == NULL || declared(s, m->name) != m) {
			fprintf(err, "scenario %s: metric %s declared twice or without a unit\n", s->name,
			        m->name);
			bad++;
		}
	for (const struct sk_size *z = s->sizes; z != NULL && z->name != NULL; z++)
		if (z->unit == NULL || sk_sink_size(s, z->name) != z || !(z->full > 0) ||
		    !(z->quick > 0) || isinf(z->full) || isinf(z->quick)) {
			fprintf(err, "scenario %s: size %s declared twice, without a unit, or not a "
			             "positive number\n",
			        s->name, z->name);
			bad++;
		}
	for (const struct sk_target *t = s->targets; t != NULL && t->label != NULL; t++) {
		const char *names[] = {t->metric, t->per_metric};
		for (int i = 0; i < 2; i++)
			if ((i == 0 || names[i] != NULL) && (names[i] == NULL || !declared(s, names[i]))) {
				fprintf(err, "scenario %s: target \"%s\" names the metric %s, which it does not "
				             "declare\n",
				        s->name, t->label, names[i] ? names[i] : "(none)");
				bad++;
			}
		if (t->engines == NULL || t->unit == NULL) {
			fprintf(err, "scenario %s: target \"%s\" names no engine or unit\n", s->name,
			        t->label);
			bad++;
		}
	}
	return bad;
}

int targets_check(const struct sk_scenario *const *scenarios, FILE *err)
{
	int bad = 0;
	for (const struct sk_scenario *const *s = scenarios; *s != NULL; s++)
		bad += check_one(*s, err);
	return bad;
}

void targets_list_metrics(const struct sk_scenario *const *scenarios, FILE *out)
{
	fprintf(out, "# scenario\tmetric\tunit\n");
	for (const struct sk_scenario *const *s = scenarios; *s != NULL; s++)
		for (const struct sk_metric *m = (*s)->metrics; m != NULL && m->name != NULL; m++)
			fprintf(out, "%s\t%s\t%s\n", (*s)->name, m->name, m->unit);
}

struct tally {
	int met, missed, unmeasured;
};

/* One row: `measured` compared with the bound; NaN is "not measured". */
static void row(struct sk_sink *r, struct tally *n, const char *what, double measured,
                const struct sk_target *t, double want, const char *why_missing)
{
	const char *op = t->cmp == SK_AT_LEAST ? ">=" : "<=";
	char m[48], w[48];
	const char *verdict;
	if (isnan(measured)) {
		snprintf(m, sizeof m, "-");
		verdict = why_missing;
		n->unmeasured++;
	} else {
		snprintf(m, sizeof m, "%.3g%s", measured, t->unit);
		int ok = t->cmp == SK_AT_LEAST ? measured >= want : measured <= want;
		verdict = ok ? "met" : "NOT MET";
		if (ok)
			n->met++;
		else
			n->missed++;
	}
	snprintf(w, sizeof w, "%s %.3g%s", op, want, t->unit);
	printf("  %-46s %12s %12s  %s\n", what, m, w, verdict);
	sk_sink_add_target(r, what, measured, op, want, t->unit, verdict);
}

/* The largest N > 2 with a row (engine, metric, "threads=N"), or 0. */
static int most_threads(const struct sk_results *res, const char *scen, const char *engine,
                        const char *metric)
{
	char param[32];
	for (int t = 256; t > 2; t--) {
		snprintf(param, sizeof param, "threads=%d", t);
		if (!isnan(sk_figure(res, scen, engine, metric, param)))
			return t;
	}
	return 0;
}

/* The target's row for one engine. */
static void evaluate(const struct sk_results *res, struct tally *n, const char *scen,
                     const struct sk_target *t, const char *engine)
{
	char what[128], why[128], param[32];
	const char *p = t->param ? t->param : "";
	double want = t->bound;
	int most = 0;
	if (t->most_threads) {
		most = most_threads(res, scen, engine, t->metric);
		if (most == 0)
			return;
		snprintf(param, sizeof param, "threads=%d", most);
		p = param;
		want *= most;
		snprintf(what, sizeof what, t->label, most);
	} else {
		snprintf(what, sizeof what, t->label, engine);
	}
	double v = sk_figure(res, scen, engine, t->metric, p);
	const char *absent = engine;
	if (t->per_metric || t->per_param || t->per_engine) {
		const char *pe = t->per_engine ? t->per_engine : engine;
		double d = sk_figure(res, scen, pe, t->per_metric ? t->per_metric : t->metric,
		                     t->per_param ? t->per_param : p);
		if (!isnan(v) && isnan(d))
			absent = pe;
		v = t->inverse ? d / v : v / d;
	}
	v *= t->scale != 0 ? t->scale : 1;
	snprintf(why, sizeof why, t->missing ? t->missing : "not measured (%s not run)", absent);
	row(res->sink, n, what, v, t, want, why);
}

/* Every row of one target: its engines in its order, or "*": each engine run. */
static void evaluate_all(const struct sk_results *res, struct tally *n, const char *scen,
                         const struct sk_target *t)
{
	if (strcmp(t->engines, "*") == 0) {
		for (int i = 0; i < res->nengines; i++)
			evaluate(res, n, scen, t, res->engines[i]->name);
		return;
	}
	char list[128];
	snprintf(list, sizeof list, "%s", t->engines);
	char *save = NULL;
	for (char *e = strtok_r(list, ",", &save); e != NULL; e = strtok_r(NULL, ",", &save))
		evaluate(res, n, scen, t, e);
}

void targets_print(struct sk_sink *r, const struct sk_scenario *const *scenarios, int nscen,
                   const struct tmo_engine_ops *const *engines, int nengines)
{
	struct sk_results res = {r, engines, nengines};
	int any = 0;
	for (int i = 0; i < nscen; i++) {
		if (scenarios[i]->end_table != NULL)
			scenarios[i]->end_table(&res);
		any |= scenarios[i]->targets != NULL;
	}
	if (!any)
		return;
	struct tally n = {0, 0, 0};
	printf("\n==== targets (measured in this run) ====\n");
	printf("  %-46s %12s %12s  %s\n", "target", "measured", "wanted", "verdict");
	for (int i = 0; i < nscen; i++)
		for (const struct sk_target *t = scenarios[i]->targets; t != NULL && t->label; t++)
			evaluate_all(&res, &n, scenarios[i]->name, t);
	printf("  %d met, %d not met, %d not measured (targets are reported, not asserted)\n",
	       n.met, n.missed, n.unmeasured);
}
