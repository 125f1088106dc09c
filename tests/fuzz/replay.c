/*
 * Replay runner for the libFuzzer targets, for any compiler: feeds every
 * file of the given directories (or the given files) to
 * LLVMFuzzerTestOneInput, then --random N pseudo-random inputs from a fixed
 * seed.  A target aborts on a mismatch; the runner then names the input (and
 * writes a random one to ./fuzz-replay-crash so libFuzzer or this runner can
 * rerun it).  Fails when the paths held no input at all, so a missing corpus
 * cannot pass silently.
 *
 *   fuzz_replay_wheel [--random N] [--expect-mismatch] PATH...
 *
 * --expect-mismatch turns it around, for a build with a planted bug: exit 0
 * at the first mismatch, 1 if every input passed.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../scenarios/kit/shared.h" /* sk_rng */
#include "input.h"

static const char *current_name = "(none)";
static const uint8_t *current_data;
static size_t current_size;
static int current_is_random;
static int expect_mismatch;

static void on_abort(int sig)
{
	/* async-signal-safe only: write, open, close, _exit */
	static const char msg[] = "fuzz-replay: the failing input is ";
	ssize_t rc = write(2, msg, sizeof msg - 1);
	if (expect_mismatch) {
		static const char ok[] = "fuzz-replay: the planted bug was caught, as expected\n";
		rc = write(2, current_name, strlen(current_name));
		rc = write(2, "\n", 1);
		rc = write(2, ok, sizeof ok - 1);
		(void)rc;
		_exit(0);
	}
	rc = write(2, current_name, strlen(current_name));
	rc = write(2, "\n", 1);
	if (current_is_random) {
		int fd = open("fuzz-replay-crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			rc = write(fd, current_data, current_size);
			close(fd);
			static const char saved[] = "fuzz-replay: saved to ./fuzz-replay-crash\n";
			rc = write(2, saved, sizeof saved - 1);
		}
	}
	(void)rc;
	signal(sig, SIG_DFL);
	raise(sig);
}

static void run_one(const char *name, const uint8_t *data, size_t size, int is_random)
{
	current_name = name;
	current_data = data;
	current_size = size;
	current_is_random = is_random;
	LLVMFuzzerTestOneInput(data, size);
}

/* Returns 0 on success, -1 when the file could not be read. */
static int run_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (fp == NULL)
		return -1;
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			uint8_t *nb = realloc(buf, cap);
			if (nb == NULL) {
				free(buf);
				fclose(fp);
				return -1;
			}
			buf = nb;
		}
		size_t got = fread(buf + len, 1, cap - len, fp);
		len += got;
		if (got == 0)
			break;
	}
	int err = ferror(fp);
	fclose(fp);
	if (!err)
		run_one(path, buf, len, 0);
	free(buf);
	return err ? -1 : 0;
}

/* Feeds a file, or every regular file of a directory; returns how many, or
 * -1 on an unreadable path. */
static long run_path(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "fuzz-replay: cannot stat %s\n", path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return run_file(path) == 0 ? 1 : -1;
	DIR *d = opendir(path);
	if (d == NULL)
		return -1;
	long count = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char full[4096];
		snprintf(full, sizeof full, "%s/%s", path, de->d_name);
		if (stat(full, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (run_file(full) != 0) {
			fprintf(stderr, "fuzz-replay: cannot read %s\n", full);
			closedir(d);
			return -1;
		}
		count++;
	}
	closedir(d);
	return count;
}

int main(int argc, char **argv)
{
	long random_n = 0, files = 0;
	int paths = 0;
	signal(SIGABRT, on_abort);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--random") == 0 && i + 1 < argc) {
			random_n = strtol(argv[++i], NULL, 10);
			continue;
		}
		if (strcmp(argv[i], "--expect-mismatch") == 0) {
			expect_mismatch = 1;
			continue;
		}
		paths++;
		long c = run_path(argv[i]);
		if (c < 0)
			return 1;
		files += c;
	}
	if (paths == 0 && random_n == 0) {
		fprintf(stderr, "usage: %s [--random N] [--expect-mismatch] PATH...\n", argv[0]);
		return 2;
	}
	if (paths > 0 && files == 0) {
		fprintf(stderr, "fuzz-replay: no input files under the given paths\n");
		return 1;
	}
	struct sk_rng rng;
	sk_rng_init(&rng, 1); /* the random inputs are this sequence: keep the seed */
	static uint8_t buf[1024];
	char name[64];
	for (long i = 0; i < random_n; i++) {
		size_t len = (size_t)(sk_rand(&rng) % sizeof buf) + 1;
		for (size_t j = 0; j < len; j++)
			buf[j] = (uint8_t)sk_rand(&rng);
		snprintf(name, sizeof name, "random input #%ld", i);
		run_one(name, buf, len, 1);
	}
	printf("fuzz-replay: %ld corpus files and %ld random inputs passed\n", files, random_n);
	if (expect_mismatch) {
		fprintf(stderr, "fuzz-replay: --expect-mismatch, but no input found one\n");
		return 1;
	}
	return 0;
}
