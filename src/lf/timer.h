/*
 * timer.c: the timer thread's loop (ticks, what it takes from the
 * producers (take.c), collecting and firing (fire.c), sleeping).
 */
#ifndef TMO_LF_TIMER_H
#define TMO_LF_TIMER_H

#include "tt.h"

void *tmo__lf_timer_main(void *arg);

#endif /* TMO_LF_TIMER_H */
