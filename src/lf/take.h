/*
 * take.c: what the timer thread takes, filed into its own base or held as
 * a far arm until its sweep; timer.c (the loop) uses it.  Timer thread
 * only.
 */
#ifndef TMO_LF_TAKE_H
#define TMO_LF_TAKE_H

#include "tt.h"

/* A QUEUED node we hold goes into our base (or waits on `unfiled`). */
void tmo__lf_file_tt(struct tmo *e, struct lf_node *n, uint64_t gen, int64_t deadline);
/* Each round while tt->unfiled holds nodes: file them again. */
void tmo__lf_retry_unfiled(struct tmo *e);
/* Hold a QUEUED node dated `deadline` as a far arm if that is far from
 * `now`; 0: the caller files it. */
int tmo__lf_far_hold(struct tmo *e, struct lf_node *n, int64_t deadline, int64_t now);
/* A node in transit we hold, its state s read: filed, held far (dated
 * first, `later` a clock reading after its arm or 0), or freed if a cancel
 * dropped it. */
void tmo__lf_take_node(struct tmo *e, struct lf_node *n, uint64_t s, int64_t now, int64_t later);
/* Every far arm filed or freed (parking). */
void tmo__lf_far_file_all(struct tmo *e);
/* Each round while far arms are held, before it collects. */
void tmo__lf_far_round(struct tmo *e, int64_t now);
/* A long sleep ahead, none held: the far lists' memory goes back. */
void tmo__lf_far_shrink(struct tmo *e);

#endif /* TMO_LF_TAKE_H */
