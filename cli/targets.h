/*
 * The end-of-run tables: each scenario's own summary, then the targets the
 * scenarios declare (struct sk_target, beside their metrics), measured vs
 * wanted.  Computed from the rows the scenarios reported in this process, so
 * a target whose inputs were not run says so instead of passing.
 */
#ifndef TMO_CLI_TARGETS_H
#define TMO_CLI_TARGETS_H

#include <stdio.h>

#include "kit/sink.h"

/* The declarations are consistent: every metric named once with a unit,
 * every size named once with a unit and positive full and --quick values, and
 * every target names a metric its scenario declares (a renamed metric is an
 * error here, never a target "not measured").  Each problem is printed to
 * `err`; returns their number. */
int targets_check(const struct sk_scenario *const *scenarios, FILE *err);

/* The summaries and targets of the scenarios that ran (NULL-free arrays). */
void targets_print(struct sk_sink *r, const struct sk_scenario *const *scenarios, int nscen,
                   const struct tmo_engine_ops *const *engines, int nengines);

/* Every declared metric, one line each: "scenario<TAB>metric<TAB>unit", after a
 * "# scenario<TAB>metric<TAB>unit" header (scripts/lib/metrics.tsv is this). */
void targets_list_metrics(const struct sk_scenario *const *scenarios, FILE *out);

#endif
