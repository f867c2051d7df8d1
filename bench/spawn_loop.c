/*
 * spawn_loop: the workload of `cargo xtask bench` (see BENCHMARKS.md).
 *
 *   spawn_loop ITERATIONS PROGRAM
 *   spawn_loop ITERATIONS --vfork-exit
 *
 * Runs ITERATIONS times: fork(), execl(PROGRAM) in the child, waitpid() in the parent.
 * PROGRAM is meant to be a dynamically linked `int main(void) { return 0; }`. With
 * --vfork-exit the child is vfork()ed and calls _exit(0) at once: the cheapest spawn there
 * is. Prints one line on stdout:
 *
 *   spawn_loop: iterations=N total_ns=T us_per_iter=U cpu_us_per_iter=C
 *
 * U is timed with CLOCK_MONOTONIC around the loop only, so a tracer's own start-up and
 * tear-down are not in it. C is the CPU time (user + system) of the loop and its children
 * over the same span, from getrusage(RUSAGE_SELF) and getrusage(RUSAGE_CHILDREN): it
 * includes the eBPF programs that ran in those tasks, and moves less than wall time when
 * the host's speed drifts. Exits 1 (with a message on stderr) if any iteration fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static long long tv_ns(struct timeval tv)
{
	return (long long)tv.tv_sec * 1000000000LL + (long long)tv.tv_usec * 1000LL;
}

/* CPU time (user + system) of this process and its waited-for children. */
static long long cpu_ns(void)
{
	struct rusage self, children;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &children);
	return tv_ns(self.ru_utime) + tv_ns(self.ru_stime) + tv_ns(children.ru_utime) +
	       tv_ns(children.ru_stime);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: spawn_loop ITERATIONS PROGRAM|--vfork-exit\n");
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
	int vfork_exit = strcmp(prog, "--vfork-exit") == 0;

	long long cpu_start = cpu_ns();
	long long start = now_ns();
	for (long i = 0; i < n; i++) {
		pid_t pid = vfork_exit ? vfork() : fork();
		if (pid < 0) {
			fprintf(stderr, "spawn_loop: fork: %s\n", strerror(errno));
			return 1;
		}
		if (pid == 0) {
			if (!vfork_exit)
				execl(prog, prog, (char *)NULL);
			_exit(vfork_exit ? 0 : 127);
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
	long long cpu = cpu_ns() - cpu_start;

	printf("spawn_loop: iterations=%ld total_ns=%lld us_per_iter=%.3f cpu_us_per_iter=%.3f\n",
	       n, total, (double)total / 1000.0 / (double)n, (double)cpu / 1000.0 / (double)n);
	return 0;
}
