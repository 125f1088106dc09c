/*
 * A number on the command line: digits only.  No blank (strtoull skips
 * leading ones), no sign (strtoull reads "-1" as 2^64 - 1, so " -1" slipped
 * past a check for a leading '-'), no "0x", nothing after the digits, not
 * empty, and within [min, max] (overflow included).  Every numeric option
 * of tmo-harness and tmo-seedloop reads its value through this.
 */
#ifndef TMO_CLI_DIGITS_H
#define TMO_CLI_DIGITS_H

#include <stdint.h>

enum cli_num {
	CLI_NUM_OK = 0,
	CLI_NUM_EMPTY,      /* no value at all */
	CLI_NUM_NOT_DIGITS, /* a character other than 0-9 */
	CLI_NUM_RANGE,      /* digits, but below min or above max */
};

/* The reason's words, for "--NAME=VALUE: <words>: want ...". */
static inline const char *cli_num_words(enum cli_num r)
{
	return r == CLI_NUM_EMPTY        ? "empty"
	       : r == CLI_NUM_NOT_DIGITS ? "not a number (digits only: no blank, sign or other "
	                                   "character)"
	                                 : "out of range";
}

static inline enum cli_num cli_parse_u64(const char *s, uint64_t min, uint64_t max,
                                         uint64_t *out)
{
	if (s == NULL || *s == '\0')
		return CLI_NUM_EMPTY;
	for (const char *p = s; *p != '\0'; p++)
		if (*p < '0' || *p > '9')
			return CLI_NUM_NOT_DIGITS;
	uint64_t v = 0;
	for (; *s != '\0'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (max - d) / 10) /* v * 10 + d > max, without overflowing */
			return CLI_NUM_RANGE;
		v = v * 10 + d;
	}
	if (v < min)
		return CLI_NUM_RANGE;
	*out = v;
	return CLI_NUM_OK;
}

#endif
