/*
 * count.c: arms, prevented cancels and fires summed over every thread's
 * counters.
 */
#ifndef TMO_LF_COUNT_H
#define TMO_LF_COUNT_H

#include "lf.h"

/* Arms, prevented cancels and fires summed over every counter (relaxed). */
void tmo__lf_counts(struct tmo *e, uint64_t *armed, uint64_t *prevented, uint64_t *fired);
/* Armed, neither fired nor prevented (a sum over every thread's counters). */
uint64_t tmo__lf_pending(struct tmo *e);

#endif /* TMO_LF_COUNT_H */
