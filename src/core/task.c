/* What the kernel says of one of this process's threads. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

bool tmo__task_blocked(pid_t tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *rp = strrchr(buf, ')'); /* "tid (comm) S ...": comm may hold anything */
	return rp != NULL && rp[1] == ' ' && (rp[2] == 'S' || rp[2] == 'D');
}
