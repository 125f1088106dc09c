/*
 * fire.c: the timer thread collects what is due from every base, orders it
 * by deadline and runs the callbacks.
 */
#ifndef TMO_LF_FIRE_H
#define TMO_LF_FIRE_H

#include "tt.h"

int64_t tmo__lf_collect_all(struct tmo *e, int64_t now, int64_t lead, int64_t *wake);
void tmo__lf_due_compact(struct tmo *e);
void tmo__lf_due_order(struct tmo *e);
void tmo__lf_fire(struct tmo *e, struct due *d);
void tmo__lf_due_shrink(struct tmo *e);

#endif /* TMO_LF_FIRE_H */
