/*
 * cancel.c: mpsc's and the wheel's cancel (the own ring's one CAS, then
 * whichever state the node is in).
 */
#ifndef TMO_LF_CANCEL_H
#define TMO_LF_CANCEL_H

#include "lf.h"

int tmo__lf_cancel(struct tmo *e, struct tmo_timer *t);

#endif /* TMO_LF_CANCEL_H */
