/*
 * spawn_loop: the workload of `cargo xtask bench` (see BENCHMARKS.md).
 *
 *   spawn_loop ITERATIONS PROGRAM
 *
 * Runs ITERATIONS times: fork(), execl(PROGRAM) in the child, waitpid() in the parent.
 * PROGRAM is meant to be a dynamically linked `int main(void) { return 0; }`.
 * Prints one line on stdout:
 *
 *   spawn_loop: iterations=N total_ns=T us_per_iter=U
 *
 * timed with CLOCK_MONOTONIC around the loop only, so a tracer's own start-up and
 * tear-down are not in U. Exits 1 (with a message on stderr) if any iteration fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: spawn_loop ITERATIONS PROGRAM\n");
		return 2;
	}
	char *end = NULL;
	errno = 0;
	long n = strtol(argv[1], &end, 10);
	if (errno || end == argv[1] || *end || n <= 0) {
		fprintf(stderr, "spawn_loop: bad ITERATIONS '%s'\n", argv[1]);
		return 2;
	}
	const char *prog = argv[2];

	long long start = now_ns();
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			fprintf(stderr, "spawn_loop: fork: %s\n", strerror(errno));
			return 1;
		}
		if (pid == 0) {
			execl(prog, prog, (char *)NULL);
			_exit(127);
		}
		int status;
		if (waitpid(pid, &status, 0) != pid) {
			fprintf(stderr, "spawn_loop: waitpid: %s\n", strerror(errno));
			return 1;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "spawn_loop: %s failed (status 0x%x)\n", prog, status);
			return 1;
		}
	}
	long long total = now_ns() - start;

	printf("spawn_loop: iterations=%ld total_ns=%lld us_per_iter=%.3f\n", n, total,
	       (double)total / 1000.0 / (double)n);
	return 0;
}
