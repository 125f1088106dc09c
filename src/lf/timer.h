/*
 * timer.c: the timer thread's loop (ticks, stealing from the rings,
 * draining the inbox, filing, sleeping).
 */
#ifndef TMO_LF_TIMER_H
#define TMO_LF_TIMER_H

#include "tt.h"

void *tmo__lf_timer_main(void *arg);

#endif /* TMO_LF_TIMER_H */
