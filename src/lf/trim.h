/*
 * trim.c: the timer thread gives fully free pages back.
 */
#ifndef TMO_LF_TRIM_H
#define TMO_LF_TRIM_H

#include "pool.h"

/* Timer thread: give back fully free pages (keeping `keep` free nodes). */
void tmo__lf_pool_trim(struct tmo *e);

#endif /* TMO_LF_TRIM_H */
