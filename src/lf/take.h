/*
 * take.c: what the timer thread takes from the producers (ring arms it
 * steals, the inbox it drains), filed in its own base.
 */
#ifndef TMO_LF_TAKE_H
#define TMO_LF_TAKE_H

#include "tt.h"

/* Walk every record: steal every arm still in its ring, note activity,
 * lower *transit to what an owner holds in transit (timer.c, Order) and
 * *earliest to the deadline of the earliest arm stolen.  Returns 1 if any
 * thread armed since the last look, or it stole. */
int tmo__lf_steal_rings(struct tmo *e, int64_t *transit, int64_t *earliest);
/* Take the inbox and file it, oldest first.  Returns 1 if it held anything. */
int tmo__lf_drain_inbox(struct tmo *e);
/* File again the QUEUED nodes the base could not take (out of memory). */
void tmo__lf_retry_unfiled(struct tmo *e);

#endif /* TMO_LF_TAKE_H */
