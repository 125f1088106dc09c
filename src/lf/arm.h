/*
 * arm.c: mpsc's and the wheel's arm (the ring's fast path, the spill of an
 * evicted arm) and the timer thread's own arm.
 */
#ifndef TMO_LF_ARM_H
#define TMO_LF_ARM_H

#include "lf.h"

int tmo__lf_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg);
/* The timer thread's own arm (from a callback): filed at once. */
int tmo__lf_arm_on_timer(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                         void *arg);

#endif /* TMO_LF_ARM_H */
