/*
 * The end-of-run tables: throughput ratios (to the in-run floor and to the
 * thread engine) and the project's targets, measured vs wanted.  Computed
 * from the rows the scenarios reported in this process, so a target whose
 * inputs were not run says so instead of passing.
 */
#ifndef TMO_CLI_TARGETS_H
#define TMO_CLI_TARGETS_H

#include "kit/sink.h"

void targets_print(struct sk_sink *r, const struct sk_scenario *const *scenarios, int nscen,
                   const struct tmo_engine_ops *const *engines, int nengines);

#endif
