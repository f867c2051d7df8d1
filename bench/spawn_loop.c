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
 *   spawn_loop: iterations=N total_ns=T us_per_iter=U cpu_us_per_iter=C loop_cpu_us_per_iter=L children_cpu_us_per_iter=K
 *
 * U is timed with CLOCK_MONOTONIC around the loop only, so a tracer's own start-up and
 * tear-down are not in it. C is the CPU time (user + system) of the loop and its children
 * over the same span, from getrusage(RUSAGE_SELF) and getrusage(RUSAGE_CHILDREN): it
 * includes the eBPF programs that ran in those tasks, and moves less than wall time when
 * the host's speed drifts. L and K are its two parts: the loop process's own (its forks and
 * waits) and its children's (each child's exec, start-up and exit). Each part is exact; its
 * split into user and system time is not, and is not printed: with tick-based accounting
 * (CONFIG_TICK_CPU_ACCOUNTING, as on the kernels measured) the kernel splits a task's time
 * by the timer ticks that land in each, and counts a child that got none, as most of these
 * do, all as user time (docs/kernel-findings.md). Exits 1 (with a message on stderr) if any
 * iteration fails.
 *
 * With SPAWN_LOOP_TRACER set, the line ends with tracer_cpu_us_per_iter=A: the CPU time of
 * the tracing process (all its threads, those that ended too) over the same span, which C
 * leaves out when the tracer is not the loop's child (forkprof's agent, strace). The
 * variable is a pid, or the name (comm) of the loop's nearest ancestor to measure, such as
 * `forkprof` for `forkprof run -- spawn_loop`. Exits 2 if that process is not found.
 */
#include <ctype.h>
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

/* CPU time (user + system) of this process (RUSAGE_SELF) or of its waited-for children
 * (RUSAGE_CHILDREN). */
static long long cpu_ns(int who)
{
	struct rusage usage;
	getrusage(who, &usage);
	return tv_ns(usage.ru_utime) + tv_ns(usage.ru_stime);
}

/* The parent pid and comm of `pid`, from /proc/PID/stat; 0 if it cannot be read. */
static pid_t parent_of(pid_t pid, char *comm, size_t size)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses; it ends at the last ')'. */
	char *open = strchr(buf, '('), *close = strrchr(buf, ')');
	if (!open || !close || close < open)
		return 0;
	size_t n = (size_t)(close - open - 1);
	if (n >= size)
		n = size - 1;
	memcpy(comm, open + 1, n);
	comm[n] = '\0';
	int ppid = 0;
	if (sscanf(close + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* The process that SPAWN_LOOP_TRACER names (a pid, or the comm of the nearest ancestor);
 * 0 when the variable is unset, -1 when it names no process. */
static pid_t tracer_pid(void)
{
	const char *want = getenv("SPAWN_LOOP_TRACER");
	if (!want || !*want)
		return 0;
	if (isdigit((unsigned char)want[0]))
		return (pid_t)atoi(want);
	char comm[64];
	for (pid_t pid = getppid(); pid > 1;) {
		pid_t parent = parent_of(pid, comm, sizeof(comm));
		if (parent == 0)
			break;
		if (strcmp(comm, want) == 0)
			return pid;
		pid = parent;
	}
	return -1;
}

/* CPU time (user + system) of process `pid`, every thread included; -1 if it is gone. */
static long long process_cpu_ns(pid_t pid)
{
	clockid_t clock;
	struct timespec ts;
	if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0)
		return -1;
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

	pid_t tracer = tracer_pid();
	long long tracer_start = tracer > 0 ? process_cpu_ns(tracer) : 0;
	if (tracer < 0 || tracer_start < 0) {
		fprintf(stderr, "spawn_loop: no process SPAWN_LOOP_TRACER=%s to measure\n",
			getenv("SPAWN_LOOP_TRACER"));
		return 2;
	}
	long long self_start = cpu_ns(RUSAGE_SELF), children_start = cpu_ns(RUSAGE_CHILDREN);
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
	long long self = cpu_ns(RUSAGE_SELF) - self_start;
	long long children = cpu_ns(RUSAGE_CHILDREN) - children_start;
	long long tracer_end = tracer > 0 ? process_cpu_ns(tracer) : 0;
	if (tracer_end < 0) {
		fprintf(stderr, "spawn_loop: tracer %d ended during the loop\n", (int)tracer);
		return 1;
	}

	/* Nanoseconds over the loop, divided by this, are microseconds per iteration. */
	double ns_to_us_per_iter = 1000.0 * (double)n;
	printf("spawn_loop: iterations=%ld total_ns=%lld us_per_iter=%.3f cpu_us_per_iter=%.3f "
	       "loop_cpu_us_per_iter=%.3f children_cpu_us_per_iter=%.3f",
	       n, total, (double)total / ns_to_us_per_iter,
	       (double)(self + children) / ns_to_us_per_iter, (double)self / ns_to_us_per_iter,
	       (double)children / ns_to_us_per_iter);
	if (tracer > 0)
		printf(" tracer_cpu_us_per_iter=%.3f",
		       (double)(tracer_end - tracer_start) / ns_to_us_per_iter);
	printf("\n");
	return 0;
}
